//! Dead-letter queues in logical time: the move of a message received `maxReceiveCount` times
//! to its queue's dead-letter queue, and the redrive that moves it back
//! ([`crate::spec::DeadLetter`]; AWS SQS Developer Guide, "Using dead-letter queues in Amazon
//! SQS" and "Learn how to configure a dead-letter queue redrive").
//!
//! SQS moves such a message when a ReceiveMessage on its source queue would deliver it once
//! more ("when the ReceiveCount for a message exceeds the maxReceiveCount"), not when its
//! visibility expires: until that receive, its holder's receipt handle still deletes it or
//! changes its visibility. The harness does the same: a message that becomes visible again
//! with its receive count at the limit is due to move ([`DueMove`]), and the move is made just
//! before the next receive from that queue is granted. The copy on the dead-letter queue gets
//! a label of its own (`dlq1`, …): a late DeleteMessage or an `sqs:redeliver-after-delete` of
//! the original on the source queue never touches it.

use anyhow::{Context, Result};

use super::Run;
use crate::record::history::{Fact, FaultEvent};
use crate::spec::RoleKind;

/// A message visible on its source queue again after `maxReceiveCount` receives: SQS moves it
/// to the dead-letter queue at the next receive from that queue instead of delivering it.
#[derive(Debug, Clone)]
pub(super) struct DueMove {
    /// The source queue.
    queue: &'static str,
    /// Its label.
    msg: String,
    /// Its latest receipt handle (still valid: nobody received it since).
    receipt: String,
    /// The dead-letter queue.
    to: &'static str,
    /// Its receive count.
    count: u32,
}

impl Run<'_> {
    /// The dead-letter queue `msg` of `queue` moves to at the next receive: the queue has one
    /// and `msg` was received `maxReceiveCount` times or more.
    fn dead_letter_due(&self, queue: &'static str, msg: &str) -> Option<(&'static str, u32)> {
        let policy = self.dead_letters.iter().find(|(q, _)| *q == queue)?.1;
        let count = self.world.borrow().receive_counts.get(msg).copied().unwrap_or(0);
        (count >= policy.max_receive_count).then_some((policy.queue, count))
    }

    /// `msg` of `queue` is visible again (its visibility timeout expired, or its holder set
    /// it to 0), `receipt` its latest handle: due to move when its receive count is at its
    /// queue's `maxReceiveCount`.
    pub(super) fn visible_again(&mut self, queue: &'static str, msg: &str, receipt: &str) {
        self.not_due(msg);
        if let Some((to, count)) = self.dead_letter_due(queue, msg) {
            self.due_moves.push(DueMove { queue, msg: msg.to_string(), receipt: receipt.to_string(), to, count });
        }
    }

    /// `msg` is no longer visible on its source queue (received, deleted, made invisible
    /// again by its holder, expired): no move is due.
    pub(super) fn not_due(&mut self, msg: &str) {
        self.due_moves.retain(|m| m.msg != msg);
    }

    /// Just before `w`'s receive is granted: when `w` is a handler parked at its receive,
    /// every message due on its queue moves to the dead-letter queue, as SQS moves it at that
    /// receive; a copy whose retention there, counted from its first enqueue, is already over
    /// expires at once. It does not settle: nothing else happens before the receive. Errors: an
    /// SQS call failing.
    pub(super) fn before_receive(&mut self, w: &str) -> Result<()> {
        let Some(RoleKind::Handler { queue }) = self.kind(w) else { return Ok(()) };
        if !self.at_poll(w) || !self.due_moves.iter().any(|m| m.queue == queue) {
            return Ok(());
        }
        let (moves, rest) = std::mem::take(&mut self.due_moves).into_iter().partition(|m| m.queue == queue);
        self.due_moves = rest;
        for m in moves {
            self.dead_letter(m)?;
        }
        Ok(())
    }

    /// Moves `m` to its dead-letter queue: DeleteMessage on the source with its latest
    /// handle, SendMessage of the same body to the dead-letter queue, where the new SQS message
    /// gets a label of its own and the clock keeps the original's enqueue time. Nothing when
    /// SQS no longer had it. Errors: a call failing; a message whose body the harness never saw
    /// (a harness bug).
    fn dead_letter(&mut self, m: DueMove) -> Result<()> {
        let DueMove { queue: from, msg, receipt, to, count } = m;
        let body = self.world.borrow().sqs.bodies.get(&msg).map(|(_, b)| b.clone());
        let body = body.with_context(|| format!("dead-letter move of {msg}: its body was never received"))?;
        let id = self.world.borrow().names.id_of(&msg).map(str::to_string).unwrap_or_default();
        if !self.admin.expire_message(from, &id, Some(&receipt))? {
            return Ok(());
        }
        self.polls.message_taken(from, &msg);
        let message_id = self.admin.send(to, &body, None)?;
        let copy = {
            let w = &mut *self.world.borrow_mut();
            let copy = w.names.label(self.admin.queues.prefix(to), &message_id);
            w.sqs.bodies.insert(copy.clone(), (to, body.clone()));
            copy
        };
        let (enqueued_ms, expires_ms) = self
            .clock
            .dead_lettered(&msg, &copy, to)
            .with_context(|| format!("dead-letter move of {msg}: the clock does not hold it (a harness bug)"))?;
        let facts = vec![Fact::Sent { queue: to, msg: copy.clone(), identity: self.identity_of(&body) }];
        let fault = FaultEvent::DeadLettered { msg, copy: copy.clone(), from, to, receive_count: count, enqueued_ms, expires_ms };
        self.fault(fault, facts);
        if expires_ms <= self.clock.now_ms {
            // Past the DLQ's retention counted from the first enqueue: SQS deletes it at once.
            self.clock.forget(&copy);
            self.expire(copy, to, None)?;
        }
        Ok(())
    }

    /// The identity of a message body ([`crate::workload::Workload::identity`]), nil when the
    /// workload finds none.
    pub(super) fn identity_of(&self, body: &str) -> uuid::Uuid {
        serde_json::from_str(body).ok().and_then(|b| (self.identity)(&b).map(|(_, id)| id)).unwrap_or_default()
    }

    /// Whether a dead-letter queue holds a message (by the history).
    pub(super) fn dead_letters_held(&self) -> bool {
        self.dead_letters.iter().any(|(_, p)| !self.clock.stored_on(p.queue).is_empty())
    }

    /// A dead-letter queue redrive (`StartMessageMoveTask` to the source queue): every message
    /// on each dead-letter queue, oldest first, is deleted there and sent to its source queue
    /// as a new message, with a new MessageId, label and enqueue time (AWS: "the redrive task
    /// resets the retention period"). Errors: the scenario has no dead-letter queue
    /// ([`super::Inapplicable`]); a call failing; a message not found among the first 100 on
    /// its dead-letter queue (the error names the sweep that gave up).
    pub(super) fn redrive(&mut self) -> Result<()> {
        if self.dead_letters.is_empty() {
            return Err(super::inapplicable("this scenario has no dead-letter queue ([config] dead_letter)".into()));
        }
        if !self.dead_letters_held() {
            let text = "sqs:redrive: the dead-letter queues hold no message".to_string();
            self.fault(FaultEvent::Sqs { name: "sqs:redrive".into(), text }, vec![]);
            return Ok(());
        }
        let policies = self.dead_letters.clone();
        for (source, policy) in policies {
            for msg in self.clock.stored_on(policy.queue) {
                let id = self.world.borrow().names.id_of(&msg).map(str::to_string).unwrap_or_default();
                let body = self.world.borrow().sqs.bodies.get(&msg).map(|(_, b)| b.clone()).unwrap_or_default();
                self.clock.forget(&msg);
                if !self.admin.expire_message(policy.queue, &id, None)? {
                    let text = format!("sqs:redrive: {msg} was no longer on {}", policy.queue);
                    self.fault(FaultEvent::Sqs { name: "sqs:redrive".into(), text }, vec![]);
                    continue;
                }
                let message_id = self.admin.send(source, &body, None)?;
                let prefix = self.admin.queues.prefix(source);
                let copy = self.world.borrow_mut().names.label(prefix, &message_id);
                let facts = vec![Fact::Sent { queue: source, msg: copy.clone(), identity: self.identity_of(&body) }];
                self.fault(FaultEvent::Redriven { msg, from: policy.queue, to: source, copy }, facts);
            }
        }
        self.settle(None)
    }
}
