//! Who may do what: sessions and their capability tokens (`session`), grants resolved to real
//! paths (`grants`), the sandbox tiers a session may ask for (`tiers`), operators and their
//! signed envelopes (`operators`, `envelope`), per-session quotas (`quotas`), and the
//! operator's policy bundled for the router (`guard`: operators, approvals, quotas).

pub mod envelope;
pub mod grants;
pub mod guard;
pub mod operators;
pub mod quotas;
pub mod session;
pub mod tiers;
