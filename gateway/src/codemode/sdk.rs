//! The generated SDK of a code-mode job, and the files that run its program.
//!
//! * Python: `axp_tools.py` (`tools.<name>(**arguments)`, `call`, `ToolError`) and a runner that
//!   executes the program with `tools`, `call` and `ToolError` already defined.
//! * JavaScript (node, ES module): `axp_tools.mjs` (`await tools.<name>({...})`, `call`,
//!   `ToolError`); the program is `main.mjs`, its first line prefixed with the import so line
//!   numbers stay the same and top-level `await` works.
//! * sh: `axp-call TOOL [JSON]` (a small Python client) and `axp_tools.sh` with one shell
//!   function per tool, sourced before the program.
//!
//! Every allowed tool becomes a function named after its index name, with `-` spelled `_` where
//! the language needs it (`everything__get-sum` is `tools.everything__get_sum`). Names,
//! descriptions and signatures come from tool servers, so they are embedded only as JSON string
//! literals (valid string literals in Python and JavaScript) or in comments with their
//! terminators removed: a hostile description cannot become code. Tool results come back as the
//! text of their content (`structuredContent` when the content is not all text); a refused call
//! raises `ToolError` with the JSON-RPC `code`, a tool that reports an error raises it with
//! `code` `None`/`null` and the tool's `result`.
//!
//! This module writes files; it performs no policy decision (the tool list it gets is already
//! filtered by the job's grants, and the gateway checks every call again).

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::Path;

/// A tool the job may call.
pub struct Tool {
    pub name: String,
    pub desc: String,
    pub signature: String,
}

/// The languages code-mode runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Language {
    Python,
    JavaScript,
    Sh,
}

impl Language {
    pub fn as_str(self) -> &'static str {
        match self {
            Language::Python => "python",
            Language::JavaScript => "javascript",
            Language::Sh => "sh",
        }
    }
}

impl std::str::FromStr for Language {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "python" | "python3" | "py" => Ok(Language::Python),
            "javascript" | "js" | "node" => Ok(Language::JavaScript),
            "sh" | "shell" => Ok(Language::Sh),
            other => Err(format!("unknown code-mode language `{other}` (python, javascript, sh)")),
        }
    }
}

/// JSON string literal: also a valid Python and JavaScript string literal.
fn lit(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into())
}

/// `name` as an identifier of Python, JavaScript and POSIX sh (`-` becomes `_`), if it is one.
fn ident(name: &str) -> Option<String> {
    let id = name.replace('-', "_");
    let mut chars = id.chars();
    let first = chars.next()?;
    let ok = (first.is_ascii_alphabetic() || first == '_') && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    ok.then_some(id)
}

/// One line for a comment: the first line of `s`, without comment terminators.
fn comment(s: &str) -> String {
    s.lines().next().unwrap_or("").replace("*/", "* /").chars().filter(|c| !c.is_control()).take(200).collect()
}

/// The (identifier, tool) pairs the SDK defines functions for: each identifier once.
fn functions(tools: &[Tool]) -> Vec<(String, &Tool)> {
    let mut seen = std::collections::HashSet::new();
    tools.iter().filter_map(|t| ident(&t.name).filter(|i| seen.insert(i.clone())).map(|i| (i, t))).collect()
}

const PY_BASE: &str = r#""""AXP code-mode SDK, generated for this job.

Every tool this job's token allows is a method of `tools`: `tools.time__get_current_time(timezone="UTC")`
(or pass one dict). `call(name, **arguments)` calls any tool by its index name. A result is the
text of the tool's content (its structuredContent when the content is not all text; the whole
result when it has neither); `call_raw` returns the whole MCP result.
A refused call raises ToolError with the JSON-RPC `code` (-32002: the token does not allow it).
"""
import json as _json
import os as _os
import socket as _socket


class ToolError(Exception):
    """A refused or failed tool call: `code` is the JSON-RPC error code (None when the tool
    itself reported an error, then `result` holds its result), `data` the error's data."""

    def __init__(self, message, code=None, data=None, result=None):
        super().__init__(message)
        self.message = message
        self.code = code
        self.data = data
        self.result = result

    def __str__(self):
        return self.message if self.code is None else "[%s] %s" % (self.code, self.message)


class _Client:
    def __init__(self):
        self._sock = None
        self._file = None
        self._next = 0

    def request(self, method, params):
        if self._sock is None:
            s = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
            try:
                s.connect(_os.environ["AXP_SOCKET"])
            except OSError as e:
                s.close()
                raise ToolError("cannot reach the gateway: %s" % e, -32603) from None
            self._sock, self._file = s, s.makefile("rb")
        self._next += 1
        msg = {"jsonrpc": "2.0", "id": self._next, "method": method, "params": params}
        self._sock.sendall(_json.dumps(msg).encode() + b"\n")
        line = self._file.readline()
        if not line:
            self._sock = None
            raise ToolError("the gateway closed the connection", -32603)
        reply = _json.loads(line)
        if "error" in reply:
            e = reply["error"]
            raise ToolError(e.get("message", ""), e.get("code"), e.get("data"))
        return reply.get("result")


_client = _Client()


def _unwrap(result):
    content = result.get("content") or []
    texts = [c.get("text", "") for c in content if c.get("type") == "text"]
    if result.get("isError"):
        raise ToolError("\n".join(texts) or "the tool reported an error", None, None, result)
    if content and len(texts) == len(content):
        return "\n".join(texts)
    if result.get("structuredContent") is not None:
        return result["structuredContent"]
    return result


def call_raw(name, arguments=None, **kwargs):
    """Calls tool `name` and returns its whole MCP result (content, structuredContent, isError)."""
    args = dict(arguments or {})
    args.update(kwargs)
    params = {"name": name, "arguments": args, "cap_token": _os.environ["AXP_TOKEN"]}
    return _client.request("tools/call", params)


def call(name, arguments=None, **kwargs):
    """Calls tool `name` by its index name; returns its text (see the module's docstring)."""
    return _unwrap(call_raw(name, arguments, **kwargs))


class _Tools:
    call = staticmethod(call)
    call_raw = staticmethod(call_raw)

    @staticmethod
    def names():
        """The tools this job may call."""
        return list(_NAMES)

    def __getattr__(self, name):
        raise AttributeError("no tool `%s` is allowed for this job; tools.names() lists them" % name)
"#;

fn python(tools: &[Tool]) -> String {
    let mut out = String::from(PY_BASE);
    for (id, t) in functions(tools) {
        let doc = format!("{}\n\n{}", t.signature, t.desc);
        out.push_str(&format!(
            "\n    def {id}(self, arguments=None, **kwargs):\n        {}\n        return call({}, arguments, **kwargs)\n",
            lit(&doc),
            lit(&t.name)
        ));
    }
    let names: Vec<String> = tools.iter().map(|t| lit(&t.name)).collect();
    out.push_str(&format!("\n\n_NAMES = [{}]\ntools = _Tools()\n", names.join(", ")));
    out
}

const PY_RUNNER: &str = r#"import os, sys
import axp_tools
_g = {"__name__": "__main__", "tools": axp_tools.tools, "call": axp_tools.call, "ToolError": axp_tools.ToolError}
with open(os.path.join(os.environ["AXP_SDK"], "main.py"), encoding="utf-8") as _f:
    _src = _f.read()
exec(compile(_src, "main.py", "exec"), _g)
"#;

const JS_BASE: &str = r#"// AXP code-mode SDK, generated for this job.
// Every tool this job's token allows is a function of `tools`:
//   await tools.time__get_current_time({ timezone: "UTC" })
// `call(name, args)` calls any tool by its index name. A result is the text of the tool's content
// (its structuredContent when the content is not all text); `callRaw` returns the whole MCP
// result. A refused call rejects with a ToolError whose `code` is the JSON-RPC code (-32002: the
// token does not allow it).
import net from "node:net";

export class ToolError extends Error {
  constructor(message, code = null, data = null, result = null) {
    super(message);
    this.name = "ToolError";
    this.code = code;
    this.data = data;
    this.result = result;
  }
}

let conn = null;
let buf = "";
let next = 0;
const pending = new Map();

function failAll(err) {
  for (const p of pending.values()) p.reject(err);
  pending.clear();
  conn = null;
}

function connect() {
  if (conn) return conn;
  buf = "";
  conn = net.createConnection(process.env.AXP_SOCKET);
  conn.setEncoding("utf8");
  conn.on("data", (chunk) => {
    buf += chunk;
    let i;
    while ((i = buf.indexOf("\n")) >= 0) {
      const line = buf.slice(0, i);
      buf = buf.slice(i + 1);
      const msg = JSON.parse(line);
      const p = pending.get(msg.id);
      if (!p) continue;
      pending.delete(msg.id);
      if (pending.size === 0 && conn) conn.unref();
      if (msg.error) p.reject(new ToolError(msg.error.message, msg.error.code, msg.error.data ?? null));
      else p.resolve(msg.result);
    }
  });
  conn.on("error", (e) => failAll(new ToolError(`cannot reach the gateway: ${e.message}`, -32603)));
  conn.on("close", () => failAll(new ToolError("the gateway closed the connection", -32603)));
  return conn;
}

/** Calls tool `name` and resolves to its whole MCP result. */
export function callRaw(name, args = {}) {
  return new Promise((resolve, reject) => {
    const c = connect();
    c.ref();
    const id = ++next;
    pending.set(id, { resolve, reject });
    const params = { name, arguments: args ?? {}, cap_token: process.env.AXP_TOKEN };
    c.write(JSON.stringify({ jsonrpc: "2.0", id, method: "tools/call", params }) + "\n");
  });
}

function unwrap(result) {
  const content = result.content ?? [];
  const texts = content.filter((c) => c.type === "text").map((c) => c.text ?? "");
  if (result.isError) throw new ToolError(texts.join("\n") || "the tool reported an error", null, null, result);
  if (content.length > 0 && texts.length === content.length) return texts.join("\n");
  if (result.structuredContent !== undefined && result.structuredContent !== null) return result.structuredContent;
  return result;
}

/** Calls tool `name` by its index name; resolves to its text (see above). */
export async function call(name, args = {}) {
  return unwrap(await callRaw(name, args));
}

export const tools = { call, callRaw, names: () => [...NAMES] };
"#;

fn javascript(tools: &[Tool]) -> String {
    let mut out = String::from(JS_BASE);
    let names: Vec<String> = tools.iter().map(|t| lit(&t.name)).collect();
    out.push_str(&format!("const NAMES = [{}];\n", names.join(", ")));
    for t in tools {
        out.push_str(&format!(
            "\n/** {} — {} */\ntools[{}] = (args = {{}}) => call({}, args);\n",
            comment(&t.signature),
            comment(&t.desc),
            lit(&t.name),
            lit(&t.name)
        ));
    }
    for (id, t) in functions(tools) {
        if id != t.name {
            out.push_str(&format!("tools[{}] = tools[{}];\n", lit(&id), lit(&t.name)));
        }
    }
    out.push_str("export default tools;\n");
    out
}

const AXP_CALL: &str = r#"#!/usr/bin/env python3
"""axp-call TOOL [JSON_ARGUMENTS]: calls one tool of this code-mode job and prints its result
(text, or JSON for structured results). Exit 0 on success, 1 when the tool reported an error,
3 when the gateway refused the call (the JSON-RPC code is printed on stderr), 2 on bad usage."""
import json, os, sys
sys.path.insert(0, os.environ.get("AXP_SDK", os.path.dirname(os.path.abspath(__file__))))
import axp_tools

if len(sys.argv) not in (2, 3):
    sys.stderr.write("usage: axp-call TOOL [JSON_ARGUMENTS]\n")
    sys.exit(2)
try:
    args = json.loads(sys.argv[2]) if len(sys.argv) == 3 else {}
except ValueError as e:
    sys.stderr.write("axp-call: the arguments are not JSON: %s\n" % e)
    sys.exit(2)
if not isinstance(args, dict):
    sys.stderr.write("axp-call: the arguments must be a JSON object\n")
    sys.exit(2)
try:
    out = axp_tools.call(sys.argv[1], args)
except axp_tools.ToolError as e:
    sys.stderr.write("axp-call: %s\n" % e)
    sys.exit(1 if e.code is None else 3)
print(out if isinstance(out, str) else json.dumps(out))
"#;

fn shell(tools: &[Tool]) -> String {
    let mut out = String::from(
        "# AXP code-mode SDK for sh, generated for this job: one function per allowed tool.\n\
         # Usage: TOOL '{\"json\": \"arguments\"}' (or: axp-call TOOL '{...}').\n",
    );
    for (id, t) in functions(tools) {
        // `name` passed through a single-quoted word; index names hold no quotes.
        if t.name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
            out.push_str(&format!("# {}\n{id}() {{ axp-call '{}' \"$@\"; }}\n", comment(&t.desc), t.name));
        }
    }
    out
}

const SH_RUNNER: &str = ". \"$AXP_SDK/axp_tools.sh\"\n. \"$AXP_SDK/main.sh\"\n";

fn write(dir: &Path, name: &str, data: &str, mode: u32) -> std::io::Result<()> {
    let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(mode).open(dir.join(name))?;
    f.write_all(data.as_bytes())
}

/// Creates `dir` (private, fresh) with the SDK and the program; returns the argv that runs it.
pub fn prepare(dir: &Path, language: Language, tools: &[Tool], source: &str) -> std::io::Result<Vec<String>> {
    if let Some(parent) = dir.parent() {
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(parent)?;
    }
    std::fs::DirBuilder::new().mode(0o700).create(dir)?;
    let at = |f: &str| dir.join(f).to_string_lossy().into_owned();
    let result = (|| match language {
        Language::Python => {
            write(dir, "axp_tools.py", &python(tools), 0o644)?;
            write(dir, "__axp_main__.py", PY_RUNNER, 0o644)?;
            write(dir, "main.py", source, 0o644)?;
            Ok(vec!["python3".into(), at("__axp_main__.py")])
        }
        Language::JavaScript => {
            write(dir, "axp_tools.mjs", &javascript(tools), 0o644)?;
            // Same line, so the program's line numbers are its own.
            let main = format!("import {{ tools, call, callRaw, ToolError }} from \"./axp_tools.mjs\"; {source}");
            write(dir, "main.mjs", &main, 0o644)?;
            Ok(vec!["node".into(), at("main.mjs")])
        }
        Language::Sh => {
            write(dir, "axp_tools.py", &python(tools), 0o644)?;
            write(dir, "axp-call", AXP_CALL, 0o755)?;
            write(dir, "axp_tools.sh", &shell(tools), 0o644)?;
            write(dir, "main.sh", source, 0o644)?;
            write(dir, "run.sh", SH_RUNNER, 0o644)?;
            Ok(vec!["/bin/sh".into(), at("run.sh")])
        }
    })();
    if result.is_err() {
        let _ = std::fs::remove_dir_all(dir);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(name: &str, desc: &str) -> Tool {
        Tool { name: name.into(), desc: desc.into(), signature: format!("{name}(args: {{}}): unknown") }
    }

    #[test]
    fn identifiers_follow_the_languages() {
        assert_eq!(ident("everything__get-sum").as_deref(), Some("everything__get_sum"));
        assert_eq!(ident("time__get_current_time").as_deref(), Some("time__get_current_time"));
        assert_eq!(ident("9lives"), None);
        assert_eq!(ident("a.b"), None);
    }

    #[test]
    fn hostile_descriptions_stay_data() {
        let evil = "x\"\"\"\nimport os; os.system('id') */ `rm` $(id)\n'; drop";
        let tools = [tool("evil__t", evil)];
        let py = python(&tools);
        assert!(py.contains(&lit(&format!("evil__t(args: {{}}): unknown\n\n{evil}"))));
        assert!(!py.contains("\nimport os; os.system"));
        let js = javascript(&tools);
        assert!(!js.contains("*/ `rm`"));
        let sh = shell(&tools);
        assert!(!sh.contains("$(id)\n"), "{sh}");
        assert!(sh.lines().filter(|l| !l.starts_with('#')).all(|l| !l.contains("rm")));
    }

    #[test]
    fn unknown_languages_are_named() {
        assert_eq!("python".parse::<Language>(), Ok(Language::Python));
        let e = "ruby".parse::<Language>().unwrap_err();
        assert!(e.contains("ruby") && e.contains("javascript"), "{e}");
    }
}
