//! The SOCKS5 stage of a connection whose first byte is `0x05`: the greeting (no
//! authentication), the `CONNECT` request, the decision and the connection, the reply, and then
//! the relay as a tunnel, whose first bytes are checked like a `CONNECT` tunnel's. Refusals are
//! answered with the reply code `refusal::socks_reply` gives them.
//!
//! Only order and I/O live here; the messages are parsed by `axp_egress_policy::socks`.

use axp_egress_policy::refusal::{Refuse, refuse, socks_greeting_refusal, socks_reply, socks_request_refusal};
use axp_egress_policy::relay::{Down, UpFilter};
use axp_egress_policy::socks;
use tokio::io::AsyncWriteExt;

use super::{Io, Shared};
use crate::audit::AuditRecord;

impl Shared {
    /// Serves one SOCKS5 client connection; `buf` holds what it has sent so far.
    pub(super) async fn socks<S: Io>(
        &self,
        s: &mut S,
        mut buf: Vec<u8>,
        has_permit: bool,
        rec: &mut AuditRecord,
    ) -> Result<(), Refuse> {
        let used = loop {
            match socks::parse_greeting(&buf) {
                Ok(Some(n)) => break n,
                Ok(None) if buf.len() > 300 => {
                    return Err(refuse("malformed", "oversize greeting"));
                }
                Ok(None) => {
                    self.read_more(s, &mut buf).await?;
                }
                Err(e) => {
                    let _ = s.write_all(&[5, 0xff]).await;
                    return Err(socks_greeting_refusal(&e));
                }
            }
        };
        buf.drain(..used);
        s.write_all(&[5, 0]).await.map_err(|e| refuse("malformed", e.to_string()))?;
        let (target, used) = loop {
            if buf.len() > 5 && buf[3] == 3 {
                let end = buf.len().min(5 + usize::from(buf[4]));
                rec.requested = Some(crate::audit::escaped(&buf[5..end]));
            }
            match socks::parse_request(&buf) {
                Ok(Some(x)) => break x,
                Ok(None) if buf.len() > 600 => return Err(refuse("malformed", "oversize request")),
                Ok(None) => {
                    self.read_more(s, &mut buf).await?;
                }
                Err(e) => {
                    let _ = s.write_all(&socks::reply_bytes(e.reply_code())).await;
                    return Err(socks_request_refusal(&e));
                }
            }
        };
        buf.drain(..used);
        rec.target = Some(target.to_string());
        let upstream = match self.decide_and_connect(&target, has_permit, rec).await {
            Ok(u) => u,
            Err(r) => {
                let _ = s.write_all(&socks::reply_bytes(socks_reply(r.0))).await;
                return Err(r);
            }
        };
        s.write_all(&socks::reply_bytes(socks::reply::OK)).await.map_err(|e| refuse("malformed", e.to_string()))?;
        self.pump(s, upstream, &target, buf, UpFilter::tunnel(), Down::Raw, rec).await.map(drop)
    }
}
