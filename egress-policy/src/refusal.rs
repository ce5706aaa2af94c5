//! Refusals as the audit log and the client see them: a stable reason code with a sentence, and
//! the mappings from every parser's error to its code, from a code to the HTTP status or SOCKS5
//! reply the client gets, and to the record's decision.
//!
//! Pure tables only. The reason codes are part of the audit format (the README lists them), so a
//! new parser error gets its code here, in one place, and never at the call site that meets it.

use crate::host::HostError;
use crate::http::HeadError;
use crate::socks::{self, SocksError};

/// A refusal: the reason code written to the audit log, and a sentence saying why.
pub type Refuse = (&'static str, String);

/// A refusal with reason `code` and the sentence `detail`.
pub fn refuse(code: &'static str, detail: impl Into<String>) -> Refuse {
    (code, detail.into())
}

/// The record's decision for a refusal: `"error"` when the upstream failed or answered
/// something that is not HTTP, `"deny"` for everything the proxy refused itself.
pub fn decision(code: &str) -> &'static str {
    if matches!(code, "upstream_failed" | "upstream_malformed") { "error" } else { "deny" }
}

/// The HTTP status (code and reason phrase) a plain-HTTP or `CONNECT` client is answered with.
pub fn http_status(code: &str) -> (u16, &'static str) {
    match code {
        "malformed" | "invalid_host" | "host_mismatch" => (400, "Bad Request"),
        "header_too_large" => (431, "Request Header Fields Too Large"),
        "connection_limit" | "byte_limit" => (503, "Service Unavailable"),
        "resolve_failed" | "upstream_failed" | "upstream_malformed" => (502, "Bad Gateway"),
        "unsupported" => (501, "Not Implemented"),
        "idle_timeout" => (408, "Request Timeout"),
        _ => (403, "Forbidden"),
    }
}

/// The SOCKS5 reply code a client is answered with when its request is refused after it parsed.
pub fn socks_reply(code: &str) -> u8 {
    match code {
        "resolve_failed" => socks::reply::HOST_UNREACHABLE,
        "upstream_failed" => socks::reply::REFUSED,
        "connection_limit" | "byte_limit" => socks::reply::FAILURE,
        _ => socks::reply::NOT_ALLOWED,
    }
}

/// The refusal for a request head that failed a check (plain HTTP, `CONNECT`, or a request
/// inside a tunnel).
pub fn head_refusal(e: &HeadError) -> Refuse {
    let code = match e {
        HeadError::HostMismatch { .. }
        | HeadError::DuplicateHost
        | HeadError::MissingHost
        | HeadError::TargetMismatch { .. } => "host_mismatch",
        HeadError::Host(HostError::NotAbsolute)
        | HeadError::Host(HostError::BadScheme(_))
        | HeadError::Unsupported(_) => "unsupported",
        HeadError::Host(_) => "invalid_host",
        HeadError::TooManyHeaders | HeadError::TooLarge(_) => "header_too_large",
        HeadError::Syntax(_) | HeadError::Framing(_) | HeadError::ConnectionNamesEndToEnd(_) => "malformed",
    };
    refuse(code, e.to_string())
}

/// The refusal for a SOCKS5 greeting that did not parse.
pub fn socks_greeting_refusal(e: &SocksError) -> Refuse {
    let code = if *e == SocksError::NoAcceptableMethod { "unsupported" } else { "malformed" };
    refuse(code, e.to_string())
}

/// The refusal for a SOCKS5 request that did not parse.
pub fn socks_request_refusal(e: &SocksError) -> Refuse {
    let code = match e {
        SocksError::Host(_) | SocksError::Port => "invalid_host",
        SocksError::Command(_) | SocksError::AddressType(_) => "unsupported",
        _ => "malformed",
    };
    refuse(code, e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::parse_head;
    use crate::socks::{parse_greeting, parse_request};

    fn head_code(raw: &str) -> &'static str {
        match parse_head(raw.as_bytes()) {
            Err(e) => head_refusal(&e).0,
            Ok(Some(h)) => match crate::http::forward_request(&h) {
                Err(e) => head_refusal(&e).0,
                Ok(_) => "ok",
            },
            Ok(None) => "incomplete",
        }
    }

    #[test]
    fn request_heads_map_to_their_reason_codes() {
        assert_eq!(head_code("GET http://a.test/ HTTP/1.1\r\nHost: b.test\r\n\r\n"), "host_mismatch");
        assert_eq!(head_code("GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\nHost: a.test\r\n\r\n"), "host_mismatch");
        assert_eq!(head_code("GET /x HTTP/1.1\r\nHost: a.test\r\n\r\n"), "unsupported");
        assert_eq!(head_code("GET https://a.test/ HTTP/1.1\r\n\r\n"), "unsupported");
        assert_eq!(head_code("GET http://a%2e.test/ HTTP/1.1\r\n\r\n"), "invalid_host");
        assert_eq!(
            head_code("POST http://a.test/ HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n"),
            "malformed"
        );
        assert_eq!(head_code("GET http://a.test/ HTTP/1.1\r\n\r\n"), "ok");
    }

    #[test]
    fn socks_errors_map_to_their_reason_codes() {
        assert_eq!(socks_greeting_refusal(&parse_greeting(&[5, 1, 2]).unwrap_err()).0, "unsupported");
        assert_eq!(socks_greeting_refusal(&parse_greeting(&[4, 1, 0]).unwrap_err()).0, "malformed");
        assert_eq!(
            socks_request_refusal(&parse_request(&[5, 2, 0, 1, 1, 2, 3, 4, 0, 80]).unwrap_err()).0,
            "unsupported"
        );
        assert_eq!(
            socks_request_refusal(&parse_request(&[5, 1, 0, 1, 1, 2, 3, 4, 0, 0]).unwrap_err()).0,
            "invalid_host"
        );
        assert_eq!(socks_request_refusal(&parse_request(&[5, 1, 0, 3, 1, b'@', 0, 80]).unwrap_err()).0, "invalid_host");
        assert_eq!(socks_request_refusal(&parse_request(&[5, 1, 1, 1, 1, 2, 3, 4, 0, 80]).unwrap_err()).0, "malformed");
    }

    #[test]
    fn clients_hear_a_status_that_fits_the_reason() {
        assert_eq!(http_status("host_mismatch").0, 400);
        assert_eq!(http_status("header_too_large").0, 431);
        assert_eq!(http_status("upstream_malformed").0, 502);
        assert_eq!(http_status("not_granted").0, 403);
        assert_eq!(http_status("sni_mismatch").0, 403);
        assert_eq!(socks_reply("resolve_failed"), socks::reply::HOST_UNREACHABLE);
        assert_eq!(socks_reply("not_granted"), socks::reply::NOT_ALLOWED);
        assert_eq!((decision("upstream_failed"), decision("self_connect")), ("error", "deny"));
    }
}
