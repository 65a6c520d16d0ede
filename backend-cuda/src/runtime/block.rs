//! Runs a future to completion on the calling thread ([`block_on`]), for the blocking
//! [`tir_lower::Executable::run`] of an executable whose runs are futures.
//!
//! Takes any future. Guarantees: the thread parks while the future is pending and is woken by
//! its waker; nothing is spawned.

use std::future::Future;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

/// Wakes a parked thread.
struct Unpark(std::thread::Thread);

impl std::task::Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
}

/// Runs `future` to completion on this thread, parking while it is pending.
pub fn block_on<F: Future>(future: F) -> F::Output {
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut future = std::pin::pin!(future);
    loop {
        match future.as_mut().poll(&mut cx) {
            Poll::Ready(v) => return v,
            Poll::Pending => std::thread::park(),
        }
    }
}
