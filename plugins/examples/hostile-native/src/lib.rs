//! `hostile-native`: a native plugin that misbehaves on purpose, for containment tests only.
//! `panic` panics (the SDK turns it into an error code), `segv` writes through a null pointer
//! (kills the process it runs in), `ok` answers normally.

use axp_plugin_sdk::{Plugin, ToolError, Value, export_plugin, json};

struct Hostile;

impl Plugin for Hostile {
    fn info(&self) -> Value {
        json!({"id": "hostile-native", "version": "0.1.0", "abi": axp_plugin_sdk::ABI_VERSION_STR,
               "description": "Misbehaves on purpose (tests only)."})
    }

    fn tools(&self) -> Vec<Value> {
        ["panic", "segv", "ok"]
            .iter()
            .map(|n| json!({"name": n, "description": format!("Test fixture `{n}`: misbehaves on purpose; never install it elsewhere."), "inputSchema": {"type": "object"}}))
            .collect()
    }

    fn call(&self, name: &str, _args: &Value, _meta: &Value) -> Result<Value, ToolError> {
        match name {
            "panic" => panic!("hostile-native panics on purpose"),
            "segv" => {
                // SAFETY: none — this is the point: a plugin that crashes its process.
                unsafe { std::ptr::null_mut::<u64>().write_volatile(42) };
                Ok(Value::Null)
            }
            "ok" => Ok(json!("still here")),
            other => Err(ToolError::unknown_tool(other)),
        }
    }
}

export_plugin!(Hostile);
