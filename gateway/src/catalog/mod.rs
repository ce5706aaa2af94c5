//! The tools the gateway offers: the registry of mounted providers and their index names
//! (`registry`), the search over them (`search`), the TypeScript signatures `axp.index` shows
//! (`signature`), the registration lint and tool pins every published tool passes
//! (`admission`), and the mounting of a configured fleet as providers (`providers`).

pub mod admission;
pub mod providers;
pub mod registry;
pub mod search;
pub mod signature;
