//! Clean-up of job log files reserved by an older version (decision 0005, superseded by 0006):
//! that version kept a pool of job ids whose empty `jobs/XX/ID.jsonl` a background thread had
//! created ahead, listed in `jobs/reserved`. Small logs now live in their job's row and no file
//! is created ahead, so all that is left is deleting, at open, the files such a pool left behind
//! (still empty, belonging to no job). This file never writes an event.

use std::path::Path;

use crate::log::data_path;
use crate::{Result, StoreError};

/// The file listing the ids the pool created and has not handed out.
const LIST: &str = "reserved";

/// Deletes the files of ids a previous run reserved and never used (`used` says whether a job
/// with that id exists), then forgets the list.
pub(crate) fn clean_up(jobs_dir: &Path, used: impl Fn(&str) -> Result<bool>) -> Result<()> {
    let list = jobs_dir.join(LIST);
    let text = match std::fs::read_to_string(&list) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(StoreError::io(&list, e)),
    };
    for id in text.lines().filter(|l| crate::log::validate_id(l).is_ok()) {
        let Ok(path) = data_path(jobs_dir, id) else { continue };
        let empty = std::fs::metadata(&path).is_ok_and(|m| m.len() == 0);
        if empty && !used(id)? {
            std::fs::remove_file(&path).map_err(|e| StoreError::io(&path, e))?;
        }
    }
    std::fs::remove_file(&list).map_err(|e| StoreError::io(&list, e))
}
