/*
 * axp_plugin.h — the C ABI of native AXP provider plugins, version 0.1.0.
 *
 * A native plugin is a shared library exporting one symbol, `axp_plugin_v0`, returning a
 * pointer to a static vtable. All data crosses as JSON (UTF-8) in pointer + length pairs;
 * buffers the plugin returns are released by the host through the plugin's own `free_buf`, so
 * host and plugin may use different allocators. Every function must be safe to call from any
 * thread and must never unwind across the boundary: a panic or exception becomes
 * AXP_STATUS_PANIC with a message in `out`.
 *
 * By default the host loads the library in a separate, sandboxed helper process
 * (`axp __plugin-host`), so a crash kills only that process. A library is never unloaded
 * while the process that loaded it lives.
 */
#ifndef AXP_PLUGIN_H
#define AXP_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* (major << 16) | (minor << 8) | patch: 0.1.0. A host refuses any other value, naming both. */
#define AXP_PLUGIN_ABI_VERSION 0x000100u

/* Status codes returned by every vtable function. */
#define AXP_STATUS_OK 0          /* `out` holds the JSON result */
#define AXP_STATUS_TOOL_ERROR 1  /* `out` holds {"kind": "...", "message": "..."} */
#define AXP_STATUS_PANIC 2       /* the plugin panicked; `out` holds a message (may be empty) */
#define AXP_STATUS_BAD_INPUT 3   /* the host passed invalid UTF-8 or JSON */
#define AXP_STATUS_NOT_FOUND 4   /* describe: no such tool */

/* A buffer owned by the plugin until passed back to `free_buf`. */
typedef struct AxpBuf {
    uint8_t *ptr;
    size_t len;
    size_t cap; /* plugin-private (e.g. the allocation's capacity) */
} AxpBuf;

typedef struct AxpPluginV0 {
    uint32_t abi_version;  /* AXP_PLUGIN_ABI_VERSION */
    uint32_t struct_size;  /* sizeof(AxpPluginV0), for forward compatibility */
    /* {"id", "version", "abi", "description"} */
    int32_t (*info)(AxpBuf *out);
    /* a JSON array of MCP Tool objects */
    int32_t (*list_tools)(AxpBuf *out);
    /* one MCP Tool object, or AXP_STATUS_NOT_FOUND */
    int32_t (*describe)(const uint8_t *name, size_t name_len, AxpBuf *out);
    /* args: a JSON object; meta: a JSON value (`null` when absent). The result is JSON: an
     * object with a `content` array is an MCP CallToolResult, anything else one text block. */
    int32_t (*call)(const uint8_t *name, size_t name_len,
                    const uint8_t *args, size_t args_len,
                    const uint8_t *meta, size_t meta_len,
                    AxpBuf *out);
    void (*free_buf)(AxpBuf buf);
} AxpPluginV0;

/* The one exported symbol. */
const AxpPluginV0 *axp_plugin_v0(void);

#ifdef __cplusplus
}
#endif

#endif /* AXP_PLUGIN_H */
