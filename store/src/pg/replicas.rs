//! What replicas sharing one database need of each other, kept in that database: leases (which
//! replica is alive, by the server's clock), the takeover of a dead replica's running jobs,
//! values every replica must agree on, and messages from one replica to another
//! (PostgreSQL's `LISTEN`/`NOTIFY`).
//!
//! # Leases
//!
//! A replica registers at start ([`Postgres::register`]) and renews its lease well before it
//! runs out ([`Postgres::renew_lease`]); both stamp `replicas.lease_until_ms` with the server's
//! clock, so replicas whose clocks disagree still agree on who expired. Any replica may then
//! reap ([`Postgres::reap_expired`]): one statement deletes every replica row whose lease ran
//! out, and the running jobs whose owner has no row any more end as `lost` after their last
//! stored event. A replica that was only cut off, not dead, finds its row gone at its next
//! renewal (`false`): its jobs were, or are being, ended by another replica, and its own
//! appends to them are refused (a log names the seq it expects), so the log stays whole.
//!
//! # Messages
//!
//! [`Postgres::send`] is `pg_notify` on the channel named after the receiving replica;
//! [`Postgres::listen`] runs a thread with a connection of its own that `LISTEN`s on this
//! replica's channel and on the channel every replica hears ([`Postgres::broadcast`]), and hands
//! each payload to a callback. Delivery is what PostgreSQL gives: in commit order, once, to
//! whoever listens at the time; a notification sent while the listener reconnects is lost, so
//! the callback is told of every (re)connection ([`Message::Connected`]) and callers keep a
//! slower way to the same state (a poll).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use postgres::fallible_iterator::FallibleIterator;

use super::Postgres;
use crate::{Result, StoreError, to_sql_int};

/// The key of the advisory lock that serialises agreements.
const AGREE_LOCK: i64 = 0x6178_705f_6167_7265; // "axp_agre"

/// The channel every replica listens on.
const BROADCAST: &str = "axp_all";

/// The most bytes a message may carry (PostgreSQL refuses payloads of 8000 bytes or more).
pub const MAX_MESSAGE_BYTES: usize = 7900;

/// Why a job is `lost` when its replica's lease ran out.
const LOST_ELSEWHERE: &str =
    "the gateway replica running this job stopped renewing its lease; its log up to that point is intact";

/// What one reaping pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reaped {
    /// The replicas whose leases had run out, now forgotten.
    pub replicas: Vec<String>,
    /// The jobs those (or earlier dead) replicas ran that are now `lost`.
    pub lost: Vec<String>,
}

/// What a [`Listener`] hands its callback.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    /// The listener (re)connected and listens again: messages sent while it was away are lost.
    Connected,
    /// A message sent to this replica ([`crate::Store::send`]).
    Direct(String),
    /// A message sent to every replica ([`crate::Store::broadcast`]).
    Broadcast(String),
}

/// A running listener thread; it stops (within about half a second) when this is dropped.
#[derive(Debug)]
pub struct Listener {
    stop: Arc<AtomicBool>,
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

impl Postgres {
    /// Records this replica as alive for `ttl` from now by the server's clock, whether or not
    /// it had a row (a replica starting).
    pub(crate) fn register(&self, ttl: Duration) -> Result<()> {
        let (me, ttl) = (self.replica.clone(), ttl_ms(ttl));
        self.pool().run(move |c| {
            c.execute(
                "INSERT INTO replicas (id, lease_until_ms, started_ms)
                 VALUES ($1, (extract(epoch FROM clock_timestamp()) * 1000)::bigint + $2,
                         (extract(epoch FROM clock_timestamp()) * 1000)::bigint)
                 ON CONFLICT (id) DO UPDATE SET lease_until_ms = excluded.lease_until_ms, started_ms = excluded.started_ms",
                &[&me, &ttl],
            )?;
            Ok(())
        })
    }

    /// Extends this replica's lease to `ttl` from now; `false` if its row is gone: another
    /// replica found the lease expired and took its jobs over (see the module docs).
    pub(crate) fn renew_lease(&self, ttl: Duration) -> Result<bool> {
        let (me, ttl) = (self.replica.clone(), ttl_ms(ttl));
        self.pool().run(move |c| {
            let n = c.execute(
                "UPDATE replicas SET lease_until_ms = (extract(epoch FROM clock_timestamp()) * 1000)::bigint + $2
                 WHERE id = $1",
                &[&me, &ttl],
            )?;
            Ok(n == 1)
        })
    }

    /// Forgets every replica whose lease ran out, and ends the running jobs of replicas that
    /// have no lease (those just forgotten, and any an earlier pass did not finish) as `lost`.
    /// Safe to run on every replica at once: one statement decides which rows go, and a job's
    /// end is appended at the seq its log has.
    pub(crate) fn reap_expired(&self, now_ms: u64) -> Result<Reaped> {
        let (replicas, orphans) = self.pool().run(|c| {
            let gone = c.query(
                "DELETE FROM replicas WHERE lease_until_ms < (extract(epoch FROM clock_timestamp()) * 1000)::bigint
                 RETURNING id",
                &[],
            )?;
            let orphans = c.query(
                "SELECT j.id FROM jobs j
                 WHERE j.state = 'running' AND NOT EXISTS (SELECT 1 FROM replicas r WHERE r.id = j.owner)
                 ORDER BY j.id LIMIT 1000",
                &[],
            )?;
            Ok((
                gone.iter().map(|r| r.get::<_, String>(0)).collect::<Vec<_>>(),
                orphans.iter().map(|r| r.get::<_, String>(0)).collect::<Vec<_>>(),
            ))
        })?;
        let mut lost = Vec::new();
        for id in orphans {
            if self.end_as_lost(&id, now_ms, LOST_ELSEWHERE)? {
                lost.push(id);
            }
        }
        Ok(Reaped { replicas, lost })
    }

    /// The replica that runs (or ran) job `id`; `None` if there is no such job.
    pub(crate) fn job_owner(&self, id: &str) -> Result<Option<String>> {
        let id = id.to_string();
        self.pool()
            .read(move |c| Ok(c.query("SELECT owner FROM jobs WHERE id = $1", &[&id])?.first().map(|r| r.get(0))))
    }

    /// The replicas whose lease has not run out, by the server's clock.
    pub(crate) fn live_replicas(&self) -> Result<Vec<String>> {
        self.pool().read(|c| {
            let rows = c.query(
                "SELECT id FROM replicas
                 WHERE lease_until_ms >= (extract(epoch FROM clock_timestamp()) * 1000)::bigint ORDER BY id",
                &[],
            )?;
            Ok(rows.iter().map(|r| r.get(0)).collect())
        })
    }

    /// Records `value` under `name` unless another replica with a live lease may rely on the
    /// value recorded, and returns what is recorded then: this value, or the one the live
    /// replicas use. Serialised by an advisory lock, so replicas starting together with
    /// different values do not both win.
    pub(crate) fn agree(&self, name: &str, value: &str) -> Result<String> {
        let (name, value, me) = (name.to_string(), value.to_string(), self.replica.clone());
        self.pool().run(move |c| {
            c.durable(|tx| {
                tx.execute("SELECT pg_advisory_xact_lock($1)", &[&AGREE_LOCK])?;
                let others = tx.query(
                    "SELECT 1 FROM replicas
                     WHERE id <> $1 AND lease_until_ms >= (extract(epoch FROM clock_timestamp()) * 1000)::bigint
                     LIMIT 1",
                    &[&me],
                )?;
                if others.is_empty() {
                    tx.execute(
                        "INSERT INTO agreements (name, value) VALUES ($1, $2)
                         ON CONFLICT (name) DO UPDATE SET value = excluded.value",
                        &[&name, &value],
                    )?;
                } else {
                    tx.execute(
                        "INSERT INTO agreements (name, value) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING",
                        &[&name, &value],
                    )?;
                }
                let rows = tx.query("SELECT value FROM agreements WHERE name = $1", &[&name])?;
                Ok(rows.first().map(|r| r.get(0)).unwrap_or_default())
            })
        })
    }

    /// Sends `payload` to replica `to` (delivered if it listens; see the module docs).
    pub(crate) fn send(&self, to: &str, payload: &str) -> Result<()> {
        self.notify(channel(to), payload)
    }

    /// Sends `payload` to every replica listening, this one included.
    pub(crate) fn broadcast(&self, payload: &str) -> Result<()> {
        self.notify(BROADCAST.to_string(), payload)
    }

    fn notify(&self, channel: String, payload: &str) -> Result<()> {
        if payload.len() > MAX_MESSAGE_BYTES {
            return Err(StoreError::Unavailable {
                target: self.name(),
                reason: format!(
                    "a message of {} bytes is more than the {MAX_MESSAGE_BYTES} one may carry",
                    payload.len()
                ),
            });
        }
        let payload = payload.to_string();
        self.pool().run(move |c| {
            c.query("SELECT pg_notify($1, $2)", &[&channel, &payload])?;
            Ok(())
        })
    }

    /// Starts a thread that listens for this replica's messages and broadcasts and calls
    /// `on_message` with each, in order, on that thread (keep the callback short: hand work
    /// elsewhere). It connects before returning, so a server that refuses fails here; later it
    /// reconnects on its own (every second while the server is away), saying so with
    /// [`Message::Connected`].
    pub(crate) fn listen(&self, on_message: Box<dyn FnMut(Message) + Send>) -> Result<Listener> {
        let target = self.pool().target().clone();
        let mine = channel(&self.replica);
        let connect = move || -> Result<postgres::Client> {
            let mut client = target.connect()?;
            // Quoted: a channel is an identifier, and ours are lower-case already.
            client.batch_execute(&format!("LISTEN \"{mine}\"; LISTEN \"{BROADCAST}\"")).map_err(|e| target.err(e))?;
            Ok(client)
        };
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        // The client drives its connection on a private runtime, which cannot start on a thread
        // that runs one (the caller may be async): the listener connects on its own thread, and
        // the caller waits for the first connection's outcome.
        let (ready_tx, ready_rx) = std::sync::mpsc::sync_channel::<Result<()>>(1);
        std::thread::Builder::new()
            .name("axp-pg-listen".into())
            .spawn(move || match connect() {
                Ok(first) => {
                    let _ = ready_tx.send(Ok(()));
                    listen_loop(first, connect, on_message, &stopped);
                }
                Err(e) => {
                    let _ = ready_tx.send(Err(e));
                }
            })
            .map_err(|e| StoreError::Unavailable {
                target: self.name(),
                reason: format!("cannot start the listener thread: {e}"),
            })?;
        ready_rx.recv().map_err(|_| StoreError::Unavailable {
            target: self.name(),
            reason: "the listener thread stopped before it connected".into(),
        })??;
        Ok(Listener { stop })
    }
}

fn listen_loop(
    first: postgres::Client,
    connect: impl Fn() -> Result<postgres::Client>,
    mut on_message: Box<dyn FnMut(Message) + Send>,
    stop: &AtomicBool,
) {
    let mut client = Some(first);
    on_message(Message::Connected);
    while !stop.load(Ordering::SeqCst) {
        let Some(c) = client.as_mut() else {
            match connect() {
                Ok(c) => {
                    client = Some(c);
                    on_message(Message::Connected);
                }
                Err(_) => std::thread::sleep(Duration::from_secs(1)),
            }
            continue;
        };
        let broken = {
            let mut notes = c.notifications();
            let mut it = notes.timeout_iter(Duration::from_millis(500));
            loop {
                match it.next() {
                    Ok(Some(n)) => on_message(if n.channel() == BROADCAST {
                        Message::Broadcast(n.payload().to_string())
                    } else {
                        Message::Direct(n.payload().to_string())
                    }),
                    Ok(None) => break false,
                    Err(_) => break true,
                }
            }
        };
        if broken || c.is_closed() {
            client = None;
        }
    }
}

/// The channel replica `id` listens on (replica ids are `r_` and hex digits).
fn channel(id: &str) -> String {
    format!("axp_{id}")
}

fn ttl_ms(ttl: Duration) -> i64 {
    to_sql_int(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX))
}
