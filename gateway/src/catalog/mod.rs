//! The tools the gateway offers: the registry of mounted providers and their index names
//! (`registry`), the search over them (`search`), the TypeScript signatures `axp.index` shows
//! (`signature`), the registration lint and tool pins every published tool passes
//! (`admission`), the mounting of a configured fleet as providers (`providers`), and the
//! reversible rewrite that keeps resource URIs from many servers apart (`uris`).

pub mod admission;
pub mod providers;
pub mod registry;
pub mod search;
pub mod signature;
pub mod uris;
