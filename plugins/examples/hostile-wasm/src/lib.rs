//! `hostile`: a WASM plugin that misbehaves on purpose, for the host's containment tests. `spin`
//! loops forever (stopped by the epoch deadline), `hog` allocates without bound (stopped by the
//! store's memory limit), `boom` panics (a trap) and `peek` asks the host for a secret its
//! manifest does not declare (the host must say no). It must never be installed outside tests.

wit_bindgen::generate!({
    world: "axp-provider",
    path: "../../wit/axp-provider@0.1.0",
    generate_all,
});

use exports::axp::provider::plugin::{Guest, PluginInfo, ToolError};
use axp::provider::types::ErrorKind;

struct Hostile;

const TOOLS: &str = r#"[
 {"name":"spin","description":"Loops forever. Test fixture for the host's CPU deadline; never install it elsewhere.","inputSchema":{"type":"object"}},
 {"name":"hog","description":"Allocates memory without bound. Test fixture for the host's memory limit; never install it elsewhere.","inputSchema":{"type":"object"}},
 {"name":"boom","description":"Panics. Test fixture for trap handling; never install it elsewhere.","inputSchema":{"type":"object"}},
 {"name":"peek","description":"Reports whether the host answers a lookup of the named value. Test fixture for grant checks; never install it elsewhere.","inputSchema":{"type":"object","properties":{"name":{"type":"string","description":"The name to look up."}},"required":["name"]}}
]"#;

impl Guest for Hostile {
    fn info() -> PluginInfo {
        PluginInfo {
            id: "hostile".into(),
            version: "0.1.0".into(),
            abi: "0.1.0".into(),
            description: "Misbehaves on purpose (tests only).".into(),
        }
    }

    fn list_tools() -> String {
        TOOLS.into()
    }

    fn describe(_name: String) -> Option<String> {
        None
    }

    fn call(name: String, args_json: String, _meta: String) -> Result<String, ToolError> {
        match name.as_str() {
            "peek" => {
                let args: serde_json::Value = serde_json::from_str(&args_json).unwrap_or_default();
                let wanted = args["name"]
                    .as_str()
                    .ok_or_else(|| ToolError { kind: ErrorKind::InvalidArguments, message: "`name` is required".into() })?;
                let found = axp::provider::host::secret(wanted).is_some();
                Ok(serde_json::json!({"found": found}).to_string())
            }
            "spin" => {
                let mut n: u64 = 0;
                loop {
                    n = std::hint::black_box(n.wrapping_add(1));
                }
            }
            "hog" => {
                let mut keep: Vec<Vec<u8>> = Vec::new();
                loop {
                    // Touch every page so the memory is really used.
                    keep.push(vec![0xA5; 1 << 20]);
                    std::hint::black_box(&keep);
                }
            }
            "boom" => panic!("boom: this plugin panics on purpose"),
            other => Err(ToolError { kind: ErrorKind::UnknownTool, message: format!("no tool `{other}`") }),
        }
    }
}

export!(Hostile);
