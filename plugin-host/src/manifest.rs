//! `axp-plugin.toml`: the plugin manifest, parsed and validated. This file owns the manifest's
//! shape, its syntax rules and the over-reach rules (what a manifest may never ask for); it does
//! no I/O beyond reading the file it is given, and it never decides what an installed plugin may
//! do at run time beyond what the manifest grants.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The plugin ABI this host speaks (the WIT package `axp:provider@0.1.0` and the C header's
/// `AXP_PLUGIN_ABI_VERSION`).
pub const ABI_VERSION: &str = "0.1.0";

/// The manifest's file name inside a plugin directory.
pub const MANIFEST_FILE: &str = "axp-plugin.toml";

/// What kind of artifact a plugin is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PluginKind {
    /// A WASM component targeting the `axp:provider` world.
    Wasm,
    /// A native shared library exporting `axp_plugin_v0` (plugins/include/axp_plugin.h).
    Dylib,
}

impl std::fmt::Display for PluginKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Wasm => "wasm",
            Self::Dylib => "dylib",
        })
    }
}

/// What a plugin may touch; everything not listed is denied.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Capabilities {
    /// Domains reachable over outbound HTTP: `api.example.com`, `*.example.com` (sub-domains
    /// only), optionally with `:PORT`.
    #[serde(default)]
    pub net: Vec<String>,
    /// Workspace-relative directories the plugin may read (preopened for WASM).
    #[serde(default)]
    pub fs: Vec<String>,
    /// Names of secrets the plugin may look up through `host.secret`.
    #[serde(default)]
    pub secrets: Vec<String>,
}

/// An optional minisign signature over the artifact.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Signature {
    /// The `.minisig` file, relative to the manifest.
    pub minisign: String,
}

/// The manifest as written in `axp-plugin.toml`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// `[a-z0-9][a-z0-9_-]*`, at most 32 characters: it becomes the provider's name.
    pub id: String,
    pub version: String,
    /// The plugin ABI the artifact was built for (`0.1.0`).
    pub abi: String,
    pub kind: PluginKind,
    /// The artifact file, relative to the manifest.
    pub artifact: String,
    /// Lower-case hex SHA-256 of the artifact.
    pub sha256: String,
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    pub capabilities: Capabilities,
    #[serde(default)]
    pub signature: Option<Signature>,
}

/// Why a manifest is refused.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The file is not valid TOML or has unknown or missing keys.
    #[error("{path} is not a valid plugin manifest: {message}")]
    Syntax { path: PathBuf, message: String },
    /// The manifest was built for another ABI version.
    #[error(
        "plugin `{id}` was built for plugin ABI {found}, but this host speaks ABI {expected}; \
         hint: rebuild the plugin against plugins/wit/axp-provider@{expected}"
    )]
    AbiMismatch { id: String, found: String, expected: String },
    /// One or more fields break the rules; every problem is listed.
    #[error("manifest of `{id}` is refused: {}", problems.join("; "))]
    Invalid { id: String, problems: Vec<String> },
    /// The manifest asks for more than any plugin may have.
    #[error("manifest of `{id}` over-reaches: {}", problems.join("; "))]
    OverReach { id: String, problems: Vec<String> },
}

impl Manifest {
    /// Reads and validates a manifest file.
    pub fn load(path: &Path) -> Result<Self, ManifestError> {
        let text =
            std::fs::read_to_string(path).map_err(|source| ManifestError::Read { path: path.to_path_buf(), source })?;
        let manifest =
            Self::parse(&text).map_err(|message| ManifestError::Syntax { path: path.to_path_buf(), message })?;
        manifest.validate()?;
        Ok(manifest)
    }

    /// Parses TOML without validating the values.
    pub fn parse(text: &str) -> Result<Self, String> {
        toml::from_str(text).map_err(|e| e.to_string())
    }

    /// The manifest as TOML.
    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self).unwrap_or_default()
    }

    /// Checks the ABI version, the syntax of every field and the over-reach rules, collecting
    /// every problem before failing.
    pub fn validate(&self) -> Result<(), ManifestError> {
        if self.abi != ABI_VERSION {
            return Err(ManifestError::AbiMismatch {
                id: self.id.clone(),
                found: self.abi.clone(),
                expected: ABI_VERSION.to_string(),
            });
        }
        let mut problems = Vec::new();
        if !valid_id(&self.id) {
            problems.push(format!("id `{}` must match [a-z0-9][a-z0-9_-]* and be at most 32 characters", self.id));
        }
        if !valid_version(&self.version) {
            problems.push(format!("version `{}` must be MAJOR.MINOR.PATCH (digits, optional -suffix)", self.version));
        }
        if !(self.sha256.len() == 64 && self.sha256.bytes().all(|b| b.is_ascii_hexdigit())) {
            problems.push("sha256 must be 64 hex digits".to_string());
        }
        if !plain_relative(&self.artifact) {
            problems.push(format!("artifact `{}` must be a file name next to the manifest", self.artifact));
        }
        if let Some(sig) = &self.signature
            && !plain_relative(&sig.minisign)
        {
            problems.push(format!("signature.minisign `{}` must be a file name next to the manifest", sig.minisign));
        }
        if !problems.is_empty() {
            return Err(ManifestError::Invalid { id: self.id.clone(), problems });
        }
        let over = over_reach(&self.capabilities);
        if !over.is_empty() {
            return Err(ManifestError::OverReach { id: self.id.clone(), problems: over });
        }
        Ok(())
    }
}

/// The over-reach rules: grants no plugin may have, whatever the operator says. Returns one
/// sentence per problem.
pub fn over_reach(caps: &Capabilities) -> Vec<String> {
    let mut out = Vec::new();
    for d in &caps.net {
        if let Err(why) = check_domain(d) {
            out.push(format!("net `{d}`: {why}"));
        }
    }
    for p in &caps.fs {
        if p.starts_with('/') || p.starts_with('~') {
            out.push(format!("fs `{p}`: only workspace-relative directories may be granted, never host paths"));
        } else if p.split('/').any(|c| c == "..") {
            out.push(format!("fs `{p}`: `..` would leave the workspace"));
        } else if p.is_empty() {
            out.push("fs: an empty path is not a directory".to_string());
        }
    }
    for s in &caps.secrets {
        let ok = !s.is_empty()
            && s.len() <= 64
            && s.bytes().all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_');
        if !ok {
            out.push(format!("secret `{s}`: names are [A-Z0-9_]+ and at most 64 characters"));
        }
    }
    out
}

/// A grantable domain: a DNS name (optionally `*.` + a name with at least two labels) and an
/// optional port. IP literals and bare wildcards are refused.
fn check_domain(d: &str) -> Result<(), &'static str> {
    let (host, port) = match d.rsplit_once(':') {
        Some((h, p)) => (h, Some(p)),
        None => (d, None),
    };
    if let Some(p) = port
        && p.parse::<u16>().map_or(true, |p| p == 0)
    {
        return Err("the port must be 1-65535");
    }
    let name = host.strip_prefix("*.").unwrap_or(host);
    if host == "*" || name.contains('*') {
        return Err("wildcards may only be a leading `*.` before a registrable domain");
    }
    if name.parse::<std::net::IpAddr>().is_ok() || name.starts_with('[') {
        return Err("IP literals cannot be granted to a plugin; grant a domain name");
    }
    let labels: Vec<&str> = name.split('.').collect();
    if labels.iter().any(|l| l.is_empty() || l.len() > 63 || !l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'))
    {
        return Err("not a valid domain name");
    }
    if host.starts_with("*.") && labels.len() < 2 {
        return Err("a wildcard must cover sub-domains of a registrable domain, not a TLD");
    }
    Ok(())
}

/// Whether `host` (and `port`) is covered by one of the `grants` (same grammar as
/// [`Capabilities::net`]; `*.example.com` matches sub-domains only). The domain match is
/// [`axp_protocol::capability::host_matches`], the one the session grants and the egress proxy's
/// rules use, so a plugin's grant cannot mean something else here than there.
pub fn net_allows(grants: &[String], host: &str, port: u16) -> bool {
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    grants.iter().any(|g| {
        let g = g.to_ascii_lowercase();
        let (gh, gp) = match g.rsplit_once(':') {
            Some((h, p)) => (h.to_string(), p.parse::<u16>().ok()),
            None => (g.clone(), None),
        };
        if gp.is_some_and(|p| p != port) {
            return false;
        }
        axp_protocol::capability::host_matches(&gh, &host)
    })
}

fn valid_id(id: &str) -> bool {
    let b = id.as_bytes();
    !b.is_empty()
        && b.len() <= 32
        && (b[0].is_ascii_lowercase() || b[0].is_ascii_digit())
        && b.iter().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'_' || *c == b'-')
}

fn valid_version(v: &str) -> bool {
    let core = v.split_once('-').map_or(v, |(c, _)| c);
    let parts: Vec<&str> = core.split('.').collect();
    parts.len() == 3 && parts.iter().all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
}

fn plain_relative(name: &str) -> bool {
    !name.is_empty() && !name.contains('/') && !name.contains('\\') && name != "." && name != ".."
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest(caps: Capabilities) -> Manifest {
        Manifest {
            id: "hello".into(),
            version: "0.1.0".into(),
            abi: ABI_VERSION.into(),
            kind: PluginKind::Wasm,
            artifact: "hello.wasm".into(),
            sha256: "0".repeat(64),
            description: None,
            capabilities: caps,
            signature: None,
        }
    }

    #[test]
    fn over_reaching_grants_are_named() {
        let m = manifest(Capabilities {
            net: vec!["*".into(), "10.0.0.1".into(), "*.com".into(), "api.example.com".into()],
            fs: vec!["/etc".into(), "../up".into(), "data".into()],
            secrets: vec!["lower".into(), "GITHUB_TOKEN".into()],
        });
        let err = m.validate().unwrap_err().to_string();
        for needle in ["net `*`", "net `10.0.0.1`", "net `*.com`", "fs `/etc`", "fs `../up`", "secret `lower`"] {
            assert!(err.contains(needle), "{needle} missing from {err}");
        }
        assert!(!err.contains("api.example.com"), "{err}");
        assert!(!err.contains("GITHUB_TOKEN"), "{err}");
    }

    #[test]
    fn abi_mismatch_names_both_versions() {
        let mut m = manifest(Capabilities::default());
        m.abi = "0.2.0".into();
        let err = m.validate().unwrap_err().to_string();
        assert!(err.contains("0.2.0") && err.contains(ABI_VERSION), "{err}");
    }

    #[test]
    fn domain_matching() {
        let g = vec!["api.example.test".to_string(), "*.svc.test:8080".to_string()];
        assert!(net_allows(&g, "api.example.test", 80));
        assert!(net_allows(&g, "API.example.test.", 443));
        assert!(!net_allows(&g, "evil.example.test", 80));
        assert!(net_allows(&g, "a.svc.test", 8080));
        assert!(!net_allows(&g, "a.svc.test", 80));
        assert!(!net_allows(&g, "svc.test", 8080));
    }

    /// The wildcard is a pattern, never a host: a request naming `*.svc.test` itself is not a
    /// sub-domain of `svc.test` (the protocol's matcher; the hand-written one admitted it).
    #[test]
    fn a_wildcard_grant_does_not_admit_the_pattern_as_a_host() {
        let g = vec!["*.svc.test".to_string()];
        assert!(net_allows(&g, "a.svc.test", 80));
        assert!(net_allows(&g, "a.b.svc.test.", 80));
        assert!(!net_allows(&g, "*.svc.test", 80));
        assert!(!net_allows(&g, "evilsvc.test", 80));
    }

    #[test]
    fn round_trips_as_toml() {
        let m = manifest(Capabilities { net: vec!["api.example.test".into()], ..Default::default() });
        assert_eq!(Manifest::parse(&m.to_toml()).unwrap(), m);
        assert!(Manifest::parse("id = 1").is_err());
    }
}
