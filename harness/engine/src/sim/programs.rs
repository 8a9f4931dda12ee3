//! The main loop each worker host runs around its program: the producer's dispatch loop, the
//! Messenger worker loop of a handler, and the cycle loop of a poller.

use crate::sim::cx::Cx;
use crate::record::history::Fact;
use crate::sim::cx::{handle_one, handler_failed, Program};

/// Runs `program` until the host is crashed or the simulation ends. `queue` is the queue a
/// handler receives from. Service errors are noted in the trace, the open transaction is
/// rolled back, and the loop goes on, as a Messenger worker does.
pub async fn run(program: Program, queue: Option<&'static str>, mut cx: Cx) {
    match program {
        Program::Producer(producer) => loop {
            cx.cycle_start();
            let next = cx.world().borrow().to_dispatch.front().cloned();
            match next {
                Some(ev) => {
                    cx.idle(false);
                    cx.record_with_next_call(Fact::Dispatched { event: ev.label.clone(), identity: ev.identity });
                    // A failed dispatch stays at the front: the caller retries it.
                    match producer.dispatch(&mut cx, &ev).await {
                        Ok(()) => {
                            cx.world().borrow_mut().to_dispatch.pop_front();
                        }
                        Err(e) => cx.note(format!("dispatch failed, will retry: {e}")),
                    }
                }
                None => cx.wait_for_work().await,
            }
        },
        Program::Handler(handler) => {
            let queue = queue.expect("a handler role names its queue");
            let max = handler.max_messages(&cx);
            if !(1..=10).contains(&max) {
                let why = format!("{}: Handler::max_messages is {max}; SQS ReceiveMessage takes 1 to 10 messages", cx.name());
                cx.world().borrow_mut().mailbox(cx.name()).fatal = Some(why);
                loop {
                    cx.wait_for_work().await;
                }
            }
            loop {
                cx.cycle_start();
                match cx.receive_many(queue, max).await {
                    Ok(ds) if ds.is_empty() => {}
                    Ok(mut ds) if max == 1 => handle_one(&*handler, &mut cx, ds.remove(0)).await,
                    Ok(ds) => {
                        if let Err(e) = handler.on_batch(&mut cx, ds).await {
                            handler_failed(&mut cx, e).await;
                        }
                    }
                    Err(e) => cx.note(format!("receive failed: {e}")),
                }
            }
        }
        Program::Poller(poller) => loop {
            cx.cycle_start();
            if let Err(e) = poller.run_once(&mut cx).await {
                cx.note(format!("{} cycle failed: {e}", cx.name()));
                let _ = cx.rollback().await;
            }
        },
    }
}
