//! The progress of cold compiles on stderr, as the CUDA backend reports it
//! ([`backend_cuda::CompileProgress`]): a bar when stderr is a terminal, one plain line per
//! assembled kernel when it is not (`compiled 3/12 kernels (k3_matmul for sm_90)`), and nothing
//! when every kernel came from the kernel cache (the backend then reports nothing).
//!
//! Failed kernels print nothing: the command's one `error:` line says what failed.

use backend_cuda::CompileProgress;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How progress is shown.
enum Display {
    /// An `indicatif` bar, made when assembling starts.
    Bar(Mutex<Option<ProgressBar>>),
    /// One line per assembled kernel.
    Lines,
}

/// Compile progress drawn on stderr (see the module doc).
pub struct StderrProgress {
    display: Display,
    started: Mutex<Option<Instant>>,
    /// Whether a kernel failed (the bar then ends without a summary).
    failed: AtomicBool,
}

impl StderrProgress {
    /// A bar when stderr is a terminal, plain lines otherwise.
    pub fn new() -> StderrProgress {
        let display = if std::io::stderr().is_terminal() {
            Display::Bar(Mutex::new(None))
        } else {
            Display::Lines
        };
        StderrProgress {
            display,
            started: Mutex::new(None),
            failed: AtomicBool::new(false),
        }
    }

    fn elapsed(&self) -> Duration {
        self.started
            .lock()
            .ok()
            .and_then(|s| *s)
            .map_or(Duration::ZERO, |s| s.elapsed())
    }
}

impl Default for StderrProgress {
    fn default() -> StderrProgress {
        StderrProgress::new()
    }
}

/// The line for `done` of `total` kernels, the last being `kernel` for `arch`.
pub fn line(done: usize, total: usize, kernel: &str, arch: &str) -> String {
    format!("compiled {done}/{total} kernels ({kernel} for {arch})")
}

/// One line on stderr; a closed stderr is no reason to stop compiling.
fn print(text: &str) {
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "{text}");
}

impl CompileProgress for StderrProgress {
    fn assembling(&self, total: usize) {
        if let Ok(mut started) = self.started.lock() {
            *started = Some(Instant::now());
        }
        if let Display::Bar(slot) = &self.display {
            let style = ProgressStyle::with_template(
                "compiling kernels [{bar:30}] {pos}/{len} {elapsed} {wide_msg}",
            )
            .map(|s| s.progress_chars("=> "))
            .unwrap_or_else(|_| ProgressStyle::default_bar());
            let bar =
                ProgressBar::with_draw_target(Some(total as u64), ProgressDrawTarget::stderr())
                    .with_style(style);
            bar.enable_steady_tick(Duration::from_millis(200));
            if let Ok(mut slot) = slot.lock() {
                *slot = Some(bar);
            }
        }
    }

    fn assembled(&self, kernel: &str, arch: &str, ok: bool, done: usize, total: usize) {
        if !ok {
            self.failed.store(true, Ordering::Relaxed);
        }
        match &self.display {
            Display::Bar(slot) => {
                if let Some(bar) = slot.lock().ok().as_ref().and_then(|s| s.as_ref()) {
                    bar.set_position(done as u64);
                    bar.set_message(format!("{kernel} for {arch}"));
                }
            }
            Display::Lines if ok => print(&line(done, total, kernel, arch)),
            Display::Lines => {}
        }
    }

    fn finished(&self) {
        if let Display::Bar(slot) = &self.display {
            let bar = slot.lock().ok().and_then(|mut s| s.take());
            if let Some(bar) = bar {
                let total = bar.length().unwrap_or(0);
                bar.finish_and_clear();
                if !self.failed.load(Ordering::Relaxed) {
                    print(&format!(
                        "compiled {total} kernels in {:.1} s",
                        self.elapsed().as_secs_f64()
                    ));
                }
            }
        }
    }
}
