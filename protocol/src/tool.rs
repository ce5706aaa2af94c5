//! The tool model every provider publishes and every client sees: [`ToolSpec`] (what a tool is),
//! [`ToolCall`] (one invocation) and [`ToolOutput`] (its result, in MCP's content shape so MCP
//! results pass through unchanged).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// One tool as a provider declares it. Field names follow MCP's `Tool` so a `tools/list` entry
/// deserialises directly.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolSpec {
    /// The provider's own name for the tool (not the index name).
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(default)]
    pub description: String,
    /// JSON Schema of the arguments (an object schema).
    #[serde(default = "empty_object_schema")]
    pub input_schema: Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Value>,
    /// MCP annotations (`readOnlyHint`, `destructiveHint`, …), passed through.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<Value>,
    /// MCP `icons` (2025-11-25), passed through unchanged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub icons: Option<Value>,
    /// MCP `execution` (`taskSupport`, 2025-11-25), passed through unchanged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub execution: Option<Value>,
    /// MCP `_meta`, passed through unchanged.
    #[serde(default, rename = "_meta", skip_serializing_if = "Option::is_none")]
    pub meta: Option<Value>,
}

/// `{"type":"object"}`: the schema of a tool that takes no arguments.
pub fn empty_object_schema() -> Value {
    serde_json::json!({"type": "object"})
}

impl ToolSpec {
    pub fn new(name: impl Into<String>, description: impl Into<String>, input_schema: Value) -> Self {
        Self {
            name: name.into(),
            title: None,
            description: description.into(),
            input_schema,
            output_schema: None,
            annotations: None,
            icons: None,
            execution: None,
            meta: None,
        }
    }

    /// A boolean annotation such as `destructiveHint`, if present.
    pub fn annotation(&self, key: &str) -> Option<bool> {
        self.annotations.as_ref()?.get(key)?.as_bool()
    }
}

/// One invocation of a provider's tool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The provider's own tool name.
    pub tool: String,
    pub arguments: Map<String, Value>,
    /// Opaque per-call metadata (e.g. the job id), passed to providers that want it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<Value>,
}

/// A tool's result in MCP `CallToolResult` shape.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct ToolOutput {
    #[serde(default)]
    pub content: Vec<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub structured_content: Option<Value>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub is_error: bool,
    /// MCP `_meta` of the result, passed through unchanged.
    #[serde(default, rename = "_meta", skip_serializing_if = "Option::is_none")]
    pub meta: Option<Value>,
}

impl ToolOutput {
    /// A single text block.
    pub fn text(text: impl Into<String>) -> Self {
        Self { content: vec![serde_json::json!({"type": "text", "text": text.into()})], ..Default::default() }
    }

    /// A tool-level error (the call ran, the tool reported failure).
    pub fn error_text(text: impl Into<String>) -> Self {
        Self { is_error: true, ..Self::text(text) }
    }

    /// All text blocks joined by newlines: handy for CLIs and tests.
    pub fn joined_text(&self) -> String {
        self.content.iter().filter_map(|c| c.get("text").and_then(Value::as_str)).collect::<Vec<_>>().join("\n")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mcp_tool_deserialises() {
        let t: ToolSpec = serde_json::from_value(serde_json::json!({
            "name": "echo", "description": "Echoes back the input",
            "inputSchema": {"type": "object", "properties": {"message": {"type": "string"}}},
            "annotations": {"readOnlyHint": true}
        }))
        .unwrap();
        assert_eq!(t.name, "echo");
        assert_eq!(t.annotation("readOnlyHint"), Some(true));
        let bare: ToolSpec = serde_json::from_value(serde_json::json!({"name": "x"})).unwrap();
        assert_eq!(bare.input_schema, empty_object_schema());
    }

    #[test]
    fn output_text_helpers() {
        let o = ToolOutput::error_text("boom");
        assert!(o.is_error);
        assert_eq!(o.joined_text(), "boom");
        let v = serde_json::to_value(ToolOutput::text("hi")).unwrap();
        assert!(v.get("isError").is_none());
    }
}
