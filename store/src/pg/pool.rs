//! The PostgreSQL backend's connections: a fixed set of threads, each owning one
//! `postgres::Client`, that run the store's operations one at a time and hand back the result.
//!
//! Why threads: the synchronous `postgres` client drives its connection with a private tokio
//! runtime (`Runtime::block_on`), and tokio refuses to start a runtime on a thread that is
//! already running one — the gateway calls the store straight from its tokio workers (a store
//! call is a short synchronous operation, see the crate docs), so a client used on the caller's
//! thread would panic there. A connection thread has no runtime of its own to clash with, and
//! the caller just waits for its answer on a channel, exactly as it waits on the SQLite
//! connection's mutex today. The store's API stays synchronous, and nothing in this crate
//! touches tokio itself.
//!
//! Each thread connects lazily, reconnects once per operation when it finds its connection
//! closed (the server restarted, a network cut), and keeps the statements it prepared, so a
//! hot statement costs one round trip. An operation that panics is reported as an error and
//! the thread goes on with a fresh connection.

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::mpsc::{Receiver, Sender, SyncSender, channel, sync_channel};
use std::sync::{Arc, Mutex};

use postgres::{Client, NoTls, Statement};

use crate::{Result, StoreError, lock};

/// What every connection of one store shares: how to connect, and what to call the server in
/// errors (never with the password).
pub(crate) struct Target {
    pub(crate) config: postgres::Config,
    /// The TLS connector when the URL asks for TLS.
    pub(crate) tls: Option<tokio_postgres_rustls::MakeRustlsConnect>,
    /// `user@host:port/dbname`, for messages.
    pub(crate) name: String,
}

impl Target {
    /// Wraps a driver error with the server it came from.
    pub(crate) fn err(&self, source: postgres::Error) -> StoreError {
        StoreError::Postgres { target: self.name.clone(), source }
    }

    /// A new connection, over TLS when the URL asked for it.
    pub(crate) fn connect(&self) -> Result<Client> {
        let connected = match &self.tls {
            Some(tls) => self.config.connect(tls.clone()),
            None => self.config.connect(NoTls),
        };
        connected.map_err(|e| self.err(e))
    }
}

/// One connection thread's state, handed to each operation it runs.
pub(crate) struct Conn {
    target: Arc<Target>,
    client: Option<Client>,
    statements: HashMap<&'static str, Statement>,
}

impl Conn {
    /// The connection, (re)connected if it is not open. The session settings every connection
    /// of the store runs with are applied here.
    pub(crate) fn client(&mut self) -> Result<&mut Client> {
        if self.client.as_ref().is_some_and(Client::is_closed) {
            self.client = None;
            self.statements.clear();
        }
        if self.client.is_none() {
            let mut client = self.target.connect()?;
            // Commits do not wait for the WAL flush: an acknowledged write survives a crash of
            // the gateway at once (it is in the server), and a crash of the server after the
            // WAL writer's next flush (within 3 × wal_writer_delay, 600 ms by default). This is
            // what the embedded store's `synchronous=NORMAL` promises; writes that must survive
            // the server's crash at once (an exit under `ExitSync::Inline`, nonces,
            // revocations) commit with `synchronous_commit = on` (`durable`).
            client.batch_execute("SET synchronous_commit TO off").map_err(|e| self.target.err(e))?;
            self.client = Some(client);
        }
        // Set just above when it was not.
        self.client
            .as_mut()
            .ok_or_else(|| StoreError::Unavailable { target: self.target.name.clone(), reason: "no connection".into() })
    }

    /// The prepared form of `sql` on this connection, prepared once.
    pub(crate) fn prepare(&mut self, sql: &'static str) -> Result<Statement> {
        // Reconnects (forgetting the old connection's statements) if the connection was closed.
        self.client()?;
        if let Some(s) = self.statements.get(sql) {
            return Ok(s.clone());
        }
        let target = self.target.clone();
        let prepared = self.client()?.prepare(sql).map_err(|e| target.err(e));
        let stmt = self.forget_if_broken(prepared)?;
        self.statements.insert(sql, stmt.clone());
        Ok(stmt)
    }

    /// Runs `sql` (prepared and cached) and returns how many rows it changed.
    pub(crate) fn execute(
        &mut self,
        sql: &'static str,
        params: &[&(dyn postgres::types::ToSql + Sync)],
    ) -> Result<u64> {
        let stmt = self.prepare(sql)?;
        let target = self.target.clone();
        let done = self.client()?.execute(&stmt, params).map_err(|e| target.err(e));
        self.forget_if_broken(done)
    }

    /// [`Conn::execute`], in a transaction that waits for the WAL flush when `durable` (one
    /// statement needs no transaction of its own otherwise: it commits atomically).
    pub(crate) fn execute_maybe_durable(
        &mut self,
        durable: bool,
        sql: &'static str,
        params: &[&(dyn postgres::types::ToSql + Sync)],
    ) -> Result<u64> {
        if durable { self.durable(|tx| tx.execute(sql, params)) } else { self.execute(sql, params) }
    }

    /// Runs `sql` (prepared and cached) and returns its rows.
    pub(crate) fn query(
        &mut self,
        sql: &'static str,
        params: &[&(dyn postgres::types::ToSql + Sync)],
    ) -> Result<Vec<postgres::Row>> {
        let stmt = self.prepare(sql)?;
        let target = self.target.clone();
        let rows = self.client()?.query(&stmt, params).map_err(|e| target.err(e));
        self.forget_if_broken(rows)
    }

    /// Runs `body` in a transaction that commits with `synchronous_commit = on`, so that once it
    /// returns `Ok` its writes survive a crash of the server too.
    pub(crate) fn durable<T>(&mut self, body: impl FnOnce(&mut Tx<'_>) -> Result<T>) -> Result<T> {
        self.in_transaction(true, body)
    }

    /// Runs `body` in an ordinary transaction (committed without waiting for the WAL flush).
    pub(crate) fn transaction<T>(&mut self, body: impl FnOnce(&mut Tx<'_>) -> Result<T>) -> Result<T> {
        self.in_transaction(false, body)
    }

    fn in_transaction<T>(&mut self, durable: bool, body: impl FnOnce(&mut Tx<'_>) -> Result<T>) -> Result<T> {
        // Reconnect first, so that the statement cache lent to the transaction is this
        // connection's.
        self.client()?;
        let target = self.target.clone();
        let mut cache = std::mem::take(&mut self.statements);
        let result = match self.client.as_mut() {
            None => Err(StoreError::Unavailable { target: target.name.clone(), reason: "no connection".into() }),
            Some(client) => (|| {
                let tx = client.transaction().map_err(|e| target.err(e))?;
                let mut tx = Tx { tx, cache: &mut cache, target: &target };
                if durable {
                    tx.tx.batch_execute("SET LOCAL synchronous_commit TO on").map_err(|e| target.err(e))?;
                }
                let out = body(&mut tx)?;
                tx.tx.commit().map_err(|e| target.err(e))?;
                Ok(out)
            })(),
        };
        self.statements = cache;
        self.forget_if_broken(result)
    }

    /// Drops the connection after an error that means it is gone (the server ended it, the
    /// network failed, a protocol error), so the next operation connects afresh. The driver
    /// does not always know yet that its connection is closed when the error reaches us.
    fn forget_if_broken<T>(&mut self, result: Result<T>) -> Result<T> {
        if let Err(StoreError::Postgres { source, .. }) = &result {
            let statement_error = source.as_db_error().is_some_and(|d| d.severity() == "ERROR");
            if !statement_error {
                self.client = None;
                self.statements.clear();
            }
        }
        result
    }

    /// The server's name for errors.
    pub(crate) fn target(&self) -> &Arc<Target> {
        &self.target
    }
}

/// A transaction on one connection, with that connection's statement cache.
pub(crate) struct Tx<'a> {
    tx: postgres::Transaction<'a>,
    cache: &'a mut HashMap<&'static str, Statement>,
    target: &'a Target,
}

impl Tx<'_> {
    fn prepare(&mut self, sql: &'static str) -> Result<Statement> {
        if let Some(s) = self.cache.get(sql) {
            return Ok(s.clone());
        }
        let stmt = self.tx.prepare(sql).map_err(|e| self.target.err(e))?;
        self.cache.insert(sql, stmt.clone());
        Ok(stmt)
    }

    /// Runs `sql` (prepared and cached) and returns how many rows it changed.
    pub(crate) fn execute(
        &mut self,
        sql: &'static str,
        params: &[&(dyn postgres::types::ToSql + Sync)],
    ) -> Result<u64> {
        let stmt = self.prepare(sql)?;
        self.tx.execute(&stmt, params).map_err(|e| self.target.err(e))
    }

    /// Runs `sql` (prepared and cached) and returns its rows.
    pub(crate) fn query(
        &mut self,
        sql: &'static str,
        params: &[&(dyn postgres::types::ToSql + Sync)],
    ) -> Result<Vec<postgres::Row>> {
        let stmt = self.prepare(sql)?;
        self.tx.query(&stmt, params).map_err(|e| self.target.err(e))
    }

    /// Runs statements without parameters (migrations).
    pub(crate) fn batch(&mut self, sql: &str) -> Result<()> {
        self.tx.batch_execute(sql).map_err(|e| self.target.err(e))
    }
}

type Task = Box<dyn FnOnce(&mut Conn) + Send>;

/// The connection threads of one store.
pub(crate) struct Pool {
    target: Arc<Target>,
    tasks: Mutex<Option<Sender<Task>>>,
}

impl Pool {
    /// Starts `size` connection threads (at least one). None connects until it has work.
    pub(crate) fn start(target: Target, size: usize) -> Result<Pool> {
        let target = Arc::new(target);
        let (tx, rx) = channel::<Task>();
        let rx = Arc::new(Mutex::new(rx));
        for i in 0..size.max(1) {
            let rx = rx.clone();
            let target = target.clone();
            std::thread::Builder::new().name(format!("axp-pg-{i}")).spawn(move || serve(&rx, target)).map_err(|e| {
                StoreError::Unavailable {
                    target: "postgres".into(),
                    reason: format!("cannot start a connection thread: {e}"),
                }
            })?;
        }
        Ok(Pool { target, tasks: Mutex::new(Some(tx)) })
    }

    /// The server, for errors.
    pub(crate) fn target(&self) -> &Arc<Target> {
        &self.target
    }

    /// [`Pool::run`] for an operation that only reads, so running it twice is harmless: when it
    /// fails because its connection was found gone (the server restarted or the network was cut
    /// since this connection thread last used it), it runs once more on the same thread, which
    /// has dropped that connection and so connects afresh. Retrying on the same thread matters:
    /// after a cut every thread of the pool holds a dead connection, and a retry handed to
    /// another thread would only find the next one. Writes are not retried: one whose
    /// connection broke may or may not have committed.
    pub(crate) fn read<T: Send + 'static>(&self, op: impl Fn(&mut Conn) -> Result<T> + Send + 'static) -> Result<T> {
        self.run(move |c| match op(c) {
            Err(e) if e.is_unavailable() => op(c),
            other => other,
        })
    }

    /// Runs `op` on one of the connections and waits for its result.
    pub(crate) fn run<T: Send + 'static>(&self, op: impl FnOnce(&mut Conn) -> Result<T> + Send + 'static) -> Result<T> {
        let (reply_tx, reply_rx): (SyncSender<Result<T>>, _) = sync_channel(1);
        let task: Task = Box::new(move |conn: &mut Conn| {
            let _ = reply_tx.send(op(conn));
        });
        let gone = || StoreError::Unavailable {
            target: self.target.name.clone(),
            reason: "the store's connection threads have stopped".into(),
        };
        {
            let tasks = lock(&self.tasks);
            let Some(tasks) = tasks.as_ref() else { return Err(gone()) };
            tasks.send(task).map_err(|_| gone())?;
        }
        match reply_rx.recv() {
            Ok(result) => result,
            // The operation panicked (its reply sender was dropped unwinding).
            Err(_) => Err(StoreError::Unavailable {
                target: self.target.name.clone(),
                reason: "a store operation panicked; its connection was reset".into(),
            }),
        }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        // Closing the queue ends every thread once it has finished what it was doing; their
        // connections close as they go.
        lock(&self.tasks).take();
    }
}

fn serve(tasks: &Mutex<Receiver<Task>>, target: Arc<Target>) {
    let mut conn = Conn { target, client: None, statements: HashMap::new() };
    loop {
        let task = match lock(tasks).recv() {
            Ok(task) => task,
            Err(_) => return,
        };
        if std::panic::catch_unwind(AssertUnwindSafe(|| task(&mut conn))).is_err() {
            // Whatever the operation left half-done on the connection goes with it.
            conn.client = None;
            conn.statements.clear();
        }
    }
}
