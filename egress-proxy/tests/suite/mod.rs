//! Test modules: `fixtures` (DNS, upstreams, proxy, clients), `positive` (granted traffic works),
//! `child` (the per-owner child process and its control protocol),
//! `bypass` (the attack battery: each attempt is denied with the right audit reason), `limits`.

mod bypass;
mod child;
mod fixtures;
mod limits;
mod positive;
