// Module map (each module, its job):
//   args     the command line
//   bench    `redlock bench`: a load generator
//   demo     `redlock demo`: local masters, contention and faults, watched by the checker
//   exit     exit codes
//   lockcmd  `lock`, `unlock`, `extend`, `status`
//   observe  --trace and --metrics
//   out      writes to stdout and stderr that never panic
//   plot     bench --plot
//   run      `redlock run`: hold a lock while a command (and all it starts) runs
//   stats    latency histograms

//! `redlock`: a distributed `flock(1)`, a lock you can take and release from a shell, a load
//! generator that reports a latency histogram, and a demonstration on five throwaway masters.
//!
//! Every failure ends in one line on stderr and an exit code from [`exit`]; nothing here
//! panics on bad input, unreachable nodes or a missing `redis-server`.

mod args;
mod bench;
mod demo;
mod exit;
mod lockcmd;
mod observe;
mod out;
#[cfg(feature = "plot")]
mod plot;
mod run;
mod stats;

use std::process::ExitCode;

use clap::Parser;

use args::{Cli, Command};
use exit::Failure;
use out::errln;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        // Help and version go to stdout with 0.
        Err(e) if !e.use_stderr() => {
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            errln!(
                "redlock: {} (see redlock --help)",
                one_line(&e.render().to_string())
            );
            return ExitCode::from(exit::USAGE);
        }
    };
    let observers = match observe::start(&cli.global) {
        Ok(o) => o,
        Err(f) => {
            errln!("redlock: {}", f.message);
            return ExitCode::from(f.code);
        }
    };
    let code = match dispatch(cli) {
        Ok(code) => code,
        Err(f) => {
            errln!("redlock: {}", f.message);
            f.code
        }
    };
    // The metrics are written whatever the subcommand returned; failing to write them only
    // changes an exit status that said all was well.
    match observers.finish() {
        Ok(()) => ExitCode::from(code),
        Err(f) => {
            errln!("redlock: {}", f.message);
            ExitCode::from(if code == 0 { f.code } else { code })
        }
    }
}

/// Runs the chosen subcommand; `Ok` carries the exit code of a run that did what it was asked
/// (for `run`, the command's own status).
fn dispatch(cli: Cli) -> Result<u8, Failure> {
    match &cli.command {
        Command::Run(a) => run::run(&cli.global, a),
        Command::Lock(a) => lockcmd::lock(&cli.global, a),
        Command::Unlock(a) => lockcmd::unlock(&cli.global, a),
        Command::Status(a) => lockcmd::status(&cli.global, a),
        Command::Bench(a) => bench::bench(&cli.global, a),
        Command::Demo(a) => demo::demo(&cli.global, a),
    }
}

/// clap's usage error, which spans several lines (the error, the missing arguments, a usage
/// line, a hint), as one line: its first paragraph, without the `error: ` prefix.
fn one_line(rendered: &str) -> String {
    let paragraph: Vec<&str> = rendered
        .lines()
        .map(str::trim)
        .take_while(|l| !l.is_empty())
        .collect();
    let joined = paragraph.join(" ");
    joined
        .strip_prefix("error: ")
        .unwrap_or(&joined)
        .to_string()
}
