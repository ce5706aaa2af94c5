//! Reading the log without the writer's lock: the segment listing, `HEAD`, the full-chain
//! [`verify`], and [`tail`] (optionally following new records). Nothing here writes a byte; a
//! torn last line is reported, never cut (that is `AuditLog::open`'s job).

use std::collections::VecDeque;
use std::fmt;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::record::{GENESIS_HASH, Kind, LineError, Record, open_line};
use crate::{AuditError, HEAD_FILE};

/// The segment file holding records from `first_seq` on.
pub(crate) fn segment_name(first_seq: u64) -> String {
    format!("{first_seq:020}.jsonl")
}

/// Segments sorted by first sequence number.
pub(crate) fn list_segments(dir: &Path) -> Result<Vec<(u64, PathBuf)>, AuditError> {
    let rd = match std::fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(AuditError::Io { path: dir.to_path_buf(), source });
        }
    };
    let mut out = Vec::new();
    for entry in rd {
        let entry = entry.map_err(|source| AuditError::Io { path: dir.to_path_buf(), source })?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if let Some(stem) = name.strip_suffix(".jsonl")
            && stem.len() == 20
            && let Ok(seq) = stem.parse::<u64>()
        {
            out.push((seq, entry.path()));
        }
    }
    out.sort();
    Ok(out)
}

/// The anchor: the last record known durable when the writer last synced.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Head {
    /// Sequence number of the anchored record.
    pub seq: u64,
    /// Its hash.
    pub hash: String,
}

pub(crate) fn read_head(dir: &Path) -> Result<Option<Head>, AuditError> {
    let path = dir.join(HEAD_FILE);
    match std::fs::read_to_string(&path) {
        // An empty HEAD (created by a writer that has not appended yet) anchors nothing, exactly
        // like a missing one.
        Ok(text) if text.trim().is_empty() => Ok(None),
        Ok(text) => {
            serde_json::from_str(&text).map(Some).map_err(|e| AuditError::BadHead { path, reason: e.to_string() })
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(AuditError::Io { path, source }),
    }
}

/// What a successful [`verify`] found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct VerifyReport {
    /// Number of records in the chain.
    pub records: u64,
    /// Hash of the last record (the genesis hash for an empty log). Keep it somewhere the host
    /// cannot write, and compare later: that is what detects a rewrite of the whole directory.
    pub last_hash: String,
    /// `HEAD`, if there is one.
    pub head: Option<Head>,
    /// Records after `HEAD` (appended when the writer stopped before re-anchoring; normal only
    /// after a crash).
    pub unanchored: u64,
    /// Bytes of a torn, never-acknowledged last line after `HEAD` (cut at the next open).
    pub torn_tail_bytes: u64,
    /// Number of segment files.
    pub segments: usize,
}

impl fmt::Display for VerifyReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "audit log OK: {} record(s) in {} segment(s); last hash {}",
            self.records, self.segments, self.last_hash
        )?;
        if let Some(h) = &self.head {
            write!(f, "; HEAD anchors record {}", h.seq)?;
        }
        if self.unanchored > 0 {
            write!(f, "\nnote: {} record(s) after HEAD (the writer stopped before re-anchoring)", self.unanchored)?;
        }
        if self.torn_tail_bytes > 0 {
            write!(
                f,
                "\nnote: a torn, unacknowledged last line of {} bytes will be cut at the next open",
                self.torn_tail_bytes
            )?;
        }
        Ok(())
    }
}

/// What is wrong with the first bad record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Problem {
    /// The line is not a record at all (garbage, a cut line, extra or missing fields).
    Unparsable(String),
    /// The record's hash does not match its contents: it was edited.
    HashMismatch,
    /// Its `prev_hash` is not the previous record's hash: the previous record was edited (and
    /// its hash recomputed), or records were removed or inserted before it.
    PrevHashMismatch,
    /// It carries another sequence number than its position requires: records were removed,
    /// duplicated or reordered.
    OutOfOrder {
        /// The sequence number it carries.
        found: u64,
    },
    /// The segment ends in the middle of a line that `HEAD` says was acknowledged.
    TornLine,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Problem::Unparsable(why) => write!(f, "it is not a valid record ({why}): garbage or a damaged line"),
            Problem::HashMismatch => f.write_str("its hash does not match its contents: the record was edited"),
            Problem::PrevHashMismatch => f.write_str("its prev_hash does not match the previous record's hash: the previous record was edited, or records were removed or inserted"),
            Problem::OutOfOrder { found } => write!(f, "it carries seq {found}: records were removed, duplicated or reordered"),
            Problem::TornLine => f.write_str("the file ends in the middle of this record: the log was truncated"),
        }
    }
}

/// Why the chain does not verify. Each variant names the first place it breaks.
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    /// A file could not be read.
    #[error(transparent)]
    Audit(#[from] AuditError),
    /// The record at position `seq` is bad.
    #[error("record {seq} ({}, line {line}): {problem}", file.display())]
    BadRecord {
        /// The sequence number expected at this position.
        seq: u64,
        /// The segment file.
        file: PathBuf,
        /// 1-based line number in that file.
        line: u64,
        /// What is wrong.
        problem: Problem,
    },
    /// A segment's name does not continue the chain (a segment was removed or renamed).
    #[error("segment {} should start at record {expected}: a segment was removed or renamed", file.display())]
    SegmentGap {
        /// The segment file.
        file: PathBuf,
        /// The record it should start with.
        expected: u64,
    },
    /// `HEAD` names a record that is not there: records were removed from the end.
    #[error("HEAD anchors record {head_seq} but the log ends {}: records were removed from the end", match last_seq { Some(s) => format!("at record {s}"), None => "before record 0".to_string() })]
    Truncated {
        /// The record `HEAD` anchors.
        head_seq: u64,
        /// The last record present.
        last_seq: Option<u64>,
    },
    /// The record `HEAD` anchors has another hash: it was edited and its hash recomputed.
    #[error("record {seq} does not have the hash HEAD anchors: it was edited (and its hash recomputed)")]
    HeadMismatch {
        /// The anchored record.
        seq: u64,
    },
    /// Records exist but `HEAD` does not: nothing proves the end was not cut.
    #[error(
        "HEAD is missing while the log holds {records} record(s): nothing proves records were not removed from the end"
    )]
    MissingHead {
        /// Records present.
        records: u64,
    },
}

/// Checks the whole chain in `dir`: dense sequence numbers from 0, every record's own hash, every
/// `prev_hash` link across segments, and the `HEAD` anchor. Reads only; safe while a writer
/// appends (records after the `HEAD` read first count as unanchored).
pub fn verify(dir: &Path) -> Result<VerifyReport, VerifyError> {
    let head = read_head(dir)?;
    let segments = list_segments(dir)?;
    let mut expected: u64 = 0;
    let mut prev = GENESIS_HASH.to_string();
    let mut head_hash_seen: Option<String> = None;
    let mut torn_tail_bytes = 0;
    for (i, (first, path)) in segments.iter().enumerate() {
        if *first != expected {
            return Err(VerifyError::SegmentGap { file: path.clone(), expected });
        }
        let bytes = std::fs::read(path).map_err(|source| AuditError::Io { path: path.clone(), source })?;
        let mut rest: &[u8] = &bytes;
        let mut line_no = 0u64;
        while !rest.is_empty() {
            line_no += 1;
            let bad = |problem| VerifyError::BadRecord { seq: expected, file: path.clone(), line: line_no, problem };
            let Some(end) = rest.iter().position(|&b| b == b'\n') else {
                // A line without its newline: a torn append. Acceptable only at the very end,
                // after everything HEAD anchors.
                let is_last = i + 1 == segments.len();
                let anchored = head.as_ref().is_some_and(|h| h.seq >= expected);
                if is_last && !anchored {
                    torn_tail_bytes = rest.len() as u64;
                    break;
                }
                return Err(bad(Problem::TornLine));
            };
            let line = &rest[..end];
            rest = &rest[end + 1..];
            let record = open_line(line).map_err(|e| {
                bad(match e {
                    LineError::Unparsable(why) => Problem::Unparsable(why),
                    LineError::HashMismatch => Problem::HashMismatch,
                })
            })?;
            if record.seq != expected {
                return Err(bad(Problem::OutOfOrder { found: record.seq }));
            }
            if record.prev_hash != prev {
                return Err(bad(Problem::PrevHashMismatch));
            }
            if head.as_ref().is_some_and(|h| h.seq == record.seq) {
                head_hash_seen = Some(record.hash.clone());
            }
            prev = record.hash;
            expected += 1;
        }
    }
    let records = expected;
    let last_seq = records.checked_sub(1);
    let unanchored = match &head {
        None if records > 0 => return Err(VerifyError::MissingHead { records }),
        None => 0,
        Some(h) => match head_hash_seen {
            None => {
                return Err(VerifyError::Truncated { head_seq: h.seq, last_seq });
            }
            Some(found) if found != h.hash => {
                return Err(VerifyError::HeadMismatch { seq: h.seq });
            }
            Some(_) => records - 1 - h.seq,
        },
    };
    Ok(VerifyReport { records, last_hash: prev, head, unanchored, torn_tail_bytes, segments: segments.len() })
}

/// Which records [`tail`] yields.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    /// Only records of this session.
    pub session: Option<String>,
    /// Only these kinds (empty: all).
    pub kinds: Vec<Kind>,
}

impl Filter {
    /// Whether `r` passes.
    pub fn matches(&self, r: &Record) -> bool {
        self.session.as_deref().is_none_or(|s| r.session.as_deref() == Some(s))
            && (self.kinds.is_empty() || self.kinds.contains(&r.kind))
    }
}

/// An iterator over records from a sequence number on, in order (see [`tail`] and [`follow`]).
/// Each record's own hash is checked; the chain is not (that is [`verify`]'s job).
pub struct Tail {
    dir: PathBuf,
    from_seq: u64,
    filter: Filter,
    /// `Some(poll interval)` to wait for new records instead of ending.
    follow: Option<Duration>,
    /// The segment being read: its first seq, and a reader positioned after the last whole line.
    current: Option<(u64, BufReader<File>, PathBuf)>,
    pending: VecDeque<Record>,
    failed: bool,
}

impl fmt::Debug for Tail {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tail").field("dir", &self.dir).field("from_seq", &self.from_seq).finish_non_exhaustive()
    }
}

/// Records in `dir` with `seq >= from_seq` that pass `filter`, ending at the last whole line.
pub fn tail(dir: &Path, from_seq: u64, filter: Filter) -> Tail {
    Tail::new(dir, from_seq, filter, None)
}

/// Like [`tail`], but at the end waits for new records (polling every `poll`) and never ends
/// unless reading fails. For `axp audit tail --follow`.
pub fn follow(dir: &Path, from_seq: u64, filter: Filter, poll: Duration) -> Tail {
    Tail::new(dir, from_seq, filter, Some(poll))
}

impl Tail {
    fn new(dir: &Path, from_seq: u64, filter: Filter, follow: Option<Duration>) -> Self {
        Self {
            dir: dir.to_path_buf(),
            from_seq,
            filter,
            follow,
            current: None,
            pending: VecDeque::new(),
            failed: false,
        }
    }

    /// Opens the segment that holds `from_seq` (or the first one after the current).
    fn open_next_segment(&mut self) -> Result<bool, AuditError> {
        let segments = list_segments(&self.dir)?;
        let choice = match &self.current {
            None => segments.iter().rev().find(|(first, _)| *first <= self.from_seq).or(segments.first()),
            Some((cur, _, _)) => segments.iter().find(|(first, _)| first > cur),
        };
        let Some((first, path)) = choice.cloned() else {
            return Ok(false);
        };
        let f = File::open(&path).map_err(|source| AuditError::Io { path: path.clone(), source })?;
        self.current = Some((first, BufReader::new(f), path));
        Ok(true)
    }

    /// Reads the whole lines now available in the current segment into `pending`. Returns
    /// whether anything was read.
    fn fill(&mut self) -> Result<bool, AuditError> {
        let Some((_, reader, path)) = self.current.as_mut() else {
            return Ok(false);
        };
        let mut read_any = false;
        let mut line = Vec::new();
        loop {
            line.clear();
            let start = reader.stream_position().map_err(|source| AuditError::Io { path: path.clone(), source })?;
            let n =
                reader.read_until(b'\n', &mut line).map_err(|source| AuditError::Io { path: path.clone(), source })?;
            if n == 0 {
                break;
            }
            if line.last() != Some(&b'\n') {
                // A line still being written: read it again next time.
                reader.seek(SeekFrom::Start(start)).map_err(|source| AuditError::Io { path: path.clone(), source })?;
                break;
            }
            read_any = true;
            let record = open_line(&line[..line.len() - 1]).map_err(|e| AuditError::Corrupt {
                path: path.clone(),
                line: 0,
                reason: match e {
                    LineError::Unparsable(why) => why,
                    LineError::HashMismatch => {
                        "a record's hash does not match its contents (run `axp audit verify`)".to_string()
                    }
                },
            })?;
            if record.seq >= self.from_seq && self.filter.matches(&record) {
                self.pending.push_back(record);
            }
        }
        Ok(read_any)
    }

    fn step(&mut self) -> Result<Option<Record>, AuditError> {
        loop {
            if let Some(r) = self.pending.pop_front() {
                return Ok(Some(r));
            }
            if self.current.is_none() && !self.open_next_segment()? {
                match self.follow {
                    Some(poll) => {
                        std::thread::sleep(poll);
                        continue;
                    }
                    None => return Ok(None),
                }
            }
            if self.fill()? {
                continue;
            }
            // Nothing new here: move to a newer segment if there is one (the writer finished
            // this one), else end or wait.
            let prev_first = self.current.as_ref().map(|c| c.0);
            let segments = list_segments(&self.dir)?;
            if segments.iter().any(|(first, _)| Some(*first) > prev_first) {
                // Drain what was appended to the old segment between the read and the listing.
                if self.fill()? {
                    continue;
                }
                self.open_next_segment()?;
                continue;
            }
            match self.follow {
                Some(poll) => std::thread::sleep(poll),
                None => return Ok(None),
            }
        }
    }
}

impl Iterator for Tail {
    type Item = Result<Record, AuditError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        match self.step() {
            Ok(r) => r.map(Ok),
            Err(e) => {
                self.failed = true;
                Some(Err(e))
            }
        }
    }
}
