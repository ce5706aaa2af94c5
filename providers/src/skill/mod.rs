//! The `skill` provider: folders in the Agent Skills format (a `SKILL.md` whose YAML front matter
//! names and describes the skill, whose body is the procedure, next to bundled `scripts/`,
//! `references/` and `assets/`). Each skill is one tool. A call without `script` returns the
//! instructions and the list of bundled files; a call with `{script, args}` runs one bundled
//! script as a job through the gateway's [`Launcher`](crate::Launcher), with the skill folder added to the
//! process's readable paths. This module owns discovery, front-matter validation, the bundled-file
//! listing, the containment checks on script paths, and reloading when a skill changes, split by
//! concern: `format.rs` parses a `SKILL.md` from text alone (no I/O), `scan.rs` reads the
//! folders, `watch.rs` reloads them on change, `provider.rs` serves them as tools.
//!
//! It must not decide policy (the launcher and the gateway's [`ProcessPolicy`](crate::ProcessPolicy) do), must never
//! run anything that is not a regular file inside the skill folder, and must never build a shell
//! string from arguments: `args` become argv elements after the script path, nothing else.
//! Running the process is `process.rs`'s job.
//!
//! Discovery: every configured directory either *is* a skill folder (it holds `SKILL.md`) or
//! holds skill folders one level down; sub-folders without `SKILL.md` and hidden entries are
//! ignored. A malformed skill is skipped with a problem (see [`SkillProvider::problems`]) and
//! never stops the others from loading. Two skills with the same name: the first in
//! configuration order wins and the problem names both paths.
//!
//! Bundled files are listed recursively (hidden entries, `__pycache__` and `node_modules`
//! skipped; at most [`MAX_FILES`] files, [`MAX_DEPTH`] levels). A symbolic link is listed only
//! when it resolves to a file inside the skill folder; links to directories are not followed.
//! A file is a *script* when its extension names an interpreter (`.py`, `.sh`, `.bash`, `.js`,
//! `.mjs`, `.cjs`), when it starts with `#!`, or when it is executable. A call with `{read}`
//! returns one bundled non-script file as text (at most [`MAX_READ_BYTES`]), so the references a
//! procedure points to (`reference.md`) are reachable without any filesystem grant.
//!
//! Limits: the containment check runs when the call starts; a writer who can change the skill
//! folder between that check and `execve` could still swap the file. Skill folders are operator
//! territory (mounted read-only into every sandbox), and the sandbox, not this check, is what
//! confines a running script. `allowed-tools` is kept as information only: the session's
//! capability token decides what may be called.

mod format;
mod provider;
mod scan;
mod watch;

pub use format::{MAX_COMPATIBILITY_CHARS, MAX_DESCRIPTION_CHARS, MAX_NAME_CHARS, SkillError};
pub use provider::{MAX_READ_BYTES, SKILL_TAIL_BYTES, SkillDirsConfig, SkillProvider};
pub use scan::{MAX_DEPTH, MAX_FILES, MAX_SKILL_MD_BYTES, SKILL_FILE, SkillInfo, load_skill};
