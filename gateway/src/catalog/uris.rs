//! How resource URIs and prompt names from many servers share one namespace: the reversible
//! rewrite that makes a provider's resource URI unique at the gateway while keeping its scheme,
//! and its inverse. Pure string work, no state: the multiplexer in `router/features.rs` decides
//! which providers are namespaced (every one mounted with a `prefix` other than `never`).
//!
//! The rule mirrors the tool rule `<provider>__<tool>`: the provider's name and `__` go in front
//! of the part after the scheme, inside the authority when there is one.
//!
//! | provider `fs`, upstream URI | the client sees |
//! |---|---|
//! | `file:///srv/a.txt` | `file://fs__/srv/a.txt` |
//! | `test://static/resource/1` | `test://fs__static/resource/1` |
//! | `urn:isbn:0451450523` | `urn:fs__isbn:0451450523` |
//!
//! A URI template (`test://dynamic/resource/{id}`) gets the same rewrite, its variables carried
//! along unchanged.
//!
//! A provider name never contains `__` (the registry's naming rule), so the first `__` after
//! the scheme (and after `//`) ends the provider name, and the rewrite is undone exactly. `_` is
//! an unreserved URI character, so the result is still a well-formed URI that URL parsers read.

/// The client-facing URI of `uri` from `provider`. A string without a scheme (not a URI) is
/// prefixed whole (`<provider>__<string>`), which is equally reversible.
pub fn wrap(provider: &str, uri: &str) -> String {
    match split_scheme(uri) {
        Some((scheme, rest)) => match rest.strip_prefix("//") {
            Some(after) => format!("{scheme}://{provider}__{after}"),
            None => format!("{scheme}:{provider}__{rest}"),
        },
        None => format!("{provider}__{uri}"),
    }
}

/// The provider and upstream URI of a client-facing URI made by [`wrap`]; `None` when `uri`
/// carries no provider name.
pub fn unwrap(uri: &str) -> Option<(&str, String)> {
    let (head, provider, after) = match split_scheme(uri) {
        Some((scheme, rest)) => match rest.strip_prefix("//") {
            Some(after) => {
                let (p, a) = after.split_once("__")?;
                (Some((scheme, true)), p, a)
            }
            None => {
                let (p, a) = rest.split_once("__")?;
                (Some((scheme, false)), p, a)
            }
        },
        None => {
            let (p, a) = uri.split_once("__")?;
            (None, p, a)
        }
    };
    if provider.is_empty() || !provider.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
        return None;
    }
    let original = match head {
        Some((scheme, true)) => format!("{scheme}://{after}"),
        Some((scheme, false)) => format!("{scheme}:{after}"),
        None => after.to_string(),
    };
    Some((provider, original))
}

/// `scheme` and the rest when `s` starts with an RFC 3986 scheme and `:`.
fn split_scheme(s: &str) -> Option<(&str, &str)> {
    let (scheme, rest) = s.split_once(':')?;
    let mut chars = scheme.chars();
    let first = chars.next()?;
    (first.is_ascii_alphabetic() && chars.all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c)))
        .then_some((scheme, rest))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rewrite_keeps_the_scheme_and_is_undone_exactly() {
        let cases = [
            ("file:///srv/a.txt", "file://fs__/srv/a.txt"),
            ("test://static/resource/1", "test://fs__static/resource/1"),
            ("urn:isbn:0451450523", "urn:fs__isbn:0451450523"),
            ("https://example.com/a?b=c#d", "https://fs__example.com/a?b=c#d"),
            ("data:text/plain,hi__there", "data:fs__text/plain,hi__there"),
            ("memo://x__y/z", "memo://fs__x__y/z"),
            ("no scheme here", "fs__no scheme here"),
            ("", "fs__"),
            ("test://", "test://fs__"),
        ];
        for (up, down) in cases {
            assert_eq!(wrap("fs", up), down, "wrap {up}");
            assert_eq!(unwrap(down), Some(("fs", up.to_string())), "unwrap {down}");
        }
    }

    #[test]
    fn two_providers_never_collide_and_foreign_uris_are_not_ours() {
        assert_ne!(wrap("a", "x://same"), wrap("b", "x://same"));
        assert_eq!(unwrap("test://static/resource/1"), None);
        assert_eq!(unwrap("file:///tmp/x"), None);
        assert_eq!(unwrap("test://bad name__x"), None);
    }

    #[test]
    fn templates_keep_their_variables() {
        assert_eq!(wrap("ev", "test://dynamic/resource/{id}"), "test://ev__dynamic/resource/{id}");
    }
}
