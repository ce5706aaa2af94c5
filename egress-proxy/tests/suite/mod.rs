//! Test modules: `fixtures` (DNS, upstreams, proxy, clients), `positive` (granted traffic works),
//! `child` (the per-owner child process and its control protocol),
//! `bypass` (the attack battery: each attempt is denied with the right audit reason), `limits`,
//! `pool` (upstream connections kept between plain-HTTP requests), `smuggling` (request smuggling
//! and virtual-host confusion against a lenient origin, plain and inside tunnels).

mod bypass;
mod child;
mod fixtures;
mod limits;
mod pool;
mod positive;
mod smuggling;
