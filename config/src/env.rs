//! `${VAR}` and `${VAR:-default}` expansion, with the environment read through one trait so
//! tests never mutate the process environment (the habit linkerd and uv follow).

use std::collections::BTreeMap;

/// Where variables come from.
pub trait EnvSource {
    fn var(&self, name: &str) -> Option<String>;
}

/// The real process environment.
#[derive(Debug, Default, Clone, Copy)]
pub struct ProcessEnv;

impl EnvSource for ProcessEnv {
    fn var(&self, name: &str) -> Option<String> {
        std::env::var(name).ok()
    }
}

impl EnvSource for BTreeMap<String, String> {
    fn var(&self, name: &str) -> Option<String> {
        self.get(name).cloned()
    }
}

/// Expands every `${VAR}` / `${VAR:-default}` in `s`. `$$` stays a literal `$`. An unset
/// variable without a default is an error naming it. VS Code's `${input:…}` prompts cannot be
/// answered by a server, so they are refused with that reason.
pub fn expand(s: &str, env: &dyn EnvSource) -> Result<String, String> {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(stripped) = after.strip_prefix('$') {
            out.push('$');
            rest = stripped;
            continue;
        }
        let Some(body) = after.strip_prefix('{') else {
            out.push('$');
            rest = after;
            continue;
        };
        let end = body.find('}').ok_or_else(|| format!("unclosed `${{` in `{s}`"))?;
        let expr = &body[..end];
        rest = &body[end + 1..];
        if let Some(input) = expr.strip_prefix("input:") {
            return Err(format!(
                "`${{input:{input}}}` asks the user for a value, which a server cannot do; set it with an environment variable instead"
            ));
        }
        let expr = expr.strip_prefix("env:").unwrap_or(expr);
        let (name, default) = match expr.split_once(":-") {
            Some((n, d)) => (n, Some(d)),
            None => (expr, None),
        };
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(format!("`${{{expr}}}` is not a variable reference (use `${{NAME}}` or `${{NAME:-default}}`)"));
        }
        match (env.var(name), default) {
            (Some(v), _) if !v.is_empty() || default.is_none() => out.push_str(&v),
            (_, Some(d)) => out.push_str(d),
            (None, None) => {
                return Err(format!(
                    "environment variable `{name}` is not set (write `${{{name}:-default}}` to give a default)"
                ));
            }
            (Some(v), None) => out.push_str(&v),
        }
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env() -> BTreeMap<String, String> {
        [("HOME".to_string(), "/home/u".to_string()), ("EMPTY".to_string(), String::new())].into_iter().collect()
    }

    #[test]
    fn expands_forms() {
        let e = env();
        assert_eq!(expand("${HOME}/x", &e).unwrap(), "/home/u/x");
        assert_eq!(expand("${env:HOME}", &e).unwrap(), "/home/u");
        assert_eq!(expand("${NOPE:-dflt}", &e).unwrap(), "dflt");
        assert_eq!(expand("${EMPTY:-dflt}", &e).unwrap(), "dflt");
        assert_eq!(expand("${EMPTY}", &e).unwrap(), "");
        assert_eq!(expand("a$$b $x", &e).unwrap(), "a$b $x");
    }

    #[test]
    fn errors_name_the_problem() {
        let e = env();
        assert!(expand("${NOPE}", &e).unwrap_err().contains("`NOPE` is not set"));
        assert!(expand("${input:token}", &e).unwrap_err().contains("cannot"));
        assert!(expand("${HOME", &e).unwrap_err().contains("unclosed"));
        assert!(expand("${a b}", &e).unwrap_err().contains("not a variable"));
    }
}
