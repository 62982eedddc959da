//! `sluice completions` and `sluice man`: shell completion scripts and man pages, generated
//! from the same clap definition that parses the command line, so they never fall behind it.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use clap::Args;
use clap_complete::Shell;

#[derive(Args, Debug)]
pub struct CompletionsArgs {
    /// The shell to write the completion script for (printed on standard output).
    #[arg(value_enum)]
    shell: Shell,
}

#[derive(Args, Debug)]
pub struct ManArgs {
    /// Folder to write every page into (sluice.1 and one per subcommand, e.g.
    /// sluice-proxy.1), created if missing. Without it, sluice.1 goes to standard output.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
}

/// Prints the completion script of `command` for the shell asked.
pub fn completions(args: &CompletionsArgs, mut command: clap::Command) -> Result<(), String> {
    let name = command.get_name().to_owned();
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut command, name, &mut script);
    write_stdout(&script)
}

/// Writes the man pages of `command` and of each of its subcommands, or prints the top one.
pub fn man(args: &ManArgs, mut command: clap::Command) -> Result<(), String> {
    // Built, each subcommand knows its full name ("sluice-proxy"), which titles its page.
    command = command.disable_help_subcommand(true);
    command.build();
    let Some(dir) = &args.out else {
        let mut page = Vec::new();
        clap_mangen::Man::new(command)
            .render(&mut page)
            .map_err(|e| format!("cannot render the man page: {e}"))?;
        return write_stdout(&page);
    };
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let mut written = Vec::new();
    write_pages(&command, dir, &mut written)?;
    let mut list = Vec::new();
    for path in &written {
        // Writing to a Vec cannot fail.
        let _ = writeln!(list, "{}", path.display());
    }
    write_stdout(&list)
}

fn write_pages(
    command: &clap::Command,
    dir: &Path,
    written: &mut Vec<PathBuf>,
) -> Result<(), String> {
    let page = clap_mangen::Man::new(command.clone());
    let path = dir.join(page.get_filename());
    page.generate_to(dir)
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    written.push(path);
    for sub in command.get_subcommands().filter(|s| !s.is_hide_set()) {
        write_pages(sub, dir, written)?;
    }
    Ok(())
}

/// A reader that stops early (`| head`) is not an error; anything else is.
fn write_stdout(bytes: &[u8]) -> Result<(), String> {
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(format!("cannot write to standard output: {e}"))
        }
        _ => Ok(()),
    }
}
