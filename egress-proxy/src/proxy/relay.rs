//! The byte pump: moves bytes both ways between a client and its upstream until both sides are
//! done, the idle timeout fires, the budget is spent, or a check fails. What may pass is decided
//! by the two state machines of `axp_egress_policy::relay` ([`UpFilter`] for the client's bytes:
//! a tunnel's first-bytes check and its request-by-request HTTP checks, a request body's
//! framing; [`Down`] for the upstream's: a plain-HTTP response's framing); this module only
//! reads, writes, charges the budget, counts, and moves large downloads through a pipe with
//! `splice(2)` once nothing in them is left to look at.
//!
//! For plain HTTP it ends when the response does and hands the upstream connection back when
//! the exchange ended at a message boundary, so it can be kept for a later request.

use std::sync::atomic::Ordering;

use axp_egress_policy::host::Target;
use axp_egress_policy::refusal::Refuse;
use axp_egress_policy::relay::{Advance, ClientEnd, Down, UpFilter, UpstreamClosed};
use tokio::io::{AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use super::{Io, Shared};
use crate::audit::AuditRecord;
use crate::splice::{self, PIPE_SIZE, Pipe};

/// A download goes through a pipe with `splice(2)` (`splice.rs`) once this much has come down
/// the connection by copying: small exchanges, most of them, never pay for the pipe's
/// descriptors.
const SPLICE_AFTER: u64 = 64 * 1024;

/// Buffers start small (most connections move a few KiB, and zeroing a large buffer per
/// connection shows in the latency) and double up to [`BUF_MAX`] while reads fill them.
const BUF_START: usize = 16 * 1024;
const BUF_MAX: usize = 512 * 1024;

/// What one wait in the pump brought.
enum Event {
    /// A read from the client.
    Client(std::io::Result<usize>),
    /// A read from the upstream into the buffer.
    Up(std::io::Result<usize>),
    /// Bytes spliced from the upstream into the pipe.
    Spliced(std::io::Result<usize>),
    /// Nothing moved for the idle timeout.
    Idle,
}

/// How a pump ended, for the caller's upstream connection.
pub(super) enum PumpEnd {
    /// The connection is finished with (dropped).
    Closed,
    /// Plain HTTP: the exchange ended at a message boundary; the connection can be kept.
    Keep(TcpStream),
    /// Plain HTTP over a kept connection: it turned out closed before any response byte, so the
    /// request can be sent again on a fresh one.
    Stale,
}

/// What one step of the pump leads to.
enum Flow {
    /// Go on.
    Go,
    /// The relay ends with this end reason (the record's `end`); both sides are then shut.
    End(&'static str),
    /// The pump returns this at once (the client has been answered or the request is retried).
    Return(PumpEnd),
}

/// One relay in progress: both sockets, the two state machines, and what is open.
struct Pump<'a, S: Io> {
    sh: &'a Shared,
    client: &'a mut S,
    up: TcpStream,
    target: &'a Target,
    rec: &'a mut AuditRecord,
    filter: UpFilter,
    down: Down,
    /// Plain HTTP (not a tunnel): the pump ends with the response.
    plain_http: bool,
    /// Plain HTTP: whether the upstream connection can carry another request afterwards.
    keep: bool,
    cbuf: Vec<u8>,
    ubuf: Vec<u8>,
    client_open: bool,
    up_open: bool,
    up_write_open: bool,
    client_shut: bool,
    /// A client read not yet through the filter.
    pending: Option<Vec<u8>>,
    /// Client bytes held back by a tunnel's request checks and released by the upstream's
    /// answer to an upgrade request (see `TunnelRequests`).
    released: Vec<u8>,
    /// The pipe for large downloads to a TCP client, made when first needed; `can_splice` goes
    /// false for good if this kernel or policy refuses it.
    pipe: Option<Pipe>,
    can_splice: bool,
}

impl Shared {
    /// Writes all of `data` to `to`, or gives up with the connection's end reason: `"error"`, or
    /// `"idle_timeout"` when the peer stops reading for the idle timeout (a write blocked on a
    /// full socket moves no bytes, so it counts as idle; without this a client that never reads
    /// would hold its connection, and a slot of the connection cap, for ever).
    async fn write_within_idle<W: AsyncWrite + Unpin>(&self, to: &mut W, data: &[u8]) -> Result<(), &'static str> {
        match tokio::time::timeout(self.cfg.idle_timeout, to.write_all(data)).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(_)) => Err("error"),
            Err(_) => Err("idle_timeout"),
        }
    }

    /// Takes up to `n` bytes for the client from the budget and counts what was granted.
    fn charge_down(&self, n: usize, rec: &mut AuditRecord) -> u64 {
        let k = self.charge(n as u64);
        rec.bytes_down += k;
        self.audit.metrics.bytes_down.fetch_add(k, Ordering::Relaxed);
        k
    }

    /// Writes `data` to the client, charged to the budget: `Err` with the end reason when the
    /// write fails or the budget runs out (after what it still granted was written).
    /// `last`: nothing follows but the end of the connection, so the bytes are sent with
    /// `MSG_MORE` and leave with the FIN of the shutdown that comes next (one segment, and one
    /// wake-up of the client instead of two).
    async fn to_client<S: Io>(
        &self,
        client: &mut S,
        data: &[u8],
        last: bool,
        rec: &mut AuditRecord,
    ) -> Result<(), &'static str> {
        if data.is_empty() {
            return Ok(());
        }
        let k = self.charge_down(data.len(), rec);
        let mut granted = &data[..k as usize];
        if last && let Ok(n) = client.try_send_more(granted) {
            granted = &granted[n..];
        }
        self.write_within_idle(client, granted).await?;
        if k < data.len() as u64 {
            return Err("byte_limit");
        }
        Ok(())
    }

    /// Writes `data` to the upstream, charged to the budget: `Err` with the end reason when the
    /// write fails or the budget runs out (after what it still granted was written).
    async fn to_upstream(&self, up: &mut TcpStream, data: &[u8], rec: &mut AuditRecord) -> Result<(), &'static str> {
        let n = self.charge(data.len() as u64);
        rec.bytes_up += n;
        self.audit.metrics.bytes_up.fetch_add(n, Ordering::Relaxed);
        self.write_within_idle(up, &data[..n as usize]).await?;
        if n < data.len() as u64 {
            return Err("byte_limit");
        }
        Ok(())
    }

    /// Moves bytes both ways until both sides are done, the idle timeout fires, the budget is
    /// spent, or a check fails. For plain HTTP (`down` is not [`Down::Raw`]) it ends when the
    /// response does, and hands the upstream connection back when the exchange ended at a
    /// message boundary. `initial`: client bytes that came with the request head.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn pump<S: Io>(
        &self,
        client: &mut S,
        up: TcpStream,
        target: &Target,
        initial: Vec<u8>,
        filter: UpFilter,
        down: Down,
        rec: &mut AuditRecord,
    ) -> Result<PumpEnd, Refuse> {
        let plain_http = !down.is_tunnel();
        let mut p = Pump {
            sh: self,
            client,
            up,
            target,
            rec,
            filter,
            down,
            plain_http,
            keep: plain_http,
            cbuf: vec![0u8; BUF_START],
            ubuf: vec![0u8; BUF_START],
            client_open: true,
            up_open: true,
            up_write_open: true,
            client_shut: false,
            pending: Some(initial),
            released: Vec::new(),
            pipe: None,
            can_splice: S::SPLICES_WELL,
        };
        let end = loop {
            if let Some(end) = p.send_up().await? {
                break end;
            }
            if let Some(end) = p.over() {
                break end;
            }
            let event = p.wait().await;
            match p.on(event).await? {
                Flow::Go => {}
                Flow::End(end) => break end,
                Flow::Return(r) => return Ok(r),
            }
        };
        Ok(p.finish(end).await)
    }
}

impl<S: Io> Pump<'_, S> {
    /// Client → upstream: bytes an upgrade's answer released, then the last client read, through
    /// the filter. `Some`: the relay ends (a write failed or the budget ran out).
    async fn send_up(&mut self) -> Result<Option<&'static str>, Refuse> {
        if !self.released.is_empty() && self.up_write_open {
            let data = std::mem::take(&mut self.released);
            if let Err(end) = self.sh.to_upstream(&mut self.up, &data, self.rec).await {
                return Ok(Some(end));
            }
            if !self.client_open && !self.filter.holding() {
                // The client closed while its last bytes were held; they are sent now.
                let _ = self.up.shutdown().await;
                self.up_write_open = false;
            }
        }
        if let Some(data) = self.pending.take() {
            let checked = self.filter.client(self.target, data, self.sh.cfg.max_header_bytes);
            // What the tunnel carries is recorded even when its first request is refused.
            if let Some(kind) = self.filter.inner() {
                self.rec.inner = Some(kind);
            }
            let out = checked?;
            if !out.is_empty()
                && self.up_write_open
                && let Err(end) = self.sh.to_upstream(&mut self.up, &out, self.rec).await
            {
                return Ok(Some(end));
            }
        }
        Ok(None)
    }

    /// `Some("closed")` when nothing more can move: the response is complete, both sides are
    /// closed, or the upstream closed and nothing the client sends can matter any more.
    fn over(&self) -> Option<&'static str> {
        let both_closed = !self.client_open && !self.up_write_open && !self.up_open;
        let up_gone = !self.up_open && (self.plain_http || !self.client_open);
        (self.down.is_done() || both_closed || up_gone).then_some("closed")
    }

    /// Waits for the next thing to happen: a client read, an upstream read (into the buffer, or
    /// through the pipe for a large download with nothing left to inspect), or the idle timeout.
    async fn wait(&mut self) -> Event {
        let mut splicing =
            self.can_splice && self.rec.bytes_down >= SPLICE_AFTER && self.down.opaque() && !self.filter.watching();
        if splicing && self.pipe.is_none() {
            match Pipe::new() {
                Ok(p) => self.pipe = Some(p),
                Err(_) => (self.can_splice, splicing) = (false, false),
            }
        }
        let (up, ubuf, pipe, down) = (&mut self.up, &mut self.ubuf, &self.pipe, &self.down);
        tokio::select! {
            r = self.client.read(&mut self.cbuf), if self.client_open && !self.filter.held_full() => Event::Client(r),
            r = async {
                if splicing { up.readable().await.map(|()| None) } else { up.read(ubuf).await.map(Some) }
            }, if self.up_open => match r {
                Ok(Some(n)) => Event::Up(Ok(n)),
                Err(e) => Event::Up(Err(e)),
                Ok(None) => Event::Spliced(match pipe {
                    Some(p) => p.fill(&*up, down.room(PIPE_SIZE)),
                    None => Err(std::io::ErrorKind::WouldBlock.into()),
                }),
            },
            () = tokio::time::sleep(self.sh.cfg.idle_timeout) => Event::Idle,
        }
    }

    /// Acts on one event.
    async fn on(&mut self, event: Event) -> Result<Flow, Refuse> {
        // Nothing has reached the client yet: a failure can still be answered with a 502.
        let nothing_sent = self.rec.bytes_down == 0;
        match event {
            Event::Spliced(Err(e)) if e.kind() == std::io::ErrorKind::WouldBlock => Ok(Flow::Go),
            Event::Spliced(Err(e)) if splice::unsupported(&e) => {
                self.can_splice = false;
                Ok(Flow::Go)
            }
            Event::Client(Ok(0) | Err(_)) => self.client_closed().await,
            Event::Client(Ok(n)) => {
                self.pending = Some(self.cbuf[..n].to_vec());
                if n == self.cbuf.len() && n < BUF_MAX {
                    self.cbuf.resize(n * 2, 0);
                }
                Ok(Flow::Go)
            }
            Event::Up(Ok(0) | Err(_)) | Event::Spliced(Ok(0) | Err(_)) => self.upstream_closed(nothing_sent).await,
            Event::Up(Ok(n)) => self.upstream_read(n, nothing_sent).await,
            Event::Spliced(Ok(n)) => self.spliced(n).await,
            Event::Idle => Ok(Flow::End("idle_timeout")),
        }
    }

    /// The client closed its side (or its read failed).
    async fn client_closed(&mut self) -> Result<Flow, Refuse> {
        self.client_open = false;
        if !self.plain_http && self.up_write_open {
            match self.filter.client_closed()? {
                ClientEnd::Release(bytes) => {
                    self.released = bytes;
                    self.rec.inner = self.filter.inner();
                }
                ClientEnd::Hold => {}
                ClientEnd::Shut => {
                    let _ = self.up.shutdown().await;
                    self.up_write_open = false;
                }
            }
        }
        Ok(Flow::Go)
    }

    /// The upstream closed its side (or its read failed).
    async fn upstream_closed(&mut self, nothing_sent: bool) -> Result<Flow, Refuse> {
        self.up_open = false;
        self.keep = false;
        match self.down.upstream_closed(nothing_sent, self.rec.reused) {
            UpstreamClosed::Stale => return Ok(Flow::Return(PumpEnd::Stale)),
            UpstreamClosed::Failed(r) => {
                return self.sh.http_deny(self.client, r).await.map(|()| Flow::Return(PumpEnd::Closed));
            }
            UpstreamClosed::Finish => {}
        }
        self.client_shut = true;
        let _ = self.client.shutdown().await;
        Ok(Flow::Go)
    }

    /// `n` bytes came from the upstream into the buffer: what of them goes to the client (and,
    /// in a tunnel awaiting an upgrade's answer, what they release of the client's).
    async fn upstream_read(&mut self, n: usize, nothing_sent: bool) -> Result<Flow, Refuse> {
        let sent = match self.down.advance(&self.ubuf[..n], &mut self.keep) {
            Ok(Advance::Pass(k)) => {
                let last = self.down.is_done();
                self.sh.to_client(self.client, &self.ubuf[..k], last, self.rec).await
            }
            Ok(Advance::Send(bytes)) => self.sh.to_client(self.client, &bytes, self.down.is_done(), self.rec).await,
            Err(r) if nothing_sent => {
                return self.sh.http_deny(self.client, r).await.map(|()| Flow::Return(PumpEnd::Closed));
            }
            Err(r) => return Err(r),
        };
        if let Err(end) = sent {
            return Ok(Flow::End(end));
        }
        // A tunnel's upgrade request: the origin's answer (relayed above as it is) decides
        // whether the client's next bytes are requests (checked) or the new protocol (passed).
        if let Some(released) = self.filter.upstream(&self.ubuf[..n])? {
            self.released = released;
        }
        if n == self.ubuf.len() && n < BUF_MAX {
            self.ubuf.resize(n * 2, 0);
        }
        Ok(Flow::Go)
    }

    /// `n` bytes were spliced from the upstream into the pipe: charged, and drained to the
    /// client.
    async fn spliced(&mut self, n: usize) -> Result<Flow, Refuse> {
        let k = self.sh.charge_down(n, self.rec);
        self.sh.audit.metrics.bytes_spliced.fetch_add(k, Ordering::Relaxed);
        if let Some(p) = &self.pipe {
            match tokio::time::timeout(self.sh.cfg.idle_timeout, p.drain(&*self.client, k as usize)).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => return Ok(Flow::End("error")),
                Err(_) => return Ok(Flow::End("idle_timeout")),
            }
        }
        if k < n as u64 {
            return Ok(Flow::End("byte_limit"));
        }
        self.down.passed(n);
        Ok(Flow::Go)
    }

    /// Records the end and shuts what is still open; hands the upstream connection back when the
    /// exchange ended at a message boundary.
    async fn finish(self, end: &'static str) -> PumpEnd {
        let Pump { client, mut up, rec, filter, down, keep, up_open, up_write_open, client_shut, .. } = self;
        rec.end = Some(end);
        // Each write side is shut once (a second shutdown is a wasted syscall on every
        // connection); dropping the sockets then closes them.
        if !client_shut {
            let _ = client.shutdown().await;
        }
        // The exchange ended at a message boundary: the whole response was read (and nothing
        // after it), the whole request body was sent, and neither side asked to close.
        if keep && end == "closed" && up_open && up_write_open && down.is_done() && filter.is_closed() {
            return PumpEnd::Keep(up);
        }
        if up_write_open {
            let _ = up.shutdown().await;
        }
        PumpEnd::Closed
    }
}
