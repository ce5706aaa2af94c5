//! Noticing a stdio server's message that is too large to take. rmcp reads a stdio server's
//! stdout one line per message, up to [`MAX_MESSAGE_BYTES`](crate::MAX_MESSAGE_BYTES), and
//! discards a longer line with only a log line: the request it answered would then wait for its
//! deadline and fail as a timeout, which says nothing of the cause. This reader sits between the
//! child's stdout and rmcp, counts the length of the line being read, and raises [`Oversize`]
//! once per line that passes the limit, so the request waiting for it can fail at once and say
//! why. It passes every byte through unchanged.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, ReadBuf};
use tokio::sync::Notify;

/// Raised when the server wrote a message longer than the limit (which rmcp then discards).
#[derive(Default)]
pub(super) struct Oversize {
    seen: Notify,
    /// Requests waiting for an answer on this connection: only when one is waiting can a
    /// discarded message be known to have been its answer.
    waiting: AtomicUsize,
}

impl Oversize {
    /// Resolves when a message over the limit is discarded.
    pub(super) async fn discarded(&self) {
        self.seen.notified().await;
    }

    /// Counts a request as waiting until the guard is dropped.
    pub(super) fn wait(self: &Arc<Self>) -> WaitGuard {
        self.waiting.fetch_add(1, Ordering::SeqCst);
        WaitGuard(self.clone())
    }

    /// Whether exactly one request is waiting (so a discarded message was its answer).
    pub(super) fn alone(&self) -> bool {
        self.waiting.load(Ordering::SeqCst) == 1
    }
}

/// A request waiting on the connection (see [`Oversize::wait`]).
pub(super) struct WaitGuard(Arc<Oversize>);

impl Drop for WaitGuard {
    fn drop(&mut self) {
        self.0.waiting.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The child's stdout, with line lengths counted.
pub(super) struct Counted<R> {
    inner: R,
    line: usize,
    limit: usize,
    flagged: bool,
    oversize: Arc<Oversize>,
}

impl<R> Counted<R> {
    pub(super) fn new(inner: R, limit: usize, oversize: Arc<Oversize>) -> Self {
        Self { inner, line: 0, limit, flagged: false, oversize }
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for Counted<R> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = polled {
            let me = &mut *self;
            for &b in &buf.filled()[before..] {
                if b == b'\n' {
                    me.line = 0;
                    me.flagged = false;
                    continue;
                }
                me.line += 1;
                if me.line > me.limit && !me.flagged {
                    me.flagged = true;
                    me.oversize.seen.notify_waiters();
                }
            }
        }
        polled
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    #[tokio::test]
    async fn a_line_over_the_limit_is_flagged_once_and_passed_through() {
        let oversize = Arc::new(Oversize::default());
        let data = format!("{}\n{}\nshort\n", "a".repeat(5), "b".repeat(40));
        let mut r = Counted::new(data.as_bytes(), 10, oversize.clone());
        let waiter = {
            let o = oversize.clone();
            tokio::spawn(async move { o.discarded().await })
        };
        tokio::task::yield_now().await;
        let mut out = String::new();
        r.read_to_string(&mut out).await.unwrap();
        assert_eq!(out, data, "every byte passes through");
        tokio::time::timeout(std::time::Duration::from_secs(1), waiter).await.unwrap().unwrap();
        let _one = oversize.wait();
        assert!(oversize.alone());
        let _two = oversize.wait();
        assert!(!oversize.alone());
    }
}
