//! Turns a plugin's JSON result into a [`ToolOutput`] (the rule stated in the WIT world and the
//! C header). Shared by the WASM and native providers; no I/O.

use axp_protocol::ToolOutput;
use serde_json::Value;

/// An object with a `content` array is an MCP `CallToolResult`; anything else becomes one text
/// block holding the JSON, plus `structuredContent` when it is an object.
pub(crate) fn to_tool_output(json: &str) -> ToolOutput {
    match serde_json::from_str::<Value>(json) {
        Ok(v) if v.get("content").is_some_and(Value::is_array) => {
            serde_json::from_value(v).unwrap_or_else(|_| ToolOutput::text(json))
        }
        Ok(v @ Value::Object(_)) => ToolOutput { structured_content: Some(v), ..ToolOutput::text(json) },
        _ => ToolOutput::text(json),
    }
}
