//! Retention on the embedded store: the shared scenario, and the files of a deleted log gone
//! from the state directory.

#[path = "retention_scenario.rs"]
mod scenario;

#[test]
fn jobs_that_ended_before_the_cutoff_go_with_their_logs_and_nothing_else_does() {
    let (_tmp, dir) = super::state();
    let store = axp_store::Store::open(&dir).unwrap();
    let big_files = || {
        let mut found = Vec::new();
        for shard in std::fs::read_dir(dir.join("jobs")).unwrap().flatten() {
            if let Ok(entries) = std::fs::read_dir(shard.path()) {
                found.extend(
                    entries
                        .flatten()
                        .filter(|e| e.file_name().to_string_lossy().starts_with(scenario::BIG))
                        .map(|e| e.path()),
                );
            }
        }
        found
    };
    // The scenario checks the records; here, that the big log really lived in files, and that
    // they are gone once it ran.
    scenario::run(&store, || assert!(!big_files().is_empty(), "the big log lives in files"));
    let left = big_files();
    assert!(left.is_empty(), "the deleted log's files are left: {left:?}");
}
