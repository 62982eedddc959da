//! Marks the live tests whose external program is missing as ignored (see the file), and
//! records the commit the binary is built from for the `meta.json` of its output folders.
#[path = "../../tests/external_tools.rs"]
mod external_tools;

use std::process::Command;

fn main() {
    external_tools::emit_build_cfgs();
    emit_git_commit();
}

/// `SLUICE_GIT_COMMIT`: `git rev-parse --short HEAD`, left unset outside a git checkout or
/// without git (the binary then records no commit).
fn emit_git_commit() {
    let git = |args: &[&str]| {
        Command::new("git")
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
            .filter(|s| !s.is_empty())
    };
    let Some(commit) = git(&["rev-parse", "--short", "HEAD"]) else {
        return;
    };
    println!("cargo::rustc-env=SLUICE_GIT_COMMIT={commit}");
    // Built again when HEAD moves: a new commit on the branch, or another branch.
    for path in [
        git(&["rev-parse", "--git-path", "HEAD"]),
        git(&["symbolic-ref", "-q", "HEAD"]).and_then(|r| git(&["rev-parse", "--git-path", &r])),
        git(&["rev-parse", "--git-path", "packed-refs"]),
    ]
    .into_iter()
    .flatten()
    .filter(|p| std::path::Path::new(p).exists())
    {
        println!("cargo::rerun-if-changed={path}");
    }
}
