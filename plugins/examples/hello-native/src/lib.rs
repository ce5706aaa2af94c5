//! `hello-native`: the example native AXP plugin, built on `axp-plugin-sdk`. Two pure tools:
//! `echo` and `add`. It touches nothing outside its arguments.

use axp_plugin_sdk::{Plugin, ToolError, Value, export_plugin, json};

struct Hello;

impl Plugin for Hello {
    fn info(&self) -> Value {
        json!({"id": "hello-native", "version": "0.1.0", "abi": axp_plugin_sdk::ABI_VERSION_STR,
               "description": "Example native AXP plugin: echo and add."})
    }

    fn tools(&self) -> Vec<Value> {
        vec![
            json!({"name": "echo", "description": "Returns the given message unchanged. Use it to check that the native plugin answers; no side effects.",
                   "inputSchema": {"type": "object", "properties": {"message": {"type": "string", "description": "The text to send back."}}, "required": ["message"]}}),
            json!({"name": "add", "description": "Adds two integers and returns the sum. Pure; no side effects.",
                   "inputSchema": {"type": "object", "properties": {"a": {"type": "integer", "description": "First addend."}, "b": {"type": "integer", "description": "Second addend."}}, "required": ["a", "b"]}}),
        ]
    }

    fn call(&self, name: &str, args: &Value, _meta: &Value) -> Result<Value, ToolError> {
        match name {
            "echo" => {
                let m = args["message"].as_str().ok_or_else(|| ToolError::invalid("`message` must be a string"))?;
                Ok(json!({"message": m}))
            }
            "add" => {
                let (Some(a), Some(b)) = (args["a"].as_i64(), args["b"].as_i64()) else {
                    return Err(ToolError::invalid("`a` and `b` must be integers"));
                };
                Ok(json!({"sum": a.wrapping_add(b)}))
            }
            other => Err(ToolError::unknown_tool(other)),
        }
    }
}

export_plugin!(Hello);
