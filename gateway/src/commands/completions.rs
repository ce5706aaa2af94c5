//! `axp completions SHELL` and `axp man [SUBCOMMAND]`: a shell completion script and a roff man
//! page, both generated from the clap tree of `cli.rs` (handed in by the caller, so that
//! `commands` does not import `cli`, which imports `commands`), so they always match the binary
//! that prints them. Both write to stdout.

use std::io::Write;

use anyhow::{Result, bail};
use clap::Args;

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

#[derive(Debug, Args)]
pub struct ManArgs {
    /// A subcommand whose own page to print (`axp man serve` is axp-serve(1)) [default: axp(1)].
    pub subcommand: Option<String>,
}

/// Prints the completion script for `cmd`, the whole command tree.
pub fn completions(mut cmd: clap::Command, a: CompletionsArgs) -> Result<i32> {
    let mut out = std::io::stdout().lock();
    clap_complete::generate(a.shell, &mut cmd, "axp", &mut out);
    out.flush()?;
    Ok(0)
}

/// Prints the man page of `cmd`, the whole command tree, or of one of its subcommands.
pub fn man(mut cmd: clap::Command, a: ManArgs) -> Result<i32> {
    let page = match &a.subcommand {
        None => cmd,
        Some(name) => {
            // Building the tree gives each subcommand its global flags, its display name
            // (`axp-serve`, the page's title) and its usage name (`axp serve`).
            cmd.build();
            let Some(sub) = cmd.find_subcommand(name) else {
                let names: Vec<&str> = cmd.get_subcommands().map(|s| s.get_name()).collect();
                bail!("no subcommand `{name}`; one of: {}", names.join(", "));
            };
            sub.clone()
        }
    };
    let mut text = Vec::new();
    clap_mangen::Man::new(page).render(&mut text)?;
    let mut out = std::io::stdout().lock();
    out.write_all(&text)?;
    out.flush()?;
    Ok(0)
}
