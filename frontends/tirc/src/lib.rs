//! The library half of `tirc`: what its commands do beyond printing, so tests can use it too.
//!
//! - [`dot`]: `tirc explain --dot`, a lowered program as a Graphviz graph.
//! - [`npy`]: reading and writing `.npy` tensors.
//! - [`run`]: `tirc run`, compile a graph for a backend (or load a package) and run it once.
//! - [`compile`]: `tirc compile`, compile a graph for GPU architectures into an AOT package.
//! - [`quantize`]: `tirc quantize`, a weights file's weights into a quantized checkpoint layout.
//! - [`progress`]: the progress of cold compiles on stderr.
//! - [`profile`]: `tirc run --profile` and `--trace`, where a run's time goes on the GPU.
//! - [`parse_cli`]: the command line parsed, help and usage errors handled as every tir
//!   command handles them.

pub mod compile;
pub mod dot;
pub mod npy;
pub mod profile;
pub mod progress;
pub mod quantize;
pub mod run;

/// `P` parsed from the command line; `Err` is the exit code when there is nothing to run:
/// `--help` and `--version` print their text and exit 0, and a usage error prints one line
/// `error: ... (see NAME --help)` on stderr and exits 1.
pub fn parse_cli<P: clap::Parser>(name: &str) -> Result<P, std::process::ExitCode> {
    match P::try_parse() {
        Ok(cli) => Ok(cli),
        Err(e) if !e.use_stderr() => {
            let _ = e.print();
            Err(std::process::ExitCode::SUCCESS)
        }
        Err(e) => {
            let line = usage_error_line(&e.to_string());
            eprintln!("error: {line} (see {name} --help)");
            Err(std::process::ExitCode::FAILURE)
        }
    }
}

/// A clap message as one line: its first line, and when that ends in a colon (as in "the
/// following required arguments were not provided:"), the indented lines that follow it.
fn usage_error_line(message: &str) -> String {
    let mut lines = message.lines();
    let first = lines.next().unwrap_or("invalid arguments");
    let mut line = first.strip_prefix("error: ").unwrap_or(first).to_string();
    if line.ends_with(':') {
        let items: Vec<&str> = lines
            .take_while(|l| l.starts_with(' '))
            .map(str::trim)
            .collect();
        line = format!("{} {}", line, items.join(", "));
    }
    line
}
