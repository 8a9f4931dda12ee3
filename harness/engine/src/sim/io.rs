//! Real I/O off the turmoil hosts: one long-lived runtime does the workers' socket I/O to
//! PostgreSQL, SQS and Redis, and tells the schedule's thread when a worker has something to
//! go on with, so that the scheduler steps the simulation when a reply came rather than
//! polling for it.
//!
//! A turmoil step ticks every host's runtime: an `epoll_wait`, a timer wheel and the local
//! task queue each, about half of the harness's CPU (perf). While a worker waits
//! on a real service, its reply is seen only by a step, so the scheduler had to step again
//! and again, pausing 100 to 400 µs between steps (about 9 steps per SQS call of 2.3 ms, 3 per
//! PostgreSQL call). Here the sockets belong to [`crate::services::clients::io_runtime`] instead: its thread waits on their
//! readiness and wakes the host task that waits, and every host's top-level future has its
//! waker wrapped ([`Signal::wrap`]) so that the same wake also reaches the schedule's thread
//! ([`Signal::wait`]). Tasks a host spawns itself (the simulated network's, the external
//! workers' proxies) are not wrapped: the scheduler keeps stepping at once for the simulated
//! network, and keeps its short pauses while an external worker moves.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::thread::Thread;
use std::time::Duration;


/// Runs `f` on [`crate::services::clients::io_runtime`] and waits for its output, from any runtime (a turmoil host's).
/// Dropping the returned future (a host crashed) aborts `f`, as dropping `f` itself would: a
/// crash cancels the call where it stands. Errors: none; a panic in `f` is resumed here.
pub async fn on_io<F>(f: F) -> F::Output
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    /// Aborts the task when the waiting side goes.
    struct Abort(tokio::task::AbortHandle);
    impl Drop for Abort {
        fn drop(&mut self) {
            self.0.abort();
        }
    }
    let task = crate::services::clients::io_runtime().spawn(f);
    let _abort = Abort(task.abort_handle());
    match task.await {
        Ok(out) => out,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        // Only this future aborts the task, and it is still here.
        Err(e) => unreachable!("an I/O task ended without its output: {e}"),
    }
}

/// "A worker was woken": set when a host's task (its top-level future, [`Signal::wrap`]) is
/// woken from another thread than the schedule's, cleared by the schedule's thread when it
/// waits.
#[derive(Debug)]
pub struct Signal {
    woken: AtomicBool,
    thread: Thread,
}

impl Signal {
    /// A signal for the calling thread, the one that will [`Signal::wait`].
    pub fn for_this_thread() -> Arc<Signal> {
        Arc::new(Signal { woken: AtomicBool::new(false), thread: std::thread::current() })
    }

    /// A host task was woken: the waiting thread goes on.
    fn notify(&self) {
        if !self.woken.swap(true, Ordering::AcqRel) {
            self.thread.unpark();
        }
    }

    /// Waits until a host task was woken since the last wait, or at most `max`. Returns
    /// whether one was.
    pub fn wait(&self, max: Duration) -> bool {
        let deadline = std::time::Instant::now() + max;
        loop {
            if self.woken.swap(false, Ordering::AcqRel) {
                return true;
            }
            // A wake between the swap and the park unparks it at once; an unpark left over
            // from a wake already seen, or a spurious one, parks again.
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return false;
            }
            std::thread::park_timeout(left);
        }
    }

    /// `fut` with every waker it hands down also raising this signal.
    pub fn wrap<F: Future>(self: &Arc<Self>, fut: F) -> Signalled<F> {
        Signalled { fut: Box::pin(fut), signal: self.clone(), waker: None }
    }
}

/// A future whose wakes raise a [`Signal`] ([`Signal::wrap`]).
pub struct Signalled<F> {
    fut: Pin<Box<F>>,
    signal: Arc<Signal>,
    /// The wrapped waker made at the last poll, reused while the task's waker is the same.
    waker: Option<(Waker, Waker)>,
}

/// A waker that wakes the task and raises the signal.
struct Raising {
    task: Waker,
    signal: Arc<Signal>,
}

impl Wake for Raising {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.task.wake_by_ref();
        // A wake on the schedule's own thread comes from inside a step, whose tick runs the
        // woken task before it returns: only another thread's wake is news.
        if std::thread::current().id() != self.signal.thread.id() {
            self.signal.notify();
        }
    }
}

impl<F: Future> Future for Signalled<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = &mut *self;
        let waker = match &this.waker {
            Some((task, wrapped)) if task.will_wake(cx.waker()) => wrapped.clone(),
            _ => {
                let wrapped = Waker::from(Arc::new(Raising { task: cx.waker().clone(), signal: this.signal.clone() }));
                this.waker = Some((cx.waker().clone(), wrapped.clone()));
                wrapped
            }
        };
        this.fut.as_mut().poll(&mut Context::from_waker(&waker))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    /// A wake from the I/O runtime's thread ends the wait at once; without one, the wait
    /// lasts its bound.
    #[test]
    fn a_wake_from_the_io_thread_ends_the_wait() {
        let signal = Signal::for_this_thread();
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let (tx, rx) = tokio::sync::oneshot::channel::<u32>();
        let local = tokio::task::LocalSet::new();
        let got = std::rc::Rc::new(std::cell::Cell::new(None));
        let g = got.clone();
        local.spawn_local(signal.wrap(async move { g.set(rx.await.ok()) }));
        rt.block_on(local.run_until(tokio::task::yield_now()));
        assert!(!signal.wait(Duration::from_millis(50)), "woken with nothing sent");
        crate::services::clients::io_runtime().spawn(async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            tx.send(7).unwrap();
        });
        let started = Instant::now();
        assert!(signal.wait(Duration::from_secs(10)), "the reply's wake did not reach the waiting thread");
        assert!(started.elapsed() < Duration::from_secs(5));
        rt.block_on(local.run_until(tokio::task::yield_now()));
        assert_eq!(got.get(), Some(7));
    }

    /// Dropping the waiting side aborts the call on the I/O runtime.
    #[test]
    fn dropping_the_call_aborts_it() {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        struct Dropped(std::sync::mpsc::Sender<()>);
        impl Drop for Dropped {
            fn drop(&mut self) {
                let _ = self.0.send(());
            }
        }
        let guard = Dropped(tx);
        let call = on_io(async move {
            let _guard = guard;
            std::future::pending::<()>().await
        });
        rt.block_on(async {
            let _ = tokio::time::timeout(Duration::from_millis(20), call).await;
        });
        rx.recv_timeout(Duration::from_secs(5)).expect("the call went on after its waiter was dropped");
    }
}
