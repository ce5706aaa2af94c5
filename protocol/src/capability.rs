//! The capability grammar (DESIGN §3): parsing, printing and the covering relation that makes
//! attenuation safe. Pure functions only, so they can be property-tested and fuzzed; tokens that
//! carry these grants live elsewhere.
//!
//! | string | meaning |
//! |---|---|
//! | `fs.read(PATH)` / `fs.write(PATH)` | read / write at or below an absolute, normalised PATH |
//! | `net.connect(DOMAIN[:PORT])` | egress to DOMAIN; `*.example.com` matches sub-domains only |
//! | `proc.spawn` | start processes inside the sandbox |
//! | `tool(GLOB)` | call tools whose index name matches GLOB (`*` and `?`) |
//! | `pty.open` | allocate a pseudo-terminal |

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// One grant.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Capability {
    FsRead(String),
    FsWrite(String),
    NetConnect {
        host: String,
        port: Option<u16>,
    },
    ProcSpawn,
    Tool(String),
    /// A resource, named `<provider>__<uri>` with the provider's own URI, whatever the URI the
    /// client sees.
    Resource(String),
    /// A prompt, by the name clients see (`<provider>__<prompt>` unless its server is mounted
    /// with `prefix` `never`), as tools are.
    Prompt(String),
    PtyOpen,
}

/// Why a capability string was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid capability `{input}`: {reason}")]
pub struct CapabilityParseError {
    pub input: String,
    pub reason: String,
}

fn perr(input: &str, reason: impl Into<String>) -> CapabilityParseError {
    CapabilityParseError { input: input.to_string(), reason: reason.into() }
}

impl FromStr for Capability {
    type Err = CapabilityParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim();
        match t {
            "proc.spawn" => return Ok(Capability::ProcSpawn),
            "pty.open" => return Ok(Capability::PtyOpen),
            _ => {}
        }
        let (verb, arg) = t
            .split_once('(')
            .and_then(|(v, rest)| rest.strip_suffix(')').map(|a| (v, a)))
            .ok_or_else(|| {
                perr(
                    s,
                    "expected one of fs.read(PATH), fs.write(PATH), net.connect(DOMAIN[:PORT]), proc.spawn, tool(GLOB), resource(GLOB), prompt(GLOB), pty.open",
                )
            })?;
        match verb {
            "fs.read" => Ok(Capability::FsRead(normalise_path(s, arg)?)),
            "fs.write" => Ok(Capability::FsWrite(normalise_path(s, arg)?)),
            "net.connect" => {
                let (host, port) = parse_host_port(s, arg)?;
                Ok(Capability::NetConnect { host, port })
            }
            "tool" => {
                if arg.is_empty() || !arg.chars().all(|c| c.is_ascii_alphanumeric() || "_-*?".contains(c)) {
                    return Err(perr(s, "a tool glob uses letters, digits, `_`, `-`, `*` and `?` only"));
                }
                Ok(Capability::Tool(arg.to_string()))
            }
            "prompt" => {
                if arg.is_empty() || !arg.chars().all(|c| c.is_ascii_alphanumeric() || "_-.*?".contains(c)) {
                    return Err(perr(s, "a prompt glob uses letters, digits, `_`, `-`, `.`, `*` and `?` only"));
                }
                Ok(Capability::Prompt(arg.to_string()))
            }
            "resource" => {
                if arg.is_empty() || arg.chars().any(|c| c.is_control() || c.is_whitespace()) {
                    return Err(perr(s, "a resource glob is `<provider>__<uri>` with `*` and `?`, and no spaces"));
                }
                if !arg.contains("__") && arg != "*" && !arg.starts_with('*') {
                    return Err(perr(
                        s,
                        "a resource glob names the provider first: `<provider>__<uri>` (e.g. `fs__file:///srv/*`), or `*`",
                    ));
                }
                Ok(Capability::Resource(arg.to_string()))
            }
            other => Err(perr(s, format!("unknown capability kind `{other}`"))),
        }
    }
}

/// Checks that `arg` is an absolute path without `.`/`..` components or NUL bytes, and strips a
/// trailing slash. Refusing `..` (rather than resolving it) keeps the grammar free of any
/// filesystem lookup.
fn normalise_path(input: &str, arg: &str) -> Result<String, CapabilityParseError> {
    if !arg.starts_with('/') {
        return Err(perr(input, "the path must be absolute"));
    }
    if arg.contains('\0') {
        return Err(perr(input, "the path contains a NUL byte"));
    }
    let mut out = String::new();
    for comp in arg.split('/').filter(|c| !c.is_empty()) {
        if comp == "." || comp == ".." {
            return Err(perr(input, "the path must not contain `.` or `..` components"));
        }
        out.push('/');
        out.push_str(comp);
    }
    if out.is_empty() {
        out.push('/');
    }
    Ok(out)
}

fn parse_host_port(input: &str, arg: &str) -> Result<(String, Option<u16>), CapabilityParseError> {
    let arg = arg.trim();
    let (host, port) = if let Some(rest) = arg.strip_prefix('[') {
        let (h, after) = rest.split_once(']').ok_or_else(|| perr(input, "unclosed `[` in an IPv6 address"))?;
        let port = match after {
            "" => None,
            p => Some(p.strip_prefix(':').ok_or_else(|| perr(input, "expected `:PORT` after `]`"))?),
        };
        if h.parse::<std::net::Ipv6Addr>().is_err() {
            return Err(perr(input, "not an IPv6 address inside `[...]`"));
        }
        (format!("[{}]", h.to_ascii_lowercase()), port)
    } else {
        match arg.rsplit_once(':') {
            Some((h, p)) => (h.to_ascii_lowercase(), Some(p)),
            None => (arg.to_ascii_lowercase(), None),
        }
    };
    let port = match port {
        None => None,
        Some(p) => match p.parse::<u16>() {
            Ok(n) if n > 0 => Some(n),
            _ => return Err(perr(input, format!("`{p}` is not a port number (1-65535)"))),
        },
    };
    if !host.starts_with('[') {
        let bare = host.strip_prefix("*.").unwrap_or(&host);
        let host_ok = !bare.is_empty()
            && bare.len() <= 253
            && !bare.ends_with('.')
            && bare.split('.').all(|l| {
                !l.is_empty()
                    && l.len() <= 63
                    && !l.starts_with('-')
                    && !l.ends_with('-')
                    && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
            });
        if !host_ok {
            return Err(perr(
                input,
                "the host must be a DNS name (letters, digits, `-`, dots; optional leading `*.`) or an IP address",
            ));
        }
    }
    Ok((host, port))
}

impl fmt::Display for Capability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Capability::FsRead(p) => write!(f, "fs.read({p})"),
            Capability::FsWrite(p) => write!(f, "fs.write({p})"),
            Capability::NetConnect { host, port: None } => write!(f, "net.connect({host})"),
            Capability::NetConnect { host, port: Some(p) } => write!(f, "net.connect({host}:{p})"),
            Capability::ProcSpawn => f.write_str("proc.spawn"),
            Capability::Tool(g) => write!(f, "tool({g})"),
            Capability::Resource(g) => write!(f, "resource({g})"),
            Capability::Prompt(g) => write!(f, "prompt({g})"),
            Capability::PtyOpen => f.write_str("pty.open"),
        }
    }
}

impl Serialize for Capability {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Capability {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// `true` when `path` is `base` or below it (both normalised).
pub fn path_within(path: &str, base: &str) -> bool {
    base == "/" || path == base || (path.starts_with(base) && path.as_bytes().get(base.len()) == Some(&b'/'))
}

/// `true` when the grant `pattern` (`example.com` or `*.example.com`) admits the host `host`
/// (a concrete name, or another pattern when checking attenuation).
pub fn host_matches(pattern: &str, host: &str) -> bool {
    match pattern.strip_prefix("*.") {
        None => pattern == host,
        Some(suffix) => {
            let h = host.strip_prefix("*.").unwrap_or(host);
            h.len() > suffix.len() && h.ends_with(suffix) && h.as_bytes()[h.len() - suffix.len() - 1] == b'.'
        }
    }
}

/// Glob match with `*` (any run) and `?` (one character), on bytes.
pub fn glob_matches(glob: &str, name: &str) -> bool {
    glob_covers(glob, name)
}

/// `true` when every string matched by `child` is matched by `parent` (both globs). Sound, and
/// complete for the patterns people write; literal strings are globs with no wildcards, so this
/// is also plain matching. Dynamic programming over both patterns keeps it polynomial.
pub fn glob_covers(parent: &str, child: &str) -> bool {
    let p = parent.as_bytes();
    let c = child.as_bytes();
    // ok[i][j]: child[i..] is covered by parent[j..].
    let mut ok = vec![vec![false; p.len() + 1]; c.len() + 1];
    ok[c.len()][p.len()] = true;
    for i in (0..=c.len()).rev() {
        for j in (0..p.len()).rev() {
            ok[i][j] = if p[j] == b'*' {
                ok[i][j + 1] || (i < c.len() && ok[i + 1][j])
            } else if i == c.len() || c[i] == b'*' {
                false
            } else if p[j] == b'?' {
                ok[i + 1][j + 1]
            } else {
                c[i] == p[j] && ok[i + 1][j + 1]
            };
        }
    }
    ok[0][0]
}

impl Capability {
    /// `true` when `self` (a parent grant) admits everything `child` admits.
    pub fn covers(&self, child: &Capability) -> bool {
        use Capability::*;
        match (self, child) {
            (FsRead(p), FsRead(c)) => path_within(c, p),
            // Write implies read below the same path.
            (FsWrite(p), FsRead(c)) | (FsWrite(p), FsWrite(c)) => path_within(c, p),
            (NetConnect { host: ph, port: pp }, NetConnect { host: ch, port: cp }) => {
                let host_ok = ph == ch || host_matches(ph, ch);
                let port_ok = match (pp, cp) {
                    (None, _) => true,
                    (Some(a), Some(b)) => a == b,
                    (Some(_), None) => false,
                };
                host_ok && port_ok
            }
            (ProcSpawn, ProcSpawn) | (PtyOpen, PtyOpen) => true,
            (Tool(p), Tool(c)) | (Resource(p), Resource(c)) | (Prompt(p), Prompt(c)) => glob_covers(p, c),
            _ => false,
        }
    }
}

/// An ordered set of grants with the queries the gateway asks of it.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct CapabilitySet(pub Vec<Capability>);

impl CapabilitySet {
    /// Parses every string, collecting all errors into one.
    pub fn parse_all<S: AsRef<str>>(items: &[S]) -> Result<Self, Vec<CapabilityParseError>> {
        let mut caps = Vec::new();
        let mut errs = Vec::new();
        for s in items {
            match s.as_ref().parse() {
                Ok(c) => caps.push(c),
                Err(e) => errs.push(e),
            }
        }
        if errs.is_empty() { Ok(Self(caps)) } else { Err(errs) }
    }

    pub fn iter(&self) -> impl Iterator<Item = &Capability> {
        self.0.iter()
    }

    pub fn allows(&self, wanted: &Capability) -> bool {
        self.0.iter().any(|c| c.covers(wanted))
    }

    pub fn allows_tool(&self, index_name: &str) -> bool {
        self.0.iter().any(|c| matches!(c, Capability::Tool(g) if glob_matches(g, index_name)))
    }

    /// `true` when a grant admits the resource `<provider>__<uri>` (the provider's own URI).
    pub fn allows_resource(&self, provider: &str, uri: &str) -> bool {
        let name = format!("{provider}__{uri}");
        self.0.iter().any(|c| matches!(c, Capability::Resource(g) if glob_matches(g, &name)))
    }

    /// `true` when a grant admits the prompt named `index_name` (the name clients see).
    pub fn allows_prompt(&self, index_name: &str) -> bool {
        self.0.iter().any(|c| matches!(c, Capability::Prompt(g) if glob_matches(g, index_name)))
    }

    pub fn allows_spawn(&self) -> bool {
        self.0.contains(&Capability::ProcSpawn)
    }

    pub fn allows_pty(&self) -> bool {
        self.0.contains(&Capability::PtyOpen)
    }

    pub fn allows_read(&self, path: &str) -> bool {
        self.allows(&Capability::FsRead(path.to_string()))
    }

    pub fn allows_write(&self, path: &str) -> bool {
        self.allows(&Capability::FsWrite(path.to_string()))
    }

    pub fn allows_net(&self, host: &str, port: u16) -> bool {
        self.allows(&Capability::NetConnect { host: host.to_ascii_lowercase(), port: Some(port) })
    }

    /// The first grant of `child` that `self` does not cover, if any: attenuation is valid only
    /// when this is `None`.
    pub fn first_uncovered<'a>(&self, child: &'a CapabilitySet) -> Option<&'a Capability> {
        child.0.iter().find(|c| !self.allows(c))
    }

    /// The grants as strings, for the wire.
    pub fn to_strings(&self) -> Vec<String> {
        self.0.iter().map(ToString::to_string).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cap(s: &str) -> Capability {
        s.parse().unwrap()
    }

    #[test]
    fn round_trips() {
        for s in [
            "fs.read(/work)",
            "fs.write(/work/out)",
            "net.connect(api.example.com)",
            "net.connect(*.example.com:443)",
            "net.connect([::1]:8080)",
            "proc.spawn",
            "tool(github__*)",
            "pty.open",
        ] {
            assert_eq!(cap(s).to_string(), s);
        }
        assert_eq!(cap("fs.read(/a//b/)").to_string(), "fs.read(/a/b)");
        assert_eq!(cap("net.connect(API.Example.COM)").to_string(), "net.connect(api.example.com)");
    }

    #[test]
    fn rejects_bad_grants() {
        for s in [
            "fs.read(relative)",
            "fs.read(/a/../etc)",
            "fs.write(/a/./b)",
            "net.connect(exa mple.com)",
            "net.connect(example.com:0)",
            "net.connect(example.com:99999)",
            "net.connect(evil.test#@allowed.com)",
            "net.connect(allowed.com.)",
            "net.connect([zz]:1)",
            "tool()",
            "tool(a b)",
            "proc.spawnx",
            "shell(rm)",
            "fs.read(/a",
        ] {
            assert!(s.parse::<Capability>().is_err(), "{s} should be refused");
        }
    }

    #[test]
    fn paths_cover_by_component() {
        assert!(cap("fs.read(/work)").covers(&cap("fs.read(/work/a/b)")));
        assert!(cap("fs.read(/work)").covers(&cap("fs.read(/work)")));
        assert!(!cap("fs.read(/work)").covers(&cap("fs.read(/workshop)")));
        assert!(cap("fs.write(/work)").covers(&cap("fs.read(/work/x)")));
        assert!(!cap("fs.read(/work)").covers(&cap("fs.write(/work/x)")));
        assert!(cap("fs.read(/)").covers(&cap("fs.read(/etc)")));
    }

    #[test]
    fn domains_cover_subdomains_only_with_wildcard() {
        let star = cap("net.connect(*.example.com)");
        assert!(star.covers(&cap("net.connect(a.example.com:443)")));
        assert!(star.covers(&cap("net.connect(*.a.example.com)")));
        assert!(!star.covers(&cap("net.connect(example.com)")));
        assert!(!star.covers(&cap("net.connect(badexample.com)")));
        assert!(!star.covers(&cap("net.connect(example.com.evil.test)")));
        let port = cap("net.connect(example.com:443)");
        assert!(port.covers(&cap("net.connect(example.com:443)")));
        assert!(!port.covers(&cap("net.connect(example.com:80)")));
        assert!(!port.covers(&cap("net.connect(example.com)")));
    }

    #[test]
    fn globs_cover_narrower_globs() {
        assert!(glob_covers("github__*", "github__create_issue"));
        assert!(glob_covers("github__*", "github__create_*"));
        assert!(glob_covers("*", "anything*"));
        assert!(glob_covers("a?c", "abc"));
        assert!(!glob_covers("a?c", "a*c"));
        assert!(!glob_covers("github__create_*", "github__*"));
        assert!(!glob_covers("time__*", "github__x"));
        assert!(glob_covers("*__echo", "everything__echo"));
        assert!(!glob_covers("abc", "ab?"));
    }

    #[test]
    fn set_queries() {
        let set = CapabilitySet::parse_all(&["tool(time__*)", "proc.spawn", "fs.write(/w)"]).unwrap();
        assert!(set.allows_tool("time__get_current_time"));
        assert!(!set.allows_tool("everything__echo"));
        assert!(set.allows_spawn());
        assert!(!set.allows_pty());
        assert!(set.allows_read("/w/a"));
        let child = CapabilitySet::parse_all(&["tool(time__get_*)", "fs.read(/w/sub)"]).unwrap();
        assert_eq!(set.first_uncovered(&child), None);
        let wider = CapabilitySet::parse_all(&["tool(*)"]).unwrap();
        assert_eq!(set.first_uncovered(&wider), Some(&cap("tool(*)")));
        let errs = CapabilitySet::parse_all(&["nope", "tool(x)", "fs.read(rel)"]).unwrap_err();
        assert_eq!(errs.len(), 2);
    }
}
