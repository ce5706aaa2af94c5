//! The HTTP stage of a connection whose first byte is not SOCKS5: the request head is read
//! (`inspect::request_head`), then either a `CONNECT` (its destination checked by
//! `inspect::connect_target`, decided, connected, answered `200`, and relayed as a tunnel) or a
//! plain-HTTP request (rewritten by `http::forward_request`, decided, sent over a fresh or a kept
//! upstream connection, and relayed with its response framed), one request per client
//! connection. A refusal answers the client with the status `refusal::http_status` gives it.
//!
//! Only order and I/O live here; every check is a function of `axp-egress-policy`.

use axp_egress_policy::http;
use axp_egress_policy::inspect::{connect_target, request_head};
use axp_egress_policy::refusal::{Refuse, head_refusal, http_status, refuse};
use axp_egress_policy::relay::{Down, UpFilter};
use tokio::io::AsyncWriteExt;

use super::relay::PumpEnd;
use super::upstream::granted;
use super::{Io, Shared};
use crate::audit::AuditRecord;

impl Shared {
    /// Serves one HTTP client connection; `buf` holds what it has sent so far.
    pub(super) async fn http<S: Io>(
        &self,
        s: &mut S,
        mut buf: Vec<u8>,
        has_permit: bool,
        rec: &mut AuditRecord,
    ) -> Result<(), Refuse> {
        rec.proto = "http";
        let max = self.cfg.max_header_bytes;
        let head = loop {
            match request_head(&buf, max) {
                Ok(Some(h)) => break h,
                Ok(None) => {
                    self.read_more(s, &mut buf).await?;
                }
                Err(r) => return self.http_deny(s, r).await,
            }
        };
        rec.requested = Some(crate::audit::escaped(head.target.as_bytes()));
        if head.method.eq_ignore_ascii_case("CONNECT") {
            rec.proto = "connect";
            let target = match connect_target(&head) {
                Ok(t) => t,
                Err((named, r)) => {
                    rec.target = named.map(|t| t.to_string());
                    return self.http_deny(s, r).await;
                }
            };
            rec.target = Some(target.to_string());
            let upstream = match self.decide_and_connect(&target, has_permit, rec).await {
                Ok(u) => u,
                Err(r) => return self.http_deny(s, r).await,
            };
            s.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                .await
                .map_err(|e| refuse("malformed", format!("client went away: {e}")))?;
            let leftover = buf.split_off(head.len);
            return self.pump(s, upstream, &target, leftover, UpFilter::tunnel(), Down::Raw, rec).await.map(drop);
        }
        let fwd = match http::forward_request(&head) {
            Ok(f) => f,
            Err(e) => {
                if let Ok((t, _)) = axp_egress_policy::host::parse_absolute_form(&head.target) {
                    rec.target = Some(t.to_string());
                }
                return self.http_deny(s, head_refusal(&e)).await;
            }
        };
        rec.target = Some(fwd.target.to_string());
        let (rule, ips) = match self.decide(&fwd.target, has_permit, rec).await {
            Ok(d) => d,
            Err(r) => return self.http_deny(s, r).await,
        };
        let mut leftover = buf.split_off(head.len);
        let mut kept = if fwd.may_reuse { self.pool_take(&fwd.target, &ips) } else { None };
        loop {
            let reused = kept.is_some();
            let (addr, mut upstream) = match kept.take() {
                Some(k) => {
                    rec.addr = Some(k.0.to_string());
                    granted(rec, &rule);
                    k
                }
                None => match self.connect(&ips, fwd.target.port, &rule, rec).await {
                    Ok(c) => c,
                    Err(r) => return self.http_deny(s, r).await,
                },
            };
            rec.reused = reused;
            let n = self.charge(fwd.upstream_head.len() as u64);
            if n < fwd.upstream_head.len() as u64 {
                return self.http_deny(s, refuse("byte_limit", "the session's byte budget is spent")).await;
            }
            rec.bytes_up += n;
            if let Err(e) = upstream.write_all(&fwd.upstream_head).await {
                if reused {
                    continue;
                }
                return self.http_deny(s, refuse("upstream_failed", format!("writing to upstream: {e}"))).await;
            }
            let filter = UpFilter::request_body(fwd.body);
            let down = Down::response(head.method == "HEAD");
            let exchange = self.pump(s, upstream, &fwd.target, std::mem::take(&mut leftover), filter, down, rec);
            match exchange.await? {
                // A request with a body asked the origin to close (see `forward_request`); its
                // connection is never kept, whatever the origin answered.
                PumpEnd::Keep(_) if !fwd.persistent => return Ok(()),
                // Only a kept connection ends as stale, and only a bodiless request takes one,
                // so nothing of the client's is lost by sending the head again.
                PumpEnd::Stale => {}
                PumpEnd::Keep(conn) => {
                    self.pool_put(&fwd.target, addr, conn);
                    return Ok(());
                }
                PumpEnd::Closed => return Ok(()),
            }
        }
    }

    /// Answers an HTTP client with the refusal `r` and closes its write side; always `Err(r)`.
    pub(super) async fn http_deny<S: Io>(&self, s: &mut S, r: Refuse) -> Result<(), Refuse> {
        let (status, text) = http_status(r.0);
        let _ = s.write_all(&http::response(status, text, r.0, &r.1)).await;
        let _ = s.shutdown().await;
        Err(r)
    }
}
