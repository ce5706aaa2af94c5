//! A stand-alone `__plugin-host` entry for tests and benchmarks of this crate: the `axp`
//! binary dispatches the same function itself. It does nothing else.

fn main() {
    axp_plugin_host::plugin_host_main(std::env::args_os().skip(1));
}
