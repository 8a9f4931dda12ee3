//! Dead-letter queues in logical time: the move of a message received `maxReceiveCount` times
//! to its queue's dead-letter queue, and the redrive that moves it back
//! ([`crate::spec::DeadLetter`]; AWS SQS Developer Guide, "Using dead-letter queues in Amazon
//! SQS" and "Learn how to configure a dead-letter queue redrive").
//!
//! SQS moves the message on the first receive after its receive count reached
//! `maxReceiveCount`; the harness moves it when its visibility timeout expires, the first
//! moment such a receive could happen, so no receive ever sees it again on the source queue.
//! The copy on the dead-letter queue gets a label of its own: a late DeleteMessage or an
//! `sqs:redeliver-after-delete` of the original on the source queue never touches it.

use anyhow::{Context, Result};

use super::Run;
use crate::sim::history::{Fact, FaultEvent};

impl Run<'_> {
    /// The dead-letter queue `msg` of `queue` moves to when its visibility expires now: the
    /// queue has one and `msg` was received `maxReceiveCount` times or more.
    pub(super) fn dead_letter_due(&self, queue: &'static str, msg: &str) -> Option<(&'static str, u32)> {
        let policy = self.dead_letters.iter().find(|(q, _)| *q == queue)?.1;
        let count = self.world.borrow().receive_counts.get(msg).copied().unwrap_or(0);
        (count >= policy.max_receive_count).then_some((policy.queue, count))
    }

    /// Moves in-flight `msg` of `from` (latest handle `receipt`) to dead-letter queue `to`:
    /// DeleteMessage on the source, SendMessage of the same body to `to`, where the new SQS
    /// message gets a label of its own (`dlq1`, …) and the clock keeps `msg`'s enqueue time.
    /// `Ok(false)` when SQS no longer had it. Errors: a call failing; a message whose body the
    /// harness never saw (a harness bug).
    pub(super) fn dead_letter(&mut self, msg: String, from: &'static str, receipt: &str, to: &'static str, count: u32) -> Result<bool> {
        let body = self.world.borrow().sqs.bodies.get(&msg).map(|(_, b)| b.clone());
        let body = body.with_context(|| format!("dead-letter move of {msg}: its body was never received"))?;
        let id = self.world.borrow().names.id_of(&msg).map(str::to_string).unwrap_or_default();
        if !self.admin.expire_message(from, &id, Some(receipt))? {
            return Ok(false);
        }
        self.polls.message_taken(from, &msg);
        let message_id = self.admin.send(to, &body, None)?;
        let copy = {
            let w = &mut *self.world.borrow_mut();
            let copy = w.names.label(self.admin.queues.prefix(to), &message_id);
            w.sqs.bodies.insert(copy.clone(), (to, body.clone()));
            copy
        };
        let (enqueued_ms, expires_ms) = self.clock.dead_lettered(&msg, &copy, to).unwrap_or((0, 0));
        let facts = vec![Fact::Sent { queue: to, msg: copy.clone(), identity: self.identity_of(&body) }];
        let fault = FaultEvent::DeadLettered { msg, copy, from, to, receive_count: count, enqueued_ms, expires_ms };
        self.fault(fault, facts);
        Ok(true)
    }

    /// The identity of a message body ([`crate::workload::Workload::identity`]), nil when the
    /// workload finds none.
    fn identity_of(&self, body: &str) -> uuid::Uuid {
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
    /// its dead-letter queue.
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
