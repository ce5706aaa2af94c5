//! Progress for the commands that make a person wait: `axp serve` while its servers mount, `axp
//! provider add` while a plugin is verified and compiled, and `axp lint --mcp-config` while the
//! fleet's servers start. This file owns how that progress looks (indicatif, on stderr) and the
//! one decision of when it is shown: live, with a spinner and timings, only when stderr is a
//! terminal and `--quiet` was not given; as the plain step lines these commands have always
//! printed when stderr is not a terminal (no control sequences); not at all with `--quiet`. It
//! never writes to stdout, which carries the data scripts parse (`axp lint --format json`, the
//! tools `axp provider add` installed), and it only observes the work: nothing here decides
//! when or how a server starts.

use std::collections::{BTreeSet, HashSet};
use std::io::{IsTerminal, Write};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressFinish, ProgressState, ProgressStyle, TermLike};
use tokio_util::sync::{CancellationToken, DropGuard};

use crate::catalog::registry::{Registry, STARTING};

/// How a command shows its progress.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// stderr is a terminal: a spinner with the time so far, and a line with its time for each
    /// step or server when it ends.
    Live,
    /// stderr is a file or a pipe: the plain lines the command prints anyway, nothing redrawn.
    Plain,
    /// `--quiet`: no progress at all (errors and warnings still go to stderr).
    Quiet,
}

impl Mode {
    /// Live on a terminal (other than `TERM=dumb`, which cannot move its cursor), plain
    /// elsewhere, nothing with `--quiet`.
    pub fn detect(quiet: bool) -> Mode {
        if quiet {
            Mode::Quiet
        } else if std::io::stderr().is_terminal() && std::env::var_os("TERM").is_none_or(|t| t != "dumb") {
            Mode::Live
        } else {
            Mode::Plain
        }
    }
}

/// A duration as a person reads it: tenths of a second under a minute, then minutes and seconds.
pub fn human(d: Duration) -> String {
    let secs = d.as_secs_f64();
    if secs < 60.0 { format!("{secs:.1} s") } else { format!("{} min {:02} s", d.as_secs() / 60, d.as_secs() % 60) }
}

/// A spinner on stderr that redraws itself ten times a second, followed by its message and the
/// time since it started (or since the last `reset_elapsed`). Dropped, it clears its line.
fn spinner(message: String) -> ProgressBar {
    let style = ProgressStyle::with_template("{spinner} {msg} ({secs})")
        .unwrap_or_else(|_| ProgressStyle::default_spinner())
        .tick_chars("⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏ ")
        .with_key("secs", |state: &ProgressState, w: &mut dyn std::fmt::Write| {
            let _ = w.write_str(&human(state.elapsed()));
        });
    let bar =
        ProgressBar::with_draw_target(None, ProgressDrawTarget::term_like_with_hz(Box::new(Stderr::default()), 10))
            .with_style(style)
            .with_message(message)
            .with_finish(ProgressFinish::AndClear);
    bar.enable_steady_tick(Duration::from_millis(100));
    bar
}

/// stderr as indicatif draws on it, with two differences from indicatif's own terminal target:
/// each redraw goes out in one write, and it leaves the cursor at the start of the spinner's
/// line rather than at its end. The gateway's log lines go to the same stderr from other
/// threads; one written between two redraws then starts over the spinner's line, and the next
/// redraw puts the spinner on the line below it, instead of the log line being glued to the
/// spinner or leaving a stale copy of it above.
#[derive(Debug, Default)]
struct Stderr {
    pending: Mutex<String>,
}

impl Stderr {
    fn push(&self, s: &str) -> std::io::Result<()> {
        self.pending.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push_str(s);
        Ok(())
    }

    /// The terminal's rows and columns (24 × 80 when it does not say).
    fn size() -> (u16, u16) {
        match rustix::termios::tcgetwinsize(std::io::stderr()) {
            Ok(w) if w.ws_row > 0 && w.ws_col > 0 => (w.ws_row, w.ws_col),
            _ => (24, 80),
        }
    }
}

impl TermLike for Stderr {
    fn width(&self) -> u16 {
        Self::size().1
    }

    fn height(&self) -> u16 {
        Self::size().0
    }

    fn move_cursor_up(&self, n: usize) -> std::io::Result<()> {
        if n == 0 { Ok(()) } else { self.push(&format!("\x1b[{n}A")) }
    }

    fn move_cursor_down(&self, n: usize) -> std::io::Result<()> {
        if n == 0 { Ok(()) } else { self.push(&format!("\x1b[{n}B")) }
    }

    fn move_cursor_right(&self, n: usize) -> std::io::Result<()> {
        if n == 0 { Ok(()) } else { self.push(&format!("\x1b[{n}C")) }
    }

    fn move_cursor_left(&self, n: usize) -> std::io::Result<()> {
        if n == 0 { Ok(()) } else { self.push(&format!("\x1b[{n}D")) }
    }

    fn write_line(&self, s: &str) -> std::io::Result<()> {
        self.push(s)?;
        self.push("\n")
    }

    fn write_str(&self, s: &str) -> std::io::Result<()> {
        self.push(s)
    }

    fn clear_line(&self) -> std::io::Result<()> {
        self.push("\r\x1b[2K")
    }

    fn flush(&self) -> std::io::Result<()> {
        let mut pending = self.pending.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        // indicatif pads the spinner's line to the terminal's width, so the cursor waits at its
        // last column; back to the first, so that the next writer overwrites the spinner.
        pending.push('\r');
        let mut err = std::io::stderr().lock();
        let written = err.write_all(pending.as_bytes()).and_then(|()| err.flush());
        pending.clear();
        written
    }
}

/// The steps of one piece of work (`axp provider add`): live, the current step turns with the
/// time it has taken so far, and each finished step stays as a line with its time.
pub struct Steps {
    mode: Mode,
    started: Instant,
    bar: Option<ProgressBar>,
    /// The step under way, and since when.
    current: Mutex<Option<(String, Instant)>>,
}

impl Steps {
    pub fn new(quiet: bool) -> Steps {
        let mode = Mode::detect(quiet);
        let bar = (mode == Mode::Live).then(|| spinner("starting".to_string()));
        Steps { mode, started: Instant::now(), bar, current: Mutex::new(None) }
    }

    /// A new step begins (the one before it has ended).
    pub fn step(&self, text: &str) {
        match (&self.bar, self.mode) {
            (Some(bar), _) => {
                let mut current = self.current.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                let previous = current.replace((text.to_string(), Instant::now()));
                // The spinner under the finished step's line already shows the new one.
                bar.set_message(text.to_string());
                bar.reset_elapsed();
                if let Some((previous, since)) = previous {
                    bar.println(format!("  {previous} ({})", human(since.elapsed())));
                }
            }
            (None, Mode::Plain) => eprintln!("  {text}"),
            (None, _) => {}
        }
    }

    /// The work ended: its last step stays as a line, with the whole work's time, or says that
    /// it failed (the caller reports why).
    pub fn finish(&self, ok: bool) {
        let Some(bar) = &self.bar else { return };
        let current = self.current.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
        if let Some((last, since)) = current {
            let line = if ok {
                format!("  {last} ({}, {} in all)", human(since.elapsed()), human(self.started.elapsed()))
            } else {
                format!("  {last}: failed after {}", human(since.elapsed()))
            };
            bar.println(line);
        }
        bar.finish_and_clear();
    }
}

/// Servers starting together (`axp lint --mcp-config`, `axp serve`): live, a spinner names the
/// ones still awaited with the time so far, and each one that ends stays as a line saying how
/// it ended and when (the time since they all began); a summary line closes.
pub struct Servers {
    mode: Mode,
    /// "started" or "mounted".
    verb: &'static str,
    /// Put before every line (`axp serve` prefixes its own lines with `axp: `).
    prefix: &'static str,
    total: Option<usize>,
    started: Instant,
    bar: Option<ProgressBar>,
    state: Mutex<ServersState>,
}

#[derive(Default)]
struct ServersState {
    waiting: BTreeSet<String>,
    up: usize,
    failed: Vec<String>,
}

impl Servers {
    /// `total` servers, when known at the start (the plain lines number them).
    pub fn new(mode: Mode, verb: &'static str, prefix: &'static str, total: Option<usize>) -> Servers {
        let bar = (mode == Mode::Live).then(|| spinner(format!("{prefix}starting servers")));
        if let (Mode::Plain, Some(n)) = (mode, total) {
            eprintln!("{prefix}starting {n} server(s)…");
        }
        Servers { mode, verb, prefix, total, started: Instant::now(), bar, state: Mutex::default() }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, ServersState> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// `name` is starting.
    pub fn waiting(&self, name: &str) {
        let mut st = self.state();
        st.waiting.insert(name.to_string());
        self.redraw(&st);
    }

    pub fn any_waiting(&self) -> bool {
        !self.state().waiting.is_empty()
    }

    /// `name` has started with `Ok(tools)`, or failed with `Err(reason)`.
    pub fn settled(&self, name: &str, outcome: Result<usize, &str>) {
        let mut st = self.state();
        st.waiting.remove(name);
        match outcome {
            Ok(_) => st.up += 1,
            Err(_) => st.failed.push(name.to_string()),
        }
        let at = human(self.started.elapsed());
        let (prefix, verb) = (self.prefix, self.verb);
        match (&self.bar, self.mode) {
            (Some(bar), _) => {
                // The spinner under the new line already leaves this server out.
                self.redraw(&st);
                bar.println(match outcome {
                    Ok(tools) => format!("{prefix}{name} {verb} in {at} ({tools} tools)"),
                    Err(reason) => format!("{prefix}{name} failed after {at}: {reason}"),
                });
            }
            (None, Mode::Plain) => {
                let n = st.up + st.failed.len();
                let of = self.total.map_or_else(|| n.to_string(), |t| format!("{n}/{t}"));
                match outcome {
                    Ok(tools) => eprintln!("{prefix}[{of}] {name}: {tools} tools"),
                    Err(reason) => eprintln!("{prefix}[{of}] {name}: failed: {reason}"),
                }
            }
            (None, _) => {}
        }
    }

    fn redraw(&self, st: &ServersState) {
        let Some(bar) = &self.bar else { return };
        let names: Vec<&str> = st.waiting.iter().map(String::as_str).take(3).collect();
        let more = st.waiting.len().saturating_sub(names.len());
        let waiting = match (names.is_empty(), more) {
            (true, _) => String::new(),
            (false, 0) => format!(", waiting for {}", names.join(", ")),
            (false, more) => format!(", waiting for {} and {more} more", names.join(", ")),
        };
        bar.set_message(format!("{}{} {}{waiting}", self.prefix, st.up, self.verb));
    }

    /// Every server has ended: the summary line (live only; the plain lines said it all).
    pub fn finish(&self) {
        let Some(bar) = &self.bar else { return };
        let st = self.state();
        let n = st.up + st.failed.len();
        if n > 0 {
            let servers = if st.up == 1 { "server" } else { "servers" };
            let failed = match st.failed.len() {
                0 => String::new(),
                f => format!(", {f} failed: {}", st.failed.join(", ")),
            };
            bar.println(format!(
                "{}{} {servers} {} in {}{failed}",
                self.prefix,
                st.up,
                self.verb,
                human(self.started.elapsed())
            ));
        }
        bar.finish_and_clear();
    }
}

/// Held by `axp serve` while it mounts its providers; dropping it says the mounting is over.
pub struct Mounting {
    _over: DropGuard,
}

/// Shows, on a terminal, each provider of `registry` as its mount ends, up or down with the
/// reason, and a summary once none is starting any more and the returned guard is dropped.
/// It reads the registry (what `/healthz` shows: a provider is up once its tools are listed,
/// linted and published) every 50 ms, so it changes nothing about how providers mount; the
/// times are since this call, made just before the first provider is mounted. Off the
/// terminal, or with `--quiet`, it does nothing: the log already says when a server fails.
pub fn watch_mounts(registry: &Registry, quiet: bool) -> Mounting {
    let over = CancellationToken::new();
    if Mode::detect(quiet) == Mode::Live {
        let (registry, over) = (registry.clone(), over.clone());
        tokio::spawn(async move {
            let servers = Servers::new(Mode::Live, "mounted", "axp: ", None);
            let mut ended: HashSet<String> = HashSet::new();
            loop {
                // Read before the registry: a provider mounted just before the guard was
                // dropped is then in the snapshot below.
                let mounting_over = over.is_cancelled();
                for (id, _, up, reason, tools) in registry.providers() {
                    let name = id.to_string();
                    if ended.contains(&name) {
                        continue;
                    }
                    match (up, reason.as_deref()) {
                        (false, Some(STARTING)) => servers.waiting(&name),
                        (true, _) => servers.settled(&name, Ok(tools)),
                        (false, reason) => servers.settled(&name, Err(reason.unwrap_or("down"))),
                    }
                    if up || reason.as_deref() != Some(STARTING) {
                        ended.insert(name);
                    }
                }
                if mounting_over && !servers.any_waiting() {
                    servers.finish();
                    return;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        });
    }
    Mounting { _over: over.drop_guard() }
}
