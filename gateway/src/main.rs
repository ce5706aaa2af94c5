//! The `axp` binary. Being built under issue 2.
fn main() {}
