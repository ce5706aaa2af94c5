//! The registry: every mounted provider, the index names of their tools, availability, compiled
//! argument validators, the search corpus, and `axp.index` / `axp.describe`. It owns naming
//! (`<provider>__<tool>`, the 64-character rule, prefix modes, collisions) and knows nothing of
//! sessions or transports: callers filter by capability.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, RwLock};

use axp_protocol::methods::{DescribeResult, IndexEntry, IndexResult};
use axp_protocol::{ErrorCode, RpcError, ToolSpec};
use axp_providers::{DynProvider, ProviderId};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::catalog::search::{Doc, Index};
use crate::catalog::signature::signature;
use crate::config::fleet::PrefixMode;

/// At most this many characters in a tool name (the rule model APIs impose).
pub const MAX_NAME: usize = 64;
/// First line shown in the index.
pub const MAX_DESC: usize = 120;

/// How a provider is mounted.
#[derive(Clone)]
pub struct Mount {
    pub provider: DynProvider,
    pub kind: &'static str,
    pub prefix: PrefixMode,
}

/// One tool as the index knows it.
#[derive(Clone)]
pub struct Entry {
    pub name: String,
    pub provider: ProviderId,
    pub spec: ToolSpec,
    pub desc: String,
    pub signature: String,
    pub validator: Option<Arc<jsonschema::Validator>>,
    pub schema_error: Option<String>,
    /// Registration-lint findings shown by `axp.describe`.
    pub lint: Vec<Value>,
}

struct ProviderState {
    mount: Mount,
    tools: Vec<ToolSpec>,
    lint: HashMap<String, Vec<Value>>,
    available: bool,
    reason: Option<String>,
}

#[derive(Default)]
struct State {
    providers: BTreeMap<ProviderId, ProviderState>,
    /// Shared with every call that resolves one (a `tools/call` holds its entry for its life).
    entries: BTreeMap<String, Arc<Entry>>,
    /// The ranked search, with the tools' embeddings (kept across rebuilds by digest).
    search: Index,
    /// Registration problems (collisions), for `axp serve` logs and describe.
    problems: Vec<String>,
    /// The providers' tools changed since `entries`, `search` and `problems` were built: they
    /// are rebuilt on the next read that needs them, once for however many providers
    /// registered meanwhile (a fleet of hundreds registers at start-up one at a time).
    stale: bool,
}

/// Shared registry; cheap to clone.
#[derive(Clone)]
pub struct Registry {
    state: Arc<RwLock<State>>,
    /// Until when requests that read the catalog wait for providers still starting
    /// ([`Registry::settle`]).
    settle_by: tokio::time::Instant,
}

impl Default for Registry {
    fn default() -> Self {
        Self { state: Arc::default(), settle_by: tokio::time::Instant::now() + SETTLE }
    }
}

/// The reason a mounted provider carries until its first start ends.
pub const STARTING: &str = "starting";

/// How long after start-up a request that reads the catalog may wait for providers that are
/// still starting, so that a client connecting at once sees the whole first index. The gateway
/// itself listens at once; a slow server delays only those first requests, and only this long.
const SETTLE: std::time::Duration = std::time::Duration::from_secs(10);

/// A provider's state as `/healthz` reports it.
pub fn state_name(available: bool, reason: Option<&str>) -> &'static str {
    match (available, reason) {
        (true, _) => "up",
        (false, Some(STARTING)) => "starting",
        (false, _) => "down",
    }
}

/// A tool resolved for a call.
#[derive(Clone)]
pub struct Resolved {
    pub entry: Arc<Entry>,
    pub provider: DynProvider,
    pub available: bool,
    pub reason: Option<String>,
}

impl Registry {
    pub fn new() -> Self {
        Self::default()
    }

    /// Waits until no provider is starting, or until the start-up window has passed.
    pub async fn settle(&self) {
        while tokio::time::Instant::now() < self.settle_by {
            let starting =
                self.read_providers().providers.values().any(|p| !p.available && p.reason.as_deref() == Some(STARTING));
            if !starting {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(25)).await;
        }
    }

    /// Adds a provider (no tools yet; call [`Registry::set_tools`]).
    pub fn mount(&self, mount: Mount) {
        let id = mount.provider.id().clone();
        let mut st = self.write();
        st.providers.insert(
            id,
            ProviderState {
                mount,
                tools: Vec::new(),
                lint: HashMap::new(),
                available: false,
                reason: Some(STARTING.into()),
            },
        );
    }

    /// Removes a provider and its tools (a plugin that was uninstalled); returns it so the
    /// caller can shut it down.
    pub fn unmount(&self, id: &ProviderId) -> Option<DynProvider> {
        let mut st = self.write();
        let removed = st.providers.remove(id).map(|p| p.mount.provider);
        if removed.is_some() {
            st.stale = true;
        }
        removed
    }

    /// Replaces a provider's tool list; the index follows on the next read.
    pub fn set_tools(&self, id: &ProviderId, tools: Vec<ToolSpec>, lint: HashMap<String, Vec<Value>>) {
        let mut st = self.write();
        if let Some(p) = st.providers.get_mut(id) {
            p.tools = tools;
            p.lint = lint;
        }
        st.stale = true;
    }

    /// Every other provider's published tools (for catalog-wide lint rules).
    pub fn tools_except(&self, id: &ProviderId) -> Vec<(String, Vec<ToolSpec>)> {
        let st = self.read_providers();
        st.providers.iter().filter(|(p, _)| *p != id).map(|(p, s)| (p.to_string(), s.tools.clone())).collect()
    }

    pub fn set_available(&self, id: &ProviderId, available: bool, reason: Option<String>) {
        let mut st = self.write();
        if let Some(p) = st.providers.get_mut(id) {
            p.available = available;
            p.reason = reason;
        }
    }

    pub fn providers(&self) -> Vec<(ProviderId, &'static str, bool, Option<String>, usize)> {
        let st = self.read_providers();
        st.providers
            .iter()
            .map(|(id, p)| (id.clone(), p.mount.kind, p.available, p.reason.clone(), p.tools.len()))
            .collect()
    }

    /// Every mounted provider that is serving, with how it is mounted (the resource and prompt
    /// multiplexer asks each of them).
    pub fn available_mounts(&self) -> Vec<Mount> {
        self.read_providers().providers.values().filter(|p| p.available).map(|p| p.mount.clone()).collect()
    }

    /// How a provider is mounted, serving or not.
    pub fn mount_of(&self, id: &ProviderId) -> Option<(Mount, bool)> {
        self.read_providers().providers.get(id).map(|p| (p.mount.clone(), p.available))
    }

    pub fn provider(&self, id: &ProviderId) -> Option<DynProvider> {
        self.read_providers().providers.get(id).map(|p| p.mount.provider.clone())
    }

    pub fn problems(&self) -> Vec<String> {
        self.read().problems.clone()
    }

    pub fn len(&self) -> usize {
        self.read().entries.len()
    }

    /// Every entry (name order), filtered by `allow`.
    pub fn entries(&self, allow: &dyn Fn(&str) -> bool) -> Vec<(Arc<Entry>, bool)> {
        let st = self.read();
        st.entries
            .values()
            .filter(|e| allow(&e.name))
            .map(|e| (e.clone(), st.providers.get(&e.provider).is_some_and(|p| p.available)))
            .collect()
    }

    /// Every entry, filtered by `allow`, in the order its server lists it (providers in name
    /// order): what an MCP client's `tools/list` shows, as the server itself would.
    pub fn entries_in_server_order(&self, allow: &dyn Fn(&str) -> bool) -> Vec<(Arc<Entry>, bool)> {
        let st = self.read();
        let by_tool: HashMap<(&ProviderId, &str), &Arc<Entry>> =
            st.entries.values().map(|e| ((&e.provider, e.spec.name.as_str()), e)).collect();
        let mut out = Vec::with_capacity(by_tool.len());
        for (id, p) in &st.providers {
            for t in &p.tools {
                if let Some(e) = by_tool.get(&(id, t.name.as_str())).filter(|e| allow(&e.name)) {
                    out.push(((*e).clone(), p.available));
                }
            }
        }
        out
    }

    pub fn resolve(&self, name: &str) -> Option<Resolved> {
        let st = self.read();
        let entry = st.entries.get(name)?.clone();
        let p = st.providers.get(&entry.provider)?;
        Some(Resolved { provider: p.mount.provider.clone(), available: p.available, reason: p.reason.clone(), entry })
    }

    /// `axp.index`: one line per tool; with a query, ranked by the hybrid search (`search`).
    pub fn index(
        &self,
        query: Option<&str>,
        provider: Option<&str>,
        limit: usize,
        offset: usize,
        inline_signatures: bool,
        allow: &dyn Fn(&str) -> bool,
    ) -> IndexResult {
        let st = self.read();
        let keep = |e: &Entry| allow(&e.name) && provider.is_none_or(|p| e.provider.as_str() == p);
        let names: Vec<(&Entry, Option<f64>)> = match query.map(str::trim).filter(|q| !q.is_empty()) {
            Some(q) => st
                .search
                .search(q)
                .into_iter()
                .filter_map(|h| st.entries.get(&h.name).map(|e| (&**e, Some(h.score))))
                .filter(|(e, _)| keep(e))
                .collect(),
            None => st.entries.values().map(|e| (&**e, None)).filter(|(e, _)| keep(e)).collect(),
        };
        let total = names.len();
        let tools = names
            .into_iter()
            .skip(offset)
            .take(limit)
            .map(|(e, score)| IndexEntry {
                name: e.name.clone(),
                desc: e.desc.clone(),
                signature: inline_signatures.then(|| e.signature.clone()),
                unavailable: !st.providers.get(&e.provider).is_some_and(|p| p.available),
                score,
            })
            .collect();
        IndexResult { tools, total }
    }

    /// `axp.describe`.
    pub fn describe(&self, name: &str) -> Result<DescribeResult, RpcError> {
        let r = self.resolve(name).ok_or_else(|| unknown_tool(self, name))?;
        let e = r.entry;
        let mut lint = e.lint.clone();
        if let Some(err) = &e.schema_error {
            lint.push(json!({"rule": "schema", "message": err}));
        }
        Ok(DescribeResult {
            name: e.name.clone(),
            desc: e.desc.clone(),
            description: e.spec.description.clone(),
            signature: e.signature.clone(),
            schema: e.spec.input_schema.clone(),
            output_schema: e.spec.output_schema.clone(),
            provider: e.provider.to_string(),
            requires: vec![format!("tool({})", e.name)],
            available: r.available,
            annotations: e.spec.annotations.clone(),
            lint,
            instructions: r.provider.instructions(&e.spec.name),
        })
    }

    /// Validates arguments against the tool's schema: `-32602` with the JSON pointer and reason.
    pub fn validate(&self, entry: &Entry, args: &Value) -> Result<(), RpcError> {
        let Some(v) = &entry.validator else {
            return Ok(());
        };
        // The common case (valid arguments) without collecting error paths.
        if v.is_valid(args) {
            return Ok(());
        }
        let errors: Vec<(String, String)> =
            v.iter_errors(args).map(|e| (e.instance_path().to_string(), e.to_string())).collect();
        if errors.is_empty() {
            return Ok(());
        }
        let (pointer, reason) = &errors[0];
        let where_ = if pointer.is_empty() { "the arguments".to_string() } else { format!("`{pointer}`") };
        Err(RpcError::invalid_params(format!("invalid arguments for `{}`: {where_}: {reason}", entry.name))
            .with_data("pointer", pointer.clone())
            .with_data("errors", errors.iter().map(|(p, r)| json!({"pointer": p, "reason": r})).collect::<Vec<_>>())
            .with_data("signature", entry.signature.clone()))
    }

    /// The state with its index up to date (rebuilt here first when providers changed).
    fn read(&self) -> std::sync::RwLockReadGuard<'_, State> {
        {
            let st = self.read_providers();
            if !st.stale {
                return st;
            }
        }
        {
            let mut st = self.write();
            if st.stale {
                rebuild(&mut st);
                st.stale = false;
            }
        }
        self.read_providers()
    }

    /// The state for questions about providers only (their tools, availability), which the
    /// index does not answer: no rebuild.
    fn read_providers(&self) -> std::sync::RwLockReadGuard<'_, State> {
        self.state.read().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, State> {
        self.state.write().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// `UnknownTool` with the nearest names as a hint.
pub fn unknown_tool(reg: &Registry, name: &str) -> RpcError {
    let st = reg.read();
    let near = crate::config::nearest(name, st.entries.keys().map(String::as_str));
    let hint = match near {
        Some(n) => format!("; did you mean `{n}`?"),
        // Both ways to list: agents call the method, people run the CLI.
        None => "; list the tools with `axp.index` (from the command line: `axp index`)".to_string(),
    };
    RpcError::new(ErrorCode::UnknownTool, format!("no tool named `{name}`{hint}"))
}

/// The first sentence of a description, at most [`MAX_DESC`] characters.
pub fn first_line(desc: &str) -> String {
    let d = desc.trim();
    let mut end = d.find('\n').unwrap_or(d.len());
    if let Some(i) = d[..end].find(". ") {
        end = i + 1;
    }
    let s = d[..end].trim();
    if s.chars().count() <= MAX_DESC {
        s.to_string()
    } else {
        let cut: String = s.chars().take(MAX_DESC - 1).collect();
        format!("{}…", cut.trim_end())
    }
}

/// Replaces characters outside `[a-zA-Z0-9_-]` and shortens over-long names with a stable hash
/// suffix, so the result always satisfies the 64-character rule.
pub fn legal_name(raw: &str) -> String {
    let clean: String =
        raw.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '-' { c } else { '_' }).collect();
    let clean = if clean.is_empty() { "_".to_string() } else { clean };
    if clean.len() <= MAX_NAME && clean == raw {
        return clean;
    }
    if clean.len() <= MAX_NAME {
        return clean;
    }
    let digest = Sha256::digest(raw.as_bytes());
    let suffix: String = digest.iter().take(4).map(|b| format!("{b:02x}")).collect();
    format!("{}_{suffix}", &clean[..MAX_NAME - 9])
}

fn rebuild(st: &mut State) {
    // Count plain tool names across providers for the `conditional` prefix mode.
    let mut plain_count: HashMap<String, usize> = HashMap::new();
    for p in st.providers.values() {
        for t in &p.tools {
            *plain_count.entry(t.name.clone()).or_default() += 1;
        }
    }
    let mut entries: BTreeMap<String, Arc<Entry>> = BTreeMap::new();
    let mut problems = Vec::new();
    // Entries whose tool did not change are kept as they are: building an entry compiles its
    // schema's validator and signature, and providers register one at a time, so rebuilding
    // every entry each time made start-up quadratic in the catalog.
    let previous = std::mem::take(&mut st.entries);
    for (id, p) in &st.providers {
        for t in &p.tools {
            let prefixed = match p.mount.prefix {
                PrefixMode::Always => true,
                PrefixMode::Never => false,
                PrefixMode::Conditional => plain_count.get(&t.name).copied().unwrap_or(0) > 1,
            };
            let raw = if prefixed { format!("{}__{}", id, t.name) } else { t.name.clone() };
            let name = legal_name(&raw);
            if let Some(prev) = entries.get(&name) {
                problems.push(format!(
                    "tool name collision: `{name}` from provider `{id}` (tool `{}`) clashes with provider `{}` (tool `{}`); the second is not published — set `prefix` for one of them",
                    t.name, prev.provider, prev.spec.name
                ));
                continue;
            }
            let lint = p.lint.get(&t.name).cloned().unwrap_or_default();
            if let Some(old) = previous.get(&name).filter(|e| e.provider == *id && e.spec == *t && e.lint == lint) {
                entries.insert(name, old.clone());
                continue;
            }
            let (validator, schema_error) = match jsonschema::options().build(&t.input_schema) {
                Ok(v) => (Some(Arc::new(v)), None),
                Err(e) => (None, Some(format!("the input schema is not valid JSON Schema: {e}"))),
            };
            entries.insert(
                name.clone(),
                Arc::new(Entry {
                    signature: signature(&name, &t.input_schema, t.output_schema.as_ref()),
                    desc: first_line(&t.description),
                    name,
                    provider: id.clone(),
                    spec: t.clone(),
                    validator,
                    schema_error,
                    lint,
                }),
            );
        }
    }
    let docs = entries.values().map(|e| Doc::from_schema(&e.name, &e.spec.description, &e.spec.input_schema)).collect();
    // Tools whose text did not change keep their embedding: only new or changed ones are
    // embedded again.
    st.search = st.search.rebuilt(docs);
    st.entries = entries;
    st.problems = problems;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_fit_the_rule() {
        assert_eq!(legal_name("time__get_current_time"), "time__get_current_time");
        assert_eq!(legal_name("fs__read.file/x"), "fs__read_file_x");
        let long = format!("p__{}", "x".repeat(100));
        let n = legal_name(&long);
        assert_eq!(n.len(), MAX_NAME);
        assert_eq!(n, legal_name(&long), "stable");
        assert_ne!(n, legal_name(&format!("p__{}y", "x".repeat(100))), "distinct");
        assert!(n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-'));
    }

    #[test]
    fn first_line_is_short() {
        assert_eq!(first_line("Echoes back the input. Use it for tests."), "Echoes back the input.");
        assert_eq!(first_line("Line one\nline two"), "Line one");
        let long = "word ".repeat(60);
        assert!(first_line(&long).chars().count() <= MAX_DESC);
        assert_eq!(first_line("Version 1.2 is here"), "Version 1.2 is here");
    }
}
