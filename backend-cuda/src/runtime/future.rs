//! The future of [`CudaExecutable::run_async`]: it completes when the GPU has finished the run
//! and its outputs are in host memory. A stream callback, called on a driver thread when the
//! stream reaches it, wakes the task: no thread of ours is spawned or blocked per run.

use super::driver::{self, DriverResult, Stream};
use super::exec::{CudaExecutable, Outputs};
use super::staging::Source;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use tir_graph::HostTensor;
use tir_lower::{BackendError, HostTensors, TensorRef};

/// Whether the work before a point of a stream has finished, and the task to wake when it has.
#[derive(Default)]
struct Signal {
    state: Mutex<(Option<bool>, Option<Waker>)>,
}

impl Signal {
    /// A signal set when `stream` reaches the work enqueued so far.
    fn armed(stream: &Stream) -> DriverResult<Arc<Signal>> {
        let signal = Arc::new(Signal::default());
        let set = signal.clone();
        driver::on_done(stream, Box::new(move |ok| set.finish(ok)))?;
        Ok(signal)
    }

    fn finish(&self, ok: bool) {
        let waker = {
            let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
            state.0 = Some(ok);
            state.1.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
    }

    /// Whether the stream succeeded, once it has finished; else keeps `waker` to wake.
    fn check(&self, waker: &Waker) -> Option<bool> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if state.0.is_none() {
            state.1 = Some(waker.clone());
        }
        state.0
    }
}

/// The result of [`CudaExecutable::run_async`].
pub struct RunFuture<'a> {
    exe: &'a mut CudaExecutable,
    /// The outputs, in page-locked memory the run's copies write; read only once it is done.
    outputs: Option<Vec<(String, HostTensor<'static>)>>,
    signal: Arc<Signal>,
}

impl<'a> RunFuture<'a> {
    /// The future of the run whose work (the copies to `outputs` last) is enqueued on `stream`.
    pub(super) fn new(
        exe: &'a mut CudaExecutable,
        outputs: Vec<(String, HostTensor<'static>)>,
        stream: &Stream,
    ) -> Result<RunFuture<'a>, BackendError> {
        let signal = match Signal::armed(stream) {
            Ok(signal) => signal,
            Err(e) => {
                // The copies into `outputs` are queued: they must run before it is dropped.
                let _ = exe.wait();
                return Err(exe.device_error(e));
            }
        };
        Ok(RunFuture {
            exe,
            outputs: Some(outputs),
            signal,
        })
    }
}

impl Future for RunFuture<'_> {
    type Output = Result<HostTensors, BackendError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.signal.check(cx.waker()) {
            None => Poll::Pending,
            Some(ok) => {
                let outputs = self.outputs.take().unwrap_or_default();
                if ok {
                    return Poll::Ready(Ok(outputs.into_iter().collect()));
                }
                let why = self
                    .exe
                    .wait()
                    .err()
                    .unwrap_or_else(|| "the run failed".into());
                Poll::Ready(Err(self.exe.device_error(why)))
            }
        }
    }
}

impl Drop for RunFuture<'_> {
    /// A future dropped before the run finished waits for it, so that the page-locked memory
    /// its copies write is not lent again while they do.
    fn drop(&mut self) {
        if self.outputs.is_some() {
            let _ = self.exe.wait();
        }
    }
}

impl CudaExecutable {
    /// Runs like [`tir_lower::Executable::run`] but returns at once: the future completes when
    /// the GPU has finished, and waiting for it does not block the thread (a stream callback
    /// wakes it). Host inputs are copied before this returns.
    pub fn run_async<'a>(
        &'a mut self,
        inputs: &[(&str, TensorRef<'_>)],
    ) -> Result<RunFuture<'a>, BackendError> {
        let placed = self.prepare(inputs, Outputs::Host, Source::Staged)?;
        self.enqueue(&placed)?;
        let outputs = self.download_outputs(&placed)?;
        let gpu = self.gpu.clone();
        RunFuture::new(self, outputs, &gpu.streams()[0])
    }
}
