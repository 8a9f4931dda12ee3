//! The nemesis decisions a run applies to the world: clock jumps and the expiries they force,
//! Redis restarts, redeliveries after a delete, the workload's own faults, dispatches, and
//! crashes or failures armed for later.

use anyhow::Result;

use super::{inapplicable, Inapplicable, Run};
use crate::sim::clock::Due;
use crate::record::history::{Fact, FaultEvent};
use crate::sim::world::Status;
use crate::spec::{CrashPoint, RoleKind};

impl Run<'_> {
    /// Delivers once more the messages that `sqs:redeliver-after-delete` picked: the same body
    /// is sent to the same queue, and the new SQS message gets the deleted one's label.
    pub(super) fn redeliver(&mut self) -> Result<()> {
        for (msg, queue, body) in std::mem::take(&mut self.redeliveries) {
            let message_id = self.admin.send(queue, &body, None)?;
            self.world.borrow_mut().names.set(&message_id, &msg);
            self.world.borrow_mut().sqs.replaced(&msg);
            // Sent whatever the body: the drain's and the generator's view of what is visible
            // must include it (nil identity when the workload reads none, as for a replay).
            let facts = vec![Fact::Sent { queue, msg: msg.clone(), identity: self.identity_of(&body) }];
            self.fault(FaultEvent::Redelivered { msg }, facts);
        }
        Ok(())
    }

    /// Redis restarts without persistence: every key this schedule wrote is lost, its locks
    /// and the rest (dedup markers, counters).
    pub(super) fn redis_restart(&mut self) -> Result<()> {
        let locks = self.clock.forget_keys();
        let keys: Vec<&String> = self.keys.iter().collect();
        let gone = self.admin.forget_keys(&keys)? as usize;
        let fault = FaultEvent::RedisRestart { locks, keys: gone.saturating_sub(locks) };
        self.fault(fault, vec![]);
        Ok(())
    }

    /// In a lenient run, a crash or failure at a point the worker cannot reach now is armed
    /// instead: it fires the next time the worker stands at (crash) or passes (fail) the
    /// point, in the drain phase too, as FoundationDB's buggify does. Strict runs fail with
    /// the original error.
    pub(super) fn arm_instead(&mut self, w: &str, cp: CrashPoint, kind: &str, e: anyhow::Error) -> Result<()> {
        if !self.lenient || e.downcast_ref::<Inapplicable>().is_none() || self.status(w) == Status::Crashed {
            return Err(e);
        }
        self.with_slot(w, |s| match kind {
            "crash" => s.armed_crashes.push(cp),
            _ => s.armed_failures.push(cp),
        });
        self.fault(FaultEvent::Armed { worker: w.to_string(), kind: kind.to_string(), at: cp, why: format!("{e}") }, vec![]);
        Ok(())
    }

    /// Crashes the first worker that stands at a crash point where a crash is armed.
    pub(super) fn fire_armed_crashes(&mut self) -> Result<()> {
        let due = self.workers.iter().find_map(|w| {
            let mut world = self.world.borrow_mut();
            let slot = world.mailbox(w);
            let i = slot.armed_crashes.iter().position(|c| slot.stands_at(c))?;
            Some((w.clone(), slot.armed_crashes.remove(i)))
        });
        let Some((w, cp)) = due else { return Ok(()) };
        self.fault(FaultEvent::ArmedFires { worker: w.clone(), at: cp }, vec![]);
        self.aim(&w, cp);
        self.crash(&w)
    }

    /// Advances the logical clock and forces every expiry that became due.
    pub(super) fn tick(&mut self, ms: u64) -> Result<()> {
        let to = self.clock.now_ms.saturating_add(ms);
        self.fault(FaultEvent::Clock { ms, drain: false }, vec![]);
        self.advance_clock(to)
    }

    pub(super) fn advance_clock(&mut self, to: u64) -> Result<()> {
        let due = self.clock.advance_to(to);
        self.world.borrow_mut().now_ms = self.clock.now_ms;
        if self.admin.sql_clock != crate::namespace::admin::SqlClock::Off {
            self.admin.set_clock(self.clock.now_ms)?;
        }
        for d in due {
            match d {
                Due::Visibility { msg, queue, receipt } => {
                    let ok = self.admin.expire_visibility(queue, &receipt)?;
                    if ok {
                        self.polls.message_visible(queue, &msg);
                        self.visible_again(queue, &msg, &receipt);
                    }
                    self.fault(FaultEvent::VisibilityExpired { msg, found: ok }, vec![]);
                }
                Due::Retention { msg, queue, receipt } => self.expire(msg, queue, receipt.as_deref())?,
                Due::Key { key, lock } => {
                    self.admin.expire_key(&key)?;
                    let fault = if lock { FaultEvent::LockExpired { key } } else { FaultEvent::KeyExpired { key } };
                    self.fault(fault, vec![]);
                }
            }
        }
        self.deliver_held();
        self.settle(None)
    }

    /// Deletes `msg` of `queue` (latest handle `receipt` when in flight) because it outlived
    /// the queue's retention, as SQS does, and records it. Errors: an SQS call failing.
    pub(super) fn expire(&mut self, msg: String, queue: &'static str, receipt: Option<&str>) -> Result<()> {
        let id = self.world.borrow().names.id_of(&msg).map(str::to_string).unwrap_or_default();
        let found = self.admin.expire_message(queue, &id, receipt)?;
        self.polls.message_taken(queue, &msg);
        self.not_due(&msg);
        let retention_ms = self.clock.retention_ms.get(queue).copied().unwrap_or_default();
        self.fault(FaultEvent::Expired { msg, queue, retention_ms, found }, vec![]);
        Ok(())
    }

    /// Applies the workload's fault `name` and sends the messages it returns to the queues
    /// their bodies belong to ([`crate::workload::Workload::identity`]; the first queue when none).
    pub(super) fn workload_fault(&mut self, name: &str) -> Result<()> {
        let i = self
            .faults
            .iter()
            .position(|f| f.name() == name)
            .ok_or_else(|| inapplicable(format!("the workload has no fault `{name}`")))?;
        let resent = self.admin.rt.block_on(self.faults[i].apply(&self.admin.pg))?;
        let name = self.faults[i].name().to_string();
        if resent.is_empty() {
            let text = self.faults[i].announce_nothing();
            self.fault(FaultEvent::Workload { name: name.clone(), text }, vec![]);
        }
        for r in resent {
            let (queue, identity) = (self.identity)(&r.body).unwrap_or_else(|| (self.admin.queues.queues[0].0, uuid::Uuid::nil()));
            let fifo = self.admin.queues.is_fifo(queue).then(|| {
                let w = &mut *self.world.borrow_mut();
                match identity.is_nil() {
                    true => w.fifo.unique("replay"),
                    false => w.fifo.prepare(queue, identity, None, w.now_ms),
                }
            });
            let message_id = self.admin.send(queue, &r.body.to_string(), fifo.as_ref().map(|f| (f.group.as_str(), f.dedup.as_str())))?;
            let who = self.world.borrow().names.uuid(&identity);
            let prefix = self.admin.queues.prefix(queue);
            let sent = self.world.borrow_mut().sent(queue, prefix, &message_id, fifo.is_some(), fifo.as_ref());
            let msg = match sent {
                Ok(msg) => msg,
                Err(first) => {
                    let text = format!(
                        "{name}: SQS accepted the replay of {who} and dropped it: FIFO deduplication ({who} was accepted as {} at {}, less than 5 min before)",
                        first.msg,
                        crate::duration::format_instant_ms(first.at_ms)
                    );
                    let fact = Fact::Suppressed { queue, msg: first.msg, identity, replay: true };
                    self.fault(FaultEvent::Workload { name: name.clone(), text }, vec![fact]);
                    continue;
                }
            };
            let fact = Fact::Sent { queue, msg: msg.clone(), identity };
            let text = self.faults[i].announce(&who, &msg, &r);
            self.fault(FaultEvent::Workload { name: name.clone(), text }, vec![fact]);
        }
        self.settle(None)
    }

    pub(super) fn dispatch(&mut self, event: &str) -> Result<()> {
        let producer = self.queue_dispatch(&[event.to_string()])?;
        self.fault(FaultEvent::Dispatch { producer: producer.clone(), event: event.to_string() }, vec![]);
        self.wake_producer(&producer);
        self.settle(None)
    }

    /// Queues `events` (labels) for the producer, in order, and returns the producer's name.
    /// Errors: an unknown event, or no producer in the scenario.
    pub(super) fn queue_dispatch(&mut self, events: &[String]) -> Result<String> {
        let producer = self
            .workers
            .iter()
            .find(|w| self.kind(w) == Some(RoleKind::Producer))
            .cloned()
            .ok_or_else(|| inapplicable("this scenario has no producer".into()))?;
        for event in events {
            let ev = self
                .events
                .iter()
                .find(|e| &e.label == event)
                .cloned()
                .ok_or_else(|| inapplicable(format!("there is no event `{event}` in this scenario")))?;
            self.world.borrow_mut().to_dispatch.push_back(ev);
        }
        Ok(producer)
    }

    /// Wakes the producer if it waits for work.
    pub(super) fn wake_producer(&mut self, producer: &str) {
        if matches!(self.status(producer), Status::Waiting { .. }) {
            let notify = self.with_slot(producer, |s| {
                s.status = Status::Starting;
                s.notify.clone()
            });
            notify.notify_one();
        }
    }
}
