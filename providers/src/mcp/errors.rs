//! Failures as a person wants to read them: the innermost cause of an error chain without Rust
//! type names, a failed handshake's reason, and, for a URL server rmcp could not reach, the
//! socket's own reason found by one bounded TCP probe.

use std::time::Duration;

/// A failed MCP handshake as a person wants to read it. rmcp's transport variant does not name
/// its transport error as its `source`, so the chain is walked from that error instead, down to
/// its innermost cause (`Connection refused`).
pub(super) fn init_error_for_people(e: &rmcp::service::ClientInitializeError) -> String {
    match e {
        rmcp::service::ClientInitializeError::TransportError { error, .. } => for_people(error),
        other => for_people(other),
    }
}

/// Why `url` cannot be reached at all, if it cannot: the HTTP client's error does not carry
/// the socket's cause through rmcp ("error sending request" is all it says), so one plain TCP
/// connection to the same host and port, bounded at 3 s, finds it (`connection refused`,
/// an unknown host, a timeout). `None` when the host answers: the failure was above TCP, and the
/// client's own message says more.
pub(super) async fn unreachable_because(url: &str) -> Option<String> {
    let parsed = reqwest::Url::parse(url).ok()?;
    let host = parsed.host_str()?.trim_start_matches('[').trim_end_matches(']').to_string();
    let port = parsed.port_or_known_default()?;
    match tokio::time::timeout(Duration::from_secs(3), tokio::net::TcpStream::connect((host.as_str(), port))).await {
        Ok(Ok(_)) => None,
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
            Some(format!("connection refused (nothing listens on {host}:{port})"))
        }
        Ok(Err(e)) if e.to_string().contains("lookup") || e.to_string().contains("resolve") => {
            Some(format!("cannot resolve the host `{host}`"))
        }
        Ok(Err(e)) => Some(for_people(&e).to_lowercase()),
        Err(_) => Some(format!("no answer from {host}:{port} within 3 s")),
    }
}

/// An error as a person wants to read it: the innermost cause of the chain (`Connection
/// refused (os error 111)`), which says what went wrong, rather than the outer layers, whose
/// messages name library types (`rmcp::transport::worker::WorkerTransport<…>`).
pub(super) fn for_people(e: &(dyn std::error::Error + 'static)) -> String {
    let mut deepest: &dyn std::error::Error = e;
    while let Some(next) = deepest.source() {
        deepest = next;
    }
    let text = deepest.to_string();
    // Without a chain to walk, drop bracketed Rust paths from the one message there is.
    let mut out = String::with_capacity(text.len());
    let mut rest = text.as_str();
    while let Some(open) = rest.find('[') {
        let Some(close) = rest[open..].find(']') else { break };
        let inner = &rest[open + 1..open + close];
        out.push_str(&rest[..open]);
        if !inner.contains("::") {
            out.push_str(&rest[open..=open + close]);
        }
        rest = &rest[open + close + 1..];
    }
    out.push_str(rest);
    out.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod for_people_tests {
    use super::for_people;

    #[derive(Debug)]
    struct Outer(std::io::Error);
    impl std::fmt::Display for Outer {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "Send message error Transport [rmcp::transport::worker::WorkerTransport<X>] error")
        }
    }
    impl std::error::Error for Outer {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn the_innermost_cause_and_no_type_names() {
        let e = Outer(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        assert_eq!(for_people(&e), "connection refused");
        let alone = std::io::Error::other("Transport [rmcp::x::Y<z::W>] closed [at 3]");
        assert_eq!(for_people(&alone), "Transport closed [at 3]");
    }
}
