//! Attacks `axp_protocol::jsonrpc::parse_incoming`, the one parser that turns the bytes of every
//! transport (HTTP bodies, stdio lines) into a JSON-RPC message or a ready-made error response.
//! Beyond "never panics", it checks what the gateway relies on: a message that parses is
//! JSON-RPC 2.0 with `params` absent or an object/array; re-serialising it and parsing it again
//! gives the same message (so what the gateway logs, forwards or answers is what it was sent; a
//! response whose `result` reads as absent is re-sent with a null one, as it means);
//! and a rejection is itself a well-formed error response whose id is one the input carried, or
//! null.

#![no_main]

use axp_protocol::jsonrpc::{Id, Incoming, parse_incoming};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    match parse_incoming(data) {
        Ok(message) => {
            let bytes = match &message {
                Incoming::Request(r) => {
                    assert_eq!(r.jsonrpc, "2.0");
                    assert_params_shape(r.params.as_ref());
                    serde_json::to_vec(r)
                }
                Incoming::Notification(n) => {
                    assert_eq!(n.jsonrpc, "2.0");
                    assert_params_shape(n.params.as_ref());
                    serde_json::to_vec(n)
                }
                Incoming::Response(r) => {
                    assert_eq!(r.jsonrpc, "2.0");
                    // serde reads `"result": null` (and `"error": null`) as absent, so a parsed
                    // response may have neither member; it means a null result
                    // (`Response::into_result`), and is re-sent as one.
                    let mut r = r.clone();
                    if r.result.is_none() && r.error.is_none() {
                        r.result = Some(Value::Null);
                    }
                    serde_json::to_vec(&r)
                }
            }
            .expect("a parsed message serialises");
            let again = parse_incoming(&bytes).unwrap_or_else(|e| {
                panic!("re-serialised message {} does not parse again: {e:?}", String::from_utf8_lossy(&bytes))
            });
            assert_eq!(again, message, "round trip through {}", String::from_utf8_lossy(&bytes));
        }
        Err(response) => {
            assert_eq!(response.jsonrpc, "2.0");
            assert!(response.result.is_none(), "a rejection carries no result");
            let error = response.error.as_ref().expect("a rejection carries an error");
            assert!(error.code == -32700 || error.code == -32600, "unexpected code {}", error.code);
            // The id echoed back is null or one the input really carried.
            if response.id != Id::Null {
                let value: Value = serde_json::from_slice(data).expect("an id was read, so the input is JSON");
                let echoed = serde_json::to_value(&response.id).expect("ids serialise");
                assert_eq!(value.get("id"), Some(&echoed));
            }
            serde_json::to_vec(&response).expect("an error response serialises");
        }
    }
});

/// `params` is absent, an object or an array: a null `params` is dropped, anything else rejected.
fn assert_params_shape(params: Option<&Value>) {
    if let Some(p) = params {
        assert!(p.is_object() || p.is_array(), "params of the wrong shape: {p}");
    }
}
