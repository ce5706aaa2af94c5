//! The catalog face: `axp.index` (its result shape, paging with `offset`/`limit`, `query`),
//! `axp.describe` (a listed tool's schema; an unknown tool's error), and the choice of the tool
//! the job checks call.

use std::collections::HashSet;

use axp_protocol::Capability;
use axp_protocol::methods::{DescribeResult, IndexEntry, IndexResult};
use serde_json::{Value, json};

use super::{Runner, missing};
use crate::report::{Stop, Verdict, ensure};
use crate::tool::{Choice, KNOWN, generic_arguments, known_arguments};
use crate::wire::{Conn, describe, short};

/// The largest page the runner asks for (the gateway clamps `limit` to 1..=500).
const MAX_PAGE: usize = 500;
/// How far the paging check walks in pages of [`PAGE`].
const PAGED: usize = 40;
const PAGE: usize = 3;
/// How many listed tools the runner describes, at most, looking for one it may call.
const DESCRIBE_AT_MOST: usize = 50;
/// A tool name no endpoint lists.
pub(super) const NO_SUCH_TOOL: &str = "axp_conformance__no_such_tool";

async fn index(c: &mut Conn, params: Value) -> Result<IndexResult, Stop> {
    let r = c.ok("axp.index", params.clone()).await?;
    serde_json::from_value(r.clone())
        .map_err(|e| Stop::Fail(format!("axp.index {params}: not an index result ({e}): {}", short(&r))))
}

pub(super) async fn describe_tool(c: &mut Conn, name: &str) -> Result<DescribeResult, Stop> {
    let r = c.ok("axp.describe", json!({"name": name})).await?;
    serde_json::from_value(r.clone())
        .map_err(|e| Stop::Fail(format!("axp.describe {name}: not a describe result ({e}): {}", short(&r))))
}

impl Runner {
    /// `axp.index {limit: 500}`: entries with a name and a one-line description, no name twice,
    /// and no more entries than `total` says (all of them when `total` fits in one page).
    pub(super) async fn index_list(&mut self) -> Verdict {
        let mut c = self.conn()?;
        let r = index(&mut c, json!({"limit": MAX_PAGE})).await?;
        let mut seen = HashSet::new();
        for t in &r.tools {
            ensure(!t.name.is_empty(), || "an entry has an empty name".into())?;
            ensure(seen.insert(t.name.clone()), || format!("{} is listed twice", t.name))?;
        }
        ensure(r.tools.len() <= r.total, || format!("{} entries but total {}", r.tools.len(), r.total))?;
        if r.total <= MAX_PAGE {
            ensure(r.tools.len() == r.total, || {
                format!("limit {MAX_PAGE} gave {} of {} tools", r.tools.len(), r.total)
            })?;
        }
        let unavailable = r.tools.iter().filter(|t| t.unavailable).count();
        let detail = format!("{} tool(s) listed, {unavailable} unavailable", r.total);
        if r.tools.is_empty() {
            self.no_tool = "the endpoint lists no tool for this session".into();
        }
        self.listing = Some(r.tools);
        Ok(detail)
    }

    pub(super) fn listed(&self) -> Result<Vec<IndexEntry>, Stop> {
        match &self.listing {
            Some(l) => Ok(l.clone()),
            None if self.session.is_none() => Err(Stop::Skip(self.no_session.clone())),
            None => Err(Stop::Skip("axp.index did not list the tools".into())),
        }
    }

    /// Pages of `limit` 3 walked with `offset` give the same tools in the same order as one big
    /// page, each page holds at most `limit` entries, `total` is the same on every page, and an
    /// `offset` at the end gives an empty page.
    pub(super) async fn index_paging(&mut self) -> Verdict {
        let listing = self.listed()?;
        if listing.is_empty() {
            return Err(Stop::Skip("no tool is listed, so there is nothing to page through".into()));
        }
        let mut c = self.conn()?;
        let want: Vec<&str> = listing.iter().take(PAGED).map(|t| t.name.as_str()).collect();
        let total = index(&mut c, json!({"limit": 1})).await?.total;
        let mut got: Vec<String> = Vec::new();
        let mut pages = 0;
        while got.len() < want.len() {
            let page = index(&mut c, json!({"offset": got.len(), "limit": PAGE})).await?;
            pages += 1;
            ensure(page.total == total, || {
                format!("total is {} at offset {} but {total} before", page.total, got.len())
            })?;
            ensure(page.tools.len() <= PAGE, || format!("limit {PAGE} gave {} entries", page.tools.len()))?;
            ensure(!page.tools.is_empty(), || format!("offset {} gave an empty page before the end", got.len()))?;
            got.extend(page.tools.into_iter().map(|t| t.name));
        }
        got.truncate(want.len());
        ensure(got == want, || format!("the pages list {got:?} where one page lists {want:?}"))?;
        let end = index(&mut c, json!({"offset": total, "limit": PAGE})).await?;
        ensure(end.tools.is_empty(), || format!("offset {total} (the end) still lists {} tool(s)", end.tools.len()))?;
        Ok(format!("{} tool(s) in {pages} page(s) of {PAGE} match one page; offset {total} is empty", want.len()))
    }

    /// Picks the tool the job checks call: the one `--tool` names, else the first listed of the
    /// tools known to be read-only, else a listed tool annotated `readOnlyHint` that requires no
    /// argument. Its description must say it is available and its required arguments must be
    /// among the ones the runner sends.
    pub(super) async fn choose_tool(&mut self) -> Verdict {
        let listing = self.listed()?;
        let mut c = self.conn()?;
        let listed = |n: &str| listing.iter().any(|t| t.name == n && !t.unavailable);
        let mut pick: Option<(DescribeResult, serde_json::Map<String, Value>, String)> = None;
        if let Some((name, args)) = self.opts.tool.clone() {
            let d = describe_tool(&mut c, &name).await?;
            pick = Some((d, args, "named by --tool".into()));
        } else {
            for name in KNOWN {
                if let (true, Some(args)) = (listed(name), known_arguments(name)) {
                    let d = describe_tool(&mut c, name).await?;
                    pick = Some((d, args, "known to be read-only and cheap".into()));
                    break;
                }
            }
            if pick.is_none() {
                for t in listing.iter().filter(|t| !t.unavailable).take(DESCRIBE_AT_MOST) {
                    let d = describe_tool(&mut c, &t.name).await?;
                    if let Some(args) = generic_arguments(&d) {
                        pick = Some((d, args, "annotated readOnlyHint and needs no argument".into()));
                        break;
                    }
                }
            }
        }
        let Some((d, arguments, why)) = pick else {
            self.no_tool = format!(
                "no listed tool is known to be safe to call (one of {} or a readOnlyHint tool that needs no \
                 argument); name one with --tool NAME --arguments JSON",
                KNOWN.join(", ")
            );
            return Err(Stop::Skip(self.no_tool.clone()));
        };
        ensure(d.available, || format!("{} is described as unavailable", d.name))?;
        let required: Vec<&str> = d
            .schema
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        let absent: Vec<&&str> = required.iter().filter(|r| !arguments.contains_key(**r)).collect();
        ensure(absent.is_empty(), || format!("{} requires {absent:?}, which the arguments lack", d.name))?;
        let detail = format!("using {} {} ({why})", d.name, Value::Object(arguments.clone()));
        self.tool = Some(Choice { name: d.name, arguments, schema: d.schema, why });
        Ok(detail)
    }

    /// `axp.index {query: <a listed tool's name>}` finds that tool, lists nothing the plain
    /// index does not, and counts no more than it.
    pub(super) async fn index_query(&mut self) -> Verdict {
        let listing = self.listed()?;
        let name = match (&self.tool, listing.first()) {
            (Some(t), _) => t.name.clone(),
            (None, Some(t)) => t.name.clone(),
            (None, None) => return Err(Stop::Skip("no tool is listed, so there is nothing to search for".into())),
        };
        let mut c = self.conn()?;
        let all = index(&mut c, json!({"limit": 1})).await?.total;
        let r = index(&mut c, json!({"query": name, "limit": MAX_PAGE})).await?;
        ensure(r.tools.iter().any(|t| t.name == name), || {
            format!("query {name:?} does not find {name}: {:?}", r.tools.iter().map(|t| &t.name).collect::<Vec<_>>())
        })?;
        ensure(r.total <= all, || format!("query {name:?} counts {} tools of {all}", r.total))?;
        if listing.len() == all {
            let stray: Vec<&String> =
                r.tools.iter().map(|t| &t.name).filter(|n| !listing.iter().any(|l| &l.name == *n)).collect();
            ensure(stray.is_empty(), || format!("query {name:?} lists tools the index does not: {stray:?}"))?;
        }
        let rank = r.tools.iter().position(|t| t.name == name).unwrap_or_default() + 1;
        Ok(format!("query {name:?}: {} match(es) of {all}, {name} ranked {rank}", r.total))
    }

    /// `axp.describe` of a listed tool: every field of protocol.md with its type
    /// (`DescribeResult`), the name asked for, a JSON Schema of an object, a signature, and the
    /// availability the index shows.
    pub(super) async fn describe_listed(&mut self) -> Verdict {
        let listing = self.listed()?;
        let name = match (&self.tool, listing.first()) {
            (Some(t), _) => t.name.clone(),
            (None, Some(t)) => t.name.clone(),
            (None, None) => return Err(Stop::Skip("no tool is listed, so there is nothing to describe".into())),
        };
        let mut c = self.conn()?;
        let d = describe_tool(&mut c, &name).await?;
        ensure(d.name == name, || format!("asked for {name}, described {}", d.name))?;
        ensure(d.schema.get("type").and_then(Value::as_str) == Some("object"), || {
            format!("the schema of {name} is not an object schema: {}", short(&d.schema))
        })?;
        ensure(!d.signature.trim().is_empty(), || format!("{name} has an empty signature"))?;
        ensure(!d.provider.is_empty(), || format!("{name} names no provider"))?;
        if let Some(entry) = listing.iter().find(|t| t.name == name) {
            ensure(d.available != entry.unavailable, || {
                format!(
                    "describe says available={} where the index says unavailable={}",
                    d.available, entry.unavailable
                )
            })?;
        }
        let props = d.schema.get("properties").and_then(Value::as_object).map_or(0, |p| p.len());
        Ok(format!("{name} from provider {}: {props} propert(ies), signature {}", d.provider, d.signature))
    }

    /// `axp.describe` of a tool no endpoint has: -32004 UnknownTool when the session's grants
    /// cover the name (a name made from one of its `tool(GLOB)` patterns), else -32002
    /// CapabilityDenied naming the grant — a token may not learn whether a tool outside its
    /// grants exists.
    pub(super) async fn describe_unknown(&mut self) -> Verdict {
        let mut c = self.conn()?;
        let s = self.session.as_ref().ok_or_else(|| Stop::Skip(self.no_session.clone()))?;
        let listing = self.listing.clone().unwrap_or_default();
        let covered = s.grants.iter().find_map(|g| match g {
            Capability::Tool(glob) if glob.contains(['*', '?']) => {
                let name = glob.replacen('*', "axp_conformance_no_such_tool", 1).replace('*', "").replace('?', "x");
                (s.grants.allows_tool(&name) && !listing.iter().any(|t| t.name == name)).then_some(name)
            }
            _ => None,
        });
        match covered {
            Some(name) => {
                let e = c.err("axp.describe", json!({"name": name})).await?;
                ensure(e.code == -32004, || {
                    format!("an unknown tool the token covers got {} instead of -32004 UnknownTool", describe(&e))
                })?;
                Ok(format!("{name}: {}", describe(&e)))
            }
            None => {
                let e = c.err("axp.describe", json!({"name": NO_SUCH_TOOL})).await?;
                let grant = format!("tool({NO_SUCH_TOOL})");
                ensure(e.code == -32002 && missing(&e) == Some(grant.as_str()), || {
                    format!(
                        "an unknown tool outside the token's grants got {}, not -32002 naming {grant}",
                        describe(&e)
                    )
                })?;
                Ok(format!("{NO_SUCH_TOOL} (no grant pattern covers an unknown name): {}", describe(&e)))
            }
        }
    }
}
