//! `hello`: the example AXP WASM plugin. It owns four tools — `echo` (pure), `noop` (for the
//! per-call benchmark), `fetch` (an outbound HTTP GET through `wasi:http`, which the host
//! allows only for the domains the manifest grants) and `greet` (uses the `HELLO_GREETING`
//! secret its manifest declares, looked up with `host.secret`). It must not touch files or sockets: the
//! `axp:provider@0.1.0` world gives it neither.

wit_bindgen::generate!({
    world: "axp-provider",
    path: "../../wit/axp-provider@0.1.0",
    generate_all,
});

use exports::axp::provider::plugin::{Guest, PluginInfo, ToolError};
use axp::provider::host::{self, Level};
use axp::provider::types::ErrorKind;
use serde_json::{Value, json};
use wasi::http::outgoing_handler;
use wasi::http::types::{Fields, Method, OutgoingRequest, Scheme};
use wasi::io::streams::StreamError;

struct Hello;

fn tools() -> Value {
    json!([
        {
            "name": "echo",
            "description": "Returns the given message unchanged. Use it to check that the plugin is installed and answering; it has no side effects.",
            "inputSchema": {
                "type": "object",
                "properties": {"message": {"type": "string", "description": "The text to send back."}},
                "required": ["message"],
                "additionalProperties": false
            },
            "annotations": {"readOnlyHint": true}
        },
        {
            "name": "noop",
            "description": "Does nothing and returns null. Exists to measure the host's per-call overhead; it has no side effects.",
            "inputSchema": {"type": "object", "properties": {}, "additionalProperties": false},
            "annotations": {"readOnlyHint": true}
        },
        {
            "name": "greet",
            "description": "Greets someone by name, with the greeting the operator configured as HELLO_GREETING, or \"Hello\" when none is configured. It has no side effects.",
            "inputSchema": {
                "type": "object",
                "properties": {"name": {"type": "string", "description": "Who to greet."}},
                "required": ["name"],
                "additionalProperties": false
            },
            "annotations": {"readOnlyHint": true}
        },
        {
            "name": "fetch",
            "description": "Fetches a URL with HTTP GET and returns its status and body as text. Only domains granted in the plugin manifest are reachable; others are refused by the host.",
            "inputSchema": {
                "type": "object",
                "properties": {"url": {"type": "string", "description": "An http:// or https:// URL on a granted domain."}},
                "required": ["url"],
                "additionalProperties": false
            },
            "annotations": {"readOnlyHint": true, "openWorldHint": true}
        }
    ])
}

fn err(kind: ErrorKind, message: impl Into<String>) -> ToolError {
    ToolError { kind, message: message.into() }
}

impl Guest for Hello {
    fn info() -> PluginInfo {
        PluginInfo {
            id: "hello".into(),
            version: "0.1.0".into(),
            abi: "0.1.0".into(),
            description: "Example AXP plugin: echo, noop, greet and an HTTP fetch.".into(),
        }
    }

    fn list_tools() -> String {
        tools().to_string()
    }

    fn describe(name: String) -> Option<String> {
        tools()
            .as_array()?
            .iter()
            .find(|t| t["name"] == name.as_str())
            .map(Value::to_string)
    }

    fn call(name: String, args_json: String, _meta: String) -> Result<String, ToolError> {
        let args: Value = serde_json::from_str(&args_json)
            .map_err(|e| err(ErrorKind::InvalidArguments, format!("arguments are not JSON: {e}")))?;
        match name.as_str() {
            "echo" => {
                let message = args["message"]
                    .as_str()
                    .ok_or_else(|| err(ErrorKind::InvalidArguments, "`message` must be a string"))?;
                Ok(json!({"message": message}).to_string())
            }
            "noop" => Ok("null".into()),
            "greet" => {
                let who = args["name"]
                    .as_str()
                    .ok_or_else(|| err(ErrorKind::InvalidArguments, "`name` must be a string"))?;
                let greeting = host::secret("HELLO_GREETING").unwrap_or_else(|| "Hello".into());
                Ok(json!({"text": format!("{greeting}, {who}!")}).to_string())
            }
            "fetch" => {
                let url = args["url"]
                    .as_str()
                    .ok_or_else(|| err(ErrorKind::InvalidArguments, "`url` must be a string"))?;
                host::log(Level::Info, &format!("GET {url}"));
                let (status, body) = http_get(url)?;
                Ok(json!({"status": status, "body": body}).to_string())
            }
            other => Err(err(ErrorKind::UnknownTool, format!("no tool `{other}`"))),
        }
    }
}

/// A blocking GET with the raw `wasi:http` API (no client crate: the plugin stays small).
fn http_get(url: &str) -> Result<(u16, String), ToolError> {
    let (scheme, rest) = if let Some(r) = url.strip_prefix("http://") {
        (Scheme::Http, r)
    } else if let Some(r) = url.strip_prefix("https://") {
        (Scheme::Https, r)
    } else {
        return Err(err(ErrorKind::InvalidArguments, "the URL must start with http:// or https://"));
    };
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let bad = |what: &str| err(ErrorKind::InvalidArguments, format!("invalid {what} in `{url}`"));
    let req = OutgoingRequest::new(Fields::new());
    req.set_method(&Method::Get).map_err(|()| bad("method"))?;
    req.set_scheme(Some(&scheme)).map_err(|()| bad("scheme"))?;
    req.set_authority(Some(authority)).map_err(|()| bad("authority"))?;
    req.set_path_with_query(Some(path)).map_err(|()| bad("path"))?;
    let future = outgoing_handler::handle(req, None)
        .map_err(|e| err(ErrorKind::Denied, format!("the host refused the request: {e:?}")))?;
    let response = loop {
        if let Some(r) = future.get() {
            break r;
        }
        future.subscribe().block();
    };
    let response = response
        .map_err(|()| err(ErrorKind::Failed, "response already taken"))?
        .map_err(|e| err(ErrorKind::Denied, format!("the request failed: {e:?}")))?;
    let status = response.status();
    let body = response.consume().map_err(|()| err(ErrorKind::Failed, "no response body"))?;
    let mut bytes = Vec::new();
    {
        let stream = body.stream().map_err(|()| err(ErrorKind::Failed, "no body stream"))?;
        loop {
            match stream.blocking_read(64 * 1024) {
                Ok(chunk) => bytes.extend_from_slice(&chunk),
                Err(StreamError::Closed) => break,
                Err(StreamError::LastOperationFailed(e)) => {
                    return Err(err(ErrorKind::Failed, format!("reading the body failed: {}", e.to_debug_string())));
                }
            }
        }
    }
    drop(body);
    Ok((status, String::from_utf8_lossy(&bytes).into_owned()))
}

export!(Hello);
