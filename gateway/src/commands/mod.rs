//! One module per subcommand (serve, and the client commands against a running gateway).

pub mod audit;
pub mod client;
pub mod completions;
pub mod doctor;
pub mod lint;
pub mod operator;
pub mod progress;
pub mod provider;
pub mod sandbox;
pub mod serve;
pub mod token;
