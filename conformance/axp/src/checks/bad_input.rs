//! Bad input gets the JSON-RPC error for it, and the error says what to fix: a body that is not
//! JSON (-32700), a batch (-32600, protocol.md refuses them), an unknown method (-32601, with the
//! request's id), params of the wrong type or with a misspelt field (-32602 naming the field),
//! and tool arguments that contradict the tool's schema (-32602 naming the property).

use axp_protocol::RpcError;
use axp_protocol::jsonrpc::Id;
use serde_json::{Value, json};

use super::catalog::NO_SUCH_TOOL;
use super::{Runner, names_field};
use crate::report::{Stop, Verdict, ensure};
use crate::tool::mistyped;
use crate::wire::{Conn, RawReply, describe, error_shape, post_raw, short};

/// A request cut off in the middle.
const TRUNCATED: &[u8] = b"{\"jsonrpc\": \"2.0\", \"id\": 1, \"method\": ";
/// A batch of one ping.
const BATCH: &[u8] = br#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#;

/// The error object of a raw answer, and its id.
fn raw_error(r: &RawReply) -> Result<(i64, Value), Stop> {
    let v: Value = serde_json::from_slice(&r.body).map_err(|_| {
        Stop::Fail(format!("HTTP {} with a body that is not JSON: {}", r.status, String::from_utf8_lossy(&r.body)))
    })?;
    let e: RpcError = v
        .get("error")
        .and_then(|e| serde_json::from_value(e.clone()).ok())
        .ok_or_else(|| Stop::Fail(format!("HTTP {} without a JSON-RPC error: {}", r.status, short(&v))))?;
    error_shape(&e).map_err(|why| Stop::Fail(format!("the answer {}, which {why}", describe(&e))))?;
    Ok((e.code, v.get("id").cloned().unwrap_or(Value::Null)))
}

impl Runner {
    async fn raw(&self, body: &[u8]) -> Result<RawReply, Stop> {
        if !self.opts.url.starts_with("http://") {
            return Err(Stop::Skip("raw bytes are sent on plain TCP, and the URL is not http://".into()));
        }
        Ok(post_raw(&self.opts.url, self.opts.operator_token.as_deref(), body, self.opts.timeout).await?)
    }

    /// A body cut off mid-request: -32700 ParseError, with a null id (none could be read).
    pub(super) async fn parse_error(&mut self) -> Verdict {
        let r = self.raw(TRUNCATED).await?;
        let (code, id) = raw_error(&r)?;
        ensure(code == -32700, || format!("a truncated body got {code} (HTTP {}) instead of -32700", r.status))?;
        ensure(id.is_null(), || format!("the parse error has id {id}, not null"))?;
        Ok(format!("a truncated body: -32700 with id null (HTTP {})", r.status))
    }

    /// A batch: -32600 InvalidRequest, since the protocol refuses batches.
    pub(super) async fn batch(&mut self) -> Verdict {
        let r = self.raw(BATCH).await?;
        let (code, _) = raw_error(&r)?;
        ensure(code == -32600, || format!("a batch got {code} (HTTP {}) instead of -32600", r.status))?;
        Ok(format!("a batch of one ping: -32600 (HTTP {})", r.status))
    }

    /// An unknown method: -32601 MethodNotFound, answered with the request's own id.
    pub(super) async fn unknown_method(&mut self) -> Verdict {
        let mut c: Conn = self.conn().unwrap_or_else(|_| self.operator());
        let id = Id::Str("axp-conformance-unknown-method".into());
        let reply = c.request_as(id.clone(), "axp.no_such_method", json!({})).await?;
        let resp = reply.response().map_err(|e| format!("the answer is not a JSON-RPC response: {e}"))?;
        ensure(resp.id == id, || format!("the error came back with id {:?}, not {id:?}", resp.id))?;
        let e = resp.into_result().err().ok_or("`axp.no_such_method` succeeded".to_string())?;
        ensure(e.code == -32601, || format!("an unknown method got {} instead of -32601", describe(&e)))?;
        Ok(format!("axp.no_such_method: {} (id echoed)", describe(&e)))
    }

    /// Params of the wrong type, and a misspelt param: -32602 InvalidParams naming the field
    /// (in `data.pointer`, the reason or the message) — `axp.index {limit: "ten"}`,
    /// `job.attach {from_seq: "zero"}`, `job.start {argumnets}`.
    pub(super) async fn bad_params(&mut self) -> Verdict {
        let mut c = self.conn()?;
        let job = self.some_job().map(|j| j.id).unwrap_or_else(|_| "j_axp_conformance_no_such_job".into());
        let cases = [
            ("axp.index", json!({"limit": "ten"}), "limit"),
            ("job.attach", json!({"job_id": job, "from_seq": "zero"}), "from_seq"),
            ("job.start", json!({"tool": NO_SUCH_TOOL, "argumnets": {}}), "argumnets"),
        ];
        let mut said = Vec::new();
        for (method, params, field) in cases {
            let e = c.err(method, params.clone()).await?;
            ensure(e.code == -32602 && names_field(&e, field), || {
                format!("{method} {params} got {}, not -32602 naming `{field}`", describe(&e))
            })?;
            said.push(format!("{method} `{field}`"));
        }
        Ok(format!("-32602 naming the field for {}", said.join(", ")))
    }

    /// `job.start` of the chosen tool with one argument of the wrong JSON type: -32602 naming
    /// that property, before anything runs.
    pub(super) async fn bad_tool_arguments(&mut self) -> Verdict {
        let mut c = self.conn()?;
        let tool = self.chosen()?;
        let (prop, args) = mistyped(&tool.schema, &tool.arguments).ok_or_else(|| {
            Stop::Skip(format!("the schema of {} has no property with one plain type to contradict", tool.name))
        })?;
        let e = c.err("job.start", json!({"tool": tool.name, "arguments": args})).await?;
        ensure(e.code == -32602 && names_field(&e, &prop), || {
            format!(
                "{} with {} got {}, not -32602 naming `{prop}`",
                tool.name,
                Value::Object(args.clone()),
                describe(&e)
            )
        })?;
        Ok(format!("{} with `{prop}` = {}: {}", tool.name, args[&prop], describe(&e)))
    }
}
