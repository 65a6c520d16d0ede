//! `tirc`: the tir compiler driver.
//!
//! Every failure prints one line, `error: ...`, to stderr and exits with code 1; a refused
//! command leaves no output file behind.

use clap::{Parser, Subcommand};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use tir_graph::file::{self, FileError};
use tir_graph::text::{self, ParseError};
use tir_graph::Graph;

#[derive(Parser)]
#[command(name = "tirc", version, about = "The tir tensor compiler")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Verify a graph (.tir or text form) and print its inputs, outputs and op counts.
    Check { file: PathBuf },
    /// Print a graph (.tir or text form) in the text form.
    Dump { file: PathBuf },
    /// Optimize a graph and print its kernels (ops, inputs, outputs, bytes) and the rules that fired.
    Explain {
        file: PathBuf,
        /// Print one JSON object instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Parse a text-form graph and write it as a .tir file.
    Parse {
        text: PathBuf,
        #[arg(short, long, value_name = "FILE.tir")]
        output: PathBuf,
    },
}

/// Why a command failed; each message names the file.
#[derive(Debug, thiserror::Error)]
enum CliError {
    #[error("{path}: {source}")]
    File { path: String, source: FileError },
    #[error("{path}: {source}")]
    Parse { path: String, source: ParseError },
    #[error("{path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: not a .tir file and not UTF-8 text")]
    NotText { path: String },
    #[error("{path}: {source}")]
    Optimize {
        path: String,
        source: tir_opt::OptError,
    },
    #[error("writing to stdout: {0}")]
    Stdout(std::io::Error),
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => {
            // --help and --version are answers, not errors.
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            let message = e.to_string();
            let first = message.lines().next().unwrap_or("invalid arguments");
            let first = first.strip_prefix("error: ").unwrap_or(first);
            eprintln!("error: {first} (see tirc --help)");
            return ExitCode::FAILURE;
        }
    };
    match run(cli.command) {
        Ok(()) => ExitCode::SUCCESS,
        // A closed pipe (`tirc dump f | head`) is the reader's choice, not a failure.
        Err(CliError::Stdout(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(command: Command) -> Result<(), CliError> {
    match command {
        Command::Check { file } => {
            let graph = load(&file)?;
            print_stdout(&summary(&file, &graph))
        }
        Command::Dump { file } => print_stdout(&text::print(&load(&file)?)),
        Command::Explain { file, json } => {
            let graph = load(&file)?;
            let (fused, report) = tir_opt::optimize(&graph, &tir_opt::OptOptions::default())
                .map_err(|source| CliError::Optimize {
                    path: file.display().to_string(),
                    source,
                })?;
            let shown = if json {
                tir_opt::explain::to_json(&fused, &report) + "\n"
            } else {
                tir_opt::explain::to_text(&fused, &report)
            };
            print_stdout(&shown)
        }
        Command::Parse { text, output } => {
            let graph = parse_text(&text, &read_bytes(&text)?)?;
            file::write(&output, &graph).map_err(|source| CliError::File {
                path: output.display().to_string(),
                source,
            })
        }
    }
}

fn read_bytes(path: &Path) -> Result<Vec<u8>, CliError> {
    std::fs::read(path).map_err(|source| CliError::Read {
        path: path.display().to_string(),
        source,
    })
}

/// A graph from a `.tir` file (told by its magic bytes or its extension) or from the text form.
fn load(path: &Path) -> Result<Graph, CliError> {
    let bytes = read_bytes(path)?;
    let is_binary = file::has_magic(&bytes) || path.extension().is_some_and(|e| e == "tir");
    if is_binary {
        file::decode(&bytes).map_err(|source| CliError::File {
            path: path.display().to_string(),
            source,
        })
    } else {
        parse_text(path, &bytes)
    }
}

fn parse_text(path: &Path, bytes: &[u8]) -> Result<Graph, CliError> {
    let path = path.display().to_string();
    let Ok(source) = std::str::from_utf8(bytes) else {
        return Err(CliError::NotText { path });
    };
    text::parse(source).map_err(|source| CliError::Parse { path, source })
}

fn print_stdout(s: &str) -> Result<(), CliError> {
    let mut out = std::io::stdout().lock();
    out.write_all(s.as_bytes())
        .and_then(|()| out.flush())
        .map_err(CliError::Stdout)
}

/// What `tirc check` prints: the run-time interface and the op counts.
fn summary(path: &Path, graph: &Graph) -> String {
    let mut s = format!("{}: ok, {} nodes\n", path.display(), graph.len());
    let mut section = |title: &str, items: Vec<(String, tir_graph::NodeId)>| {
        if items.is_empty() {
            return;
        }
        s.push_str(&format!("{title}:\n"));
        for (name, id) in items {
            s.push_str(&format!("  {name:?}: {}\n", graph.ty(id)));
        }
    };
    section("inputs", graph.inputs());
    section("parameters", graph.parameters());
    section("states", graph.states());
    section("outputs", graph.outputs().to_vec());
    if !graph.state_updates().is_empty() {
        s.push_str("state updates:\n");
    }
    for update in graph.state_updates() {
        let target = graph.operands(update)[0];
        let state = graph.node(target).op.source_name().unwrap_or_default();
        let op = &graph.node(update).op;
        s.push_str(&format!("  {state:?} <- {op} ({update})\n"));
    }
    let counts: Vec<String> = graph
        .op_counts()
        .into_iter()
        .map(|(op, n)| format!("{op} {n}"))
        .collect();
    s.push_str(&format!("ops: {}\n", counts.join(", ")));
    s
}
