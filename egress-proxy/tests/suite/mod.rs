//! Test modules: `fixtures` (DNS, upstreams, proxy, clients), `positive` (granted traffic works),
//! `bypass` (the attack battery: each attempt is denied with the right audit reason), `limits`.

mod bypass;
mod fixtures;
mod limits;
mod positive;
