//! `axp-plugin-sdk`: write a native AXP plugin in Rust. It owns the Rust mirror of
//! `plugins/include/axp_plugin.h` (the `#[repr(C)]` vtable, status codes, buffers) and the
//! `export_plugin!` macro that wraps a [`Plugin`] so every export catches panics and returns
//! `AXP_STATUS_PANIC`. It must not abort or unwind across the C boundary, and it keeps no
//! state of its own beyond the plugin value.
//!
//! ```ignore
//! struct Hello;
//! impl axp_plugin_sdk::Plugin for Hello { /* info, tools, call */ }
//! axp_plugin_sdk::export_plugin!(Hello);
//! ```

use std::panic::{AssertUnwindSafe, catch_unwind};

pub use serde_json::{self, Value, json};

/// `(major << 16) | (minor << 8) | patch` of the ABI this SDK implements (0.1.0).
pub const ABI_VERSION: u32 = 0x00_01_00;
/// The ABI as text, as reported by `info`.
pub const ABI_VERSION_STR: &str = "0.1.0";

pub const STATUS_OK: i32 = 0;
pub const STATUS_TOOL_ERROR: i32 = 1;
pub const STATUS_PANIC: i32 = 2;
pub const STATUS_BAD_INPUT: i32 = 3;
pub const STATUS_NOT_FOUND: i32 = 4;

/// A buffer owned by the plugin until the host passes it to `free_buf`.
#[repr(C)]
#[derive(Debug)]
pub struct AxpBuf {
    pub ptr: *mut u8,
    pub len: usize,
    pub cap: usize,
}

impl AxpBuf {
    fn from_string(s: String) -> Self {
        let mut bytes = std::mem::ManuallyDrop::new(s.into_bytes());
        Self {
            ptr: bytes.as_mut_ptr(),
            len: bytes.len(),
            cap: bytes.capacity(),
        }
    }
}

/// The vtable (`AxpPluginV0` in the header).
#[repr(C)]
#[derive(Debug)]
pub struct AxpPluginV0 {
    pub abi_version: u32,
    pub struct_size: u32,
    pub info: unsafe extern "C" fn(out: *mut AxpBuf) -> i32,
    pub list_tools: unsafe extern "C" fn(out: *mut AxpBuf) -> i32,
    pub describe: unsafe extern "C" fn(name: *const u8, name_len: usize, out: *mut AxpBuf) -> i32,
    #[allow(clippy::type_complexity)]
    pub call: unsafe extern "C" fn(
        name: *const u8,
        name_len: usize,
        args: *const u8,
        args_len: usize,
        meta: *const u8,
        meta_len: usize,
        out: *mut AxpBuf,
    ) -> i32,
    pub free_buf: unsafe extern "C" fn(buf: AxpBuf),
}

/// Why a tool call failed (`kind` is `invalid-arguments`, `unknown-tool`, `denied` or `failed`).
#[derive(Debug, Clone)]
pub struct ToolError {
    pub kind: &'static str,
    pub message: String,
}

impl ToolError {
    pub fn invalid(message: impl Into<String>) -> Self {
        Self { kind: "invalid-arguments", message: message.into() }
    }
    pub fn unknown_tool(name: &str) -> Self {
        Self { kind: "unknown-tool", message: format!("no tool `{name}`") }
    }
    pub fn failed(message: impl Into<String>) -> Self {
        Self { kind: "failed", message: message.into() }
    }
}

/// What a native plugin implements.
pub trait Plugin: Sync + 'static {
    /// `{"id", "version", "abi", "description"}`; `abi` must be [`ABI_VERSION_STR`].
    fn info(&self) -> Value;
    /// MCP `Tool` objects.
    fn tools(&self) -> Vec<Value>;
    /// One call; the result is JSON as the header describes.
    fn call(&self, name: &str, args: &Value, meta: &Value) -> Result<Value, ToolError>;
}

fn write(out: *mut AxpBuf, s: String) {
    if out.is_null() {
        return;
    }
    // SAFETY: the host passes a valid, writable `AxpBuf` pointer (header contract); we checked
    // it is not null.
    unsafe { out.write(AxpBuf::from_string(s)) };
}

/// # Safety
/// `ptr` must point to `len` readable bytes (or be null with `len == 0`).
unsafe fn read<'a>(ptr: *const u8, len: usize) -> Option<&'a str> {
    if ptr.is_null() {
        return (len == 0).then_some("");
    }
    // SAFETY: the caller guarantees `ptr..ptr+len` is readable for the call's duration.
    let bytes = unsafe { std::slice::from_raw_parts(ptr, len) };
    std::str::from_utf8(bytes).ok()
}

fn guarded(out: *mut AxpBuf, f: impl FnOnce() -> (i32, String)) -> i32 {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok((status, s)) => {
            write(out, s);
            status
        }
        Err(payload) => {
            let msg = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            write(out, msg);
            STATUS_PANIC
        }
    }
}

#[doc(hidden)]
pub fn __info(p: &dyn Plugin, out: *mut AxpBuf) -> i32 {
    guarded(out, || (STATUS_OK, p.info().to_string()))
}

#[doc(hidden)]
pub fn __list_tools(p: &dyn Plugin, out: *mut AxpBuf) -> i32 {
    guarded(out, || (STATUS_OK, Value::Array(p.tools()).to_string()))
}

/// # Safety
/// As in the header: `name` points to `name_len` bytes, `out` to a writable buffer.
#[doc(hidden)]
pub unsafe fn __describe(p: &dyn Plugin, name: *const u8, name_len: usize, out: *mut AxpBuf) -> i32 {
    // SAFETY: forwarded from the host's contract.
    let Some(name) = (unsafe { read(name, name_len) }) else {
        return STATUS_BAD_INPUT;
    };
    guarded(out, || {
        match p.tools().into_iter().find(|t| t["name"] == name) {
            Some(t) => (STATUS_OK, t.to_string()),
            None => (STATUS_NOT_FOUND, String::new()),
        }
    })
}

/// # Safety
/// As in the header: every pointer/length pair is readable, `out` is writable.
#[doc(hidden)]
#[allow(clippy::too_many_arguments)]
pub unsafe fn __call(
    p: &dyn Plugin,
    name: *const u8,
    name_len: usize,
    args: *const u8,
    args_len: usize,
    meta: *const u8,
    meta_len: usize,
    out: *mut AxpBuf,
) -> i32 {
    // SAFETY: forwarded from the host's contract.
    let (name, args, meta) = unsafe { (read(name, name_len), read(args, args_len), read(meta, meta_len)) };
    let (Some(name), Some(args), Some(meta)) = (name, args, meta) else {
        return STATUS_BAD_INPUT;
    };
    let (Ok(args), Ok(meta)) = (serde_json::from_str::<Value>(args), serde_json::from_str::<Value>(meta)) else {
        return STATUS_BAD_INPUT;
    };
    guarded(out, || match p.call(name, &args, &meta) {
        Ok(v) => (STATUS_OK, v.to_string()),
        Err(e) => (STATUS_TOOL_ERROR, json!({"kind": e.kind, "message": e.message}).to_string()),
    })
}

/// # Safety
/// `buf` must come from this SDK (a `String` split into raw parts) and be freed once.
#[doc(hidden)]
pub unsafe extern "C" fn __free_buf(buf: AxpBuf) {
    if buf.ptr.is_null() {
        return;
    }
    // SAFETY: `buf` was made by `AxpBuf::from_string` from a `Vec<u8>` with exactly these parts.
    drop(unsafe { Vec::from_raw_parts(buf.ptr, buf.len, buf.cap) });
}

/// Exports `axp_plugin_v0` for a plugin value: `export_plugin!(MyPlugin)` where `MyPlugin` is a
/// unit struct (or any constant expression) implementing [`Plugin`].
#[macro_export]
macro_rules! export_plugin {
    ($value:expr) => {
        static __AXP_PLUGIN: &dyn $crate::Plugin = &$value;

        unsafe extern "C" fn __axp_info(out: *mut $crate::AxpBuf) -> i32 {
            $crate::__info(__AXP_PLUGIN, out)
        }
        unsafe extern "C" fn __axp_list_tools(out: *mut $crate::AxpBuf) -> i32 {
            $crate::__list_tools(__AXP_PLUGIN, out)
        }
        unsafe extern "C" fn __axp_describe(n: *const u8, nl: usize, out: *mut $crate::AxpBuf) -> i32 {
            // SAFETY: the host upholds the header's pointer contract.
            unsafe { $crate::__describe(__AXP_PLUGIN, n, nl, out) }
        }
        unsafe extern "C" fn __axp_call(
            n: *const u8, nl: usize, a: *const u8, al: usize, m: *const u8, ml: usize,
            out: *mut $crate::AxpBuf,
        ) -> i32 {
            // SAFETY: the host upholds the header's pointer contract.
            unsafe { $crate::__call(__AXP_PLUGIN, n, nl, a, al, m, ml, out) }
        }
        static __AXP_VTABLE: $crate::AxpPluginV0 = $crate::AxpPluginV0 {
            abi_version: $crate::ABI_VERSION,
            struct_size: ::std::mem::size_of::<$crate::AxpPluginV0>() as u32,
            info: __axp_info,
            list_tools: __axp_list_tools,
            describe: __axp_describe,
            call: __axp_call,
            free_buf: $crate::__free_buf,
        };
        #[unsafe(no_mangle)]
        pub extern "C" fn axp_plugin_v0() -> *const $crate::AxpPluginV0 {
            &__AXP_VTABLE
        }
    };
}
