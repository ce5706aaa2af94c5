//! stdio transport: newline-delimited JSON-RPC on stdin/stdout (MCP's stdio framing), so the
//! gateway can itself be listed as one server in a Claude Desktop config. One connection is one
//! session, opened by `initialize` (or the first request that needs one). Requests run
//! concurrently; one writer task keeps every line on stdout whole. Logs go to stderr only.

use std::sync::{Arc, Mutex};

use axp_protocol::jsonrpc::parse_incoming;
use futures::StreamExt;
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;
use tokio_util::codec::{FramedRead, LinesCodec, LinesCodecError};

use crate::gateway::Gateway;
use crate::router::{Ctx, Push};

pub async fn serve(gw: Arc<Gateway>, max_line: usize) -> anyhow::Result<()> {
    let (out_tx, mut out_rx) = mpsc::unbounded_channel::<String>();
    let writer = tokio::spawn(async move {
        let mut stdout = tokio::io::stdout();
        while let Some(line) = out_rx.recv().await {
            if stdout.write_all(line.as_bytes()).await.is_err() || stdout.write_all(b"\n").await.is_err() {
                break;
            }
            let _ = stdout.flush().await;
        }
    });
    // Server-wide notifications (list_changed) go to this client too, once it has initialized:
    // MCP has a server send nothing but pings and logs before that, and providers still
    // mounting in the background announce themselves from the first moment. A change before
    // then is in the tool list the client asks for first.
    let (ready_tx, ready_rx) = tokio::sync::watch::channel(false);
    let mut notes = gw.notify.subscribe();
    let note_tx = out_tx.clone();
    let session: Arc<Mutex<Option<String>>> = Arc::default();
    let mine = session.clone();
    let notes_task = tokio::spawn(async move {
        loop {
            let n = match notes.recv().await {
                Ok(n) => n,
                // A client that fell behind the broadcast misses those notifications, not every
                // later one.
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                Err(tokio::sync::broadcast::error::RecvError::Closed) => break,
            };
            if !*ready_rx.borrow() {
                continue;
            }
            let me = mine.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
            if !n.reaches(me.as_deref()) {
                continue;
            }
            if note_tx.send(n.message.to_string()).is_err() {
                break;
            }
        }
    });
    let mut lines = FramedRead::new(tokio::io::stdin(), LinesCodec::new_with_max_length(max_line));
    while let Some(line) = lines.next().await {
        let line = match line {
            Ok(l) => l,
            Err(LinesCodecError::MaxLineLengthExceeded) => {
                let err = axp_protocol::Response::err(
                    axp_protocol::Id::Null,
                    axp_protocol::RpcError::new(
                        axp_protocol::ErrorCode::LimitExceeded,
                        format!("a message is longer than {max_line} bytes"),
                    ),
                );
                let _ = out_tx.send(serde_json::to_string(&err).unwrap_or_default());
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        if line.trim().is_empty() {
            continue;
        }
        let msg = match parse_incoming(line.as_bytes()) {
            Ok(m) => m,
            Err(resp) => {
                let _ = out_tx.send(serde_json::to_string(&resp).unwrap_or_default());
                continue;
            }
        };
        let initialized = match &msg {
            axp_protocol::jsonrpc::Incoming::Notification(n) => n.method == "notifications/initialized",
            axp_protocol::jsonrpc::Incoming::Request(r) => r.method != "initialize",
            axp_protocol::jsonrpc::Incoming::Response(_) => false,
        };
        if initialized {
            ready_tx.send_replace(true);
        }
        let gw = gw.clone();
        let out = out_tx.clone();
        let session = session.clone();
        tokio::spawn(async move {
            let (push_tx, mut push_rx) = mpsc::unbounded_channel::<Push>();
            let fwd_out = out.clone();
            let fwd = tokio::spawn(async move {
                while let Some(p) = push_rx.recv().await {
                    let _ = fwd_out.send(p.message.to_string());
                }
            });
            let current = session.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
            // The stdio peer was started by the operator: it opens sessions as the local
            // operator. Policy changes still need a signed envelope it does not have.
            let ctx = Ctx {
                session_id: current,
                push: Some(push_tx),
                operator: Some(gw.guard.operators.local()),
                transport: "stdio",
                ..Ctx::default()
            };
            let resp = gw.handle(msg, &ctx).await;
            if let Some(opened) = ctx.opened_session() {
                *session.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(opened);
            }
            drop(ctx);
            let _ = fwd.await;
            if let Some(r) = resp {
                let _ = out.send(serde_json::to_string(&r).unwrap_or_default());
            }
        });
    }
    // stdin closed: stop forwarding notifications so the writer can drain and end.
    notes_task.abort();
    drop(out_tx);
    let _ = writer.await;
    Ok(())
}
