//! The drain phase: after the last decision, crashed workers restart and everyone runs until
//! the world is quiescent (Jepsen's final "heal and recover" generator).
//!
//! A worker whose last poll found nothing (an empty receive, a relay select with no rows) is
//! polled again only when something it could see has changed since: a message was sent to or
//! became visible on its queue, or (for a poller) a transaction that could have written or
//! unlocked the rows it polls ended. The bookkeeping comes from the history, so the drain is as deterministic as the
//! schedule. Quiescence is confirmed by asking SQS and PostgreSQL (the workload's
//! [`crate::spec::Leftover`] counts), not assumed.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::Result;

use super::Run;
use crate::record::history::{Fact, FaultEvent};
use crate::sim::world::Status;
use crate::spec::{role_of, RoleKind};

/// Rounds of the drain phase before the schedule is declared not quiescent.
pub const DRAIN_ROUNDS_MAX: usize = 200;
/// Drain rounds that find the same work pending as the round before, with no worker doing
/// anything in between and no time to wait for, before the world is declared not quiescent
/// (so the same work is seen pending in this many rounds plus one): the schedule is
/// deterministic, so more rounds would repeat the same idle polls.
pub const STALLED_ROUNDS_MAX: u32 = 3;
/// Times the drain dispatches never-sent events again (each after the locks held expired).
pub const UPSTREAM_RETRIES_MAX: usize = 3;
/// Times the drain's operator redrives the dead-letter queues when the rest is quiet.
pub const REDRIVES_MAX: usize = 3;

/// Change counters, the counter each idle worker last polled at, and the messages the
/// history says are visible on each queue.
#[derive(Debug, Default)]
pub(super) struct Polls {
    queues: BTreeMap<&'static str, u64>,
    db: u64,
    seen: BTreeMap<String, u64>,
    /// Messages sent or made visible again and not received or deleted since, by queue: the
    /// drain receives from a queue only while it holds one, rather than polling empty queues.
    visible: BTreeMap<&'static str, BTreeSet<String>>,
    /// Queues on which SQS counted visible messages that the history does not explain: their
    /// consumers poll until one finds nothing.
    unexplained: BTreeSet<&'static str>,
}

impl Polls {
    /// Message `msg` was sent to, or became visible again on, `q`.
    pub(super) fn message_visible(&mut self, q: &'static str, msg: &str) {
        *self.queues.entry(q).or_default() += 1;
        self.visible.entry(q).or_default().insert(msg.to_string());
    }

    /// Message `msg` of `q` was received (it is in flight) or deleted.
    pub(super) fn message_taken(&mut self, q: &'static str, msg: &str) {
        if let Some(v) = self.visible.get_mut(q) {
            v.remove(msg);
        }
    }

    /// Whether a receive on `q` may find a message.
    fn may_receive(&self, q: &'static str) -> bool {
        self.visible.get(q).is_some_and(|v| !v.is_empty()) || self.unexplained.contains(q)
    }

    /// A transaction that may have written or unlocked rows a poller reads ended.
    pub(super) fn db_changed(&mut self) {
        self.db += 1;
    }

    /// The change counter a worker of `kind` polls at: its queue's, or the database's for a
    /// poller (`None` for other roles).
    pub(super) fn counter(&self, kind: RoleKind) -> Option<u64> {
        match kind {
            RoleKind::Handler { queue } => Some(self.queues.get(queue).copied().unwrap_or(0)),
            RoleKind::Poller => Some(self.db),
            _ => None,
        }
    }
}

impl Run<'_> {
    /// One-shot faults armed and not yet fired: failures and crashes at crash points, and the
    /// PostgreSQL, Redis and SQS nemeses' faults.
    fn faults_armed(&self) -> usize {
        let w = self.world.borrow();
        let at_points: usize = w.mailboxes.values().map(|s| s.armed_failures.len() + s.armed_crashes.len()).sum();
        at_points + w.sqs.armed() as usize + w.pg.armed_total() as usize + w.redis.armed_total() as usize
    }

    /// Labels of the events dispatched (a [`Fact::Dispatched`]) and never sent (no
    /// [`Fact::Sent`] with their identity), not queued for the producer now, in dispatch order.
    fn unsent_dispatches(&self) -> Vec<String> {
        let sent: std::collections::BTreeSet<uuid::Uuid> = self
            .history
            .facts()
            .filter_map(|f| match f {
                Fact::Sent { identity, .. } => Some(*identity),
                _ => None,
            })
            .collect();
        let queued: Vec<String> = self.world.borrow().to_dispatch.iter().map(|e| e.label.clone()).collect();
        let mut out: Vec<String> = Vec::new();
        for f in self.history.facts() {
            if let Fact::Dispatched { event, identity } = f {
                if !sent.contains(identity) && !queued.contains(event) && !out.contains(event) {
                    out.push(event.clone());
                }
            }
        }
        out
    }

    /// Webhook events still pending for a role that has a worker in this schedule (a role
    /// without one is an endpoint not deployed: its events wait, and are no work of the drain).
    fn undelivered(&self) -> Vec<String> {
        let w = self.world.borrow();
        let served = |role: &str| self.workers.iter().any(|x| role_of(&self.roles, x).is_some_and(|r| r.prefix == role));
        w.net.events.iter().filter(|p| served(p.role)).map(|p| format!("webhook event {} ({}, for role {})", p.event.id, p.event.provider, p.role)).collect()
    }

    /// True when `w` is parked at its poll and the poll would find nothing: a handler whose
    /// queue holds no visible message, or a poller whose last poll found nothing and no
    /// transaction ended since.
    fn poll_is_stale(&self, w: &str) -> bool {
        let Some(kind) = self.kind(w) else { return false };
        let polled_empty_since = self.with_slot(w, |s| s.idle)
            && self.polls.counter(kind).is_some_and(|c| self.polls.seen.get(w) == Some(&c));
        // Either is enough: a wrong "visible" in the model cannot make it poll forever.
        self.at_poll(w) && (self.receive_finds_nothing(w).is_some() || polled_empty_since)
    }

    /// Whether `w` is parked at the first call of a new cycle (a handler's receive, a
    /// poller's poll).
    pub(super) fn at_poll(&self, w: &str) -> bool {
        matches!(self.status(w), Status::Parked { .. }) && self.with_slot(w, |s| s.at_cycle_start)
    }

    /// Why `w`'s poll would find nothing, when it is parked at it and would: a handler whose
    /// queue holds no visible message according to the history (none sent, made visible again
    /// or redriven since the last was received or deleted) and none SQS counted that the
    /// history does not explain; an endpoint ([`RoleKind::Endpoint`]) for whose role no webhook
    /// event is pending. Generated schedules skip such a poll (`Run::skip_empty_receive`), the
    /// drain does not make it; neither changes what SQS or a provider holds.
    pub(super) fn receive_finds_nothing(&self, w: &str) -> Option<String> {
        match self.kind(w)? {
            RoleKind::Handler { queue } if self.at_poll(w) && !self.polls.may_receive(queue) => {
                Some(format!("{queue} holds no visible message"))
            }
            RoleKind::Endpoint if self.at_poll(w) => {
                let role = role_of(&self.roles, w)?.prefix;
                match crate::sim::net::webhook::pending_for(&self.world.borrow().net, role) {
                    true => None,
                    false => Some(format!("no webhook event is pending for role {role}")),
                }
            }
            _ => None,
        }
    }

    /// Restarts crashed workers, then runs every worker but the periodic ones round-robin until
    /// the world is quiescent: a round in which nobody had anything to do, nothing in flight
    /// (the clock jumps to the next visibility deadline while something is, and each periodic
    /// job, such as a retention job, runs once after each jump), and SQS and PostgreSQL confirm
    /// that no message and no pending row ([`crate::workload::Workload::leftovers`]) is left. `Ok(Some(why))` when it
    /// is not quiescent after [`DRAIN_ROUNDS_MAX`] rounds, or when the same work stays pending
    /// for [`STALLED_ROUNDS_MAX`] rounds with nothing moving and no time to wait for (a lease
    /// ([`crate::spec::Leftover::due_sql`]) or a held request is time to wait for): a
    /// liveness violation. Every partition of the simulated network is healed first, and when
    /// nothing else moves an operator redrives the dead-letter queues, as a team's runbook does:
    /// [`REDRIVES_MAX`] times, then again only while each redrive is followed by a one-shot
    /// fault firing; messages still on a dead-letter queue after that are a liveness violation.
    /// A worker that fell behind (`c1:lag`, `c1:lag@recv`) runs to its next COMMIT (receive)
    /// and sits out the rounds there until one in which no worker stepped (one blocked on its
    /// locks takes no step), then catches up.
    pub fn drain(&mut self) -> Result<Option<String>> {
        self.fault(FaultEvent::DrainStart, vec![]);
        self.heal_all()?;
        let periodic: Vec<String> =
            self.workers.iter().filter(|w| self.kind(w) == Some(RoleKind::Periodic)).cloned().collect();
        let drainers: Vec<String> = self.workers.iter().filter(|w| !periodic.contains(w)).cloned().collect();
        self.polls.seen.clear();
        let (mut upstream_rounds, mut redrives, mut armed_at_redrive) = (0, 0, usize::MAX);
        // The pending work and the count of busy steps at the last pending round, and how many
        // pending rounds in a row changed neither.
        let (mut last, mut stalled) = ((String::new(), usize::MAX), 0u32);
        // Lagging workers that have waited before their call.
        let mut waited: BTreeSet<String> = BTreeSet::new();
        for _ in 0..DRAIN_ROUNDS_MAX {
            // `moved`: something happened or is under way; `stepped`: a worker restarted or
            // made a call (one blocked on a lag's lock is under way, and takes no step).
            let (mut moved, mut stepped) = (false, false);
            for w in &drainers {
                if self.lagging.get(w).is_some_and(|before| matches!(self.status(w), Status::Parked { op, .. } if op == before)) {
                    waited.insert(w.clone());
                    continue;
                }
                // The orchestrator restarts a crashed pod (an armed crash may fire here).
                if self.status(w) == Status::Crashed {
                    self.restart(w)?;
                    (moved, stepped) = (true, true);
                }
                match self.status(w) {
                    Status::Parked { .. } if !self.poll_is_stale(w) => {
                        self.step(w, None)?;
                        (moved, stepped) = (true, true);
                        if self.with_slot(w, |s| s.idle) {
                            if let Some(c) = self.kind(w).and_then(|k| self.polls.counter(k)) {
                                self.polls.seen.insert(w.clone(), c);
                            }
                            if let Some(RoleKind::Handler { queue }) = self.kind(w) {
                                self.polls.unexplained.remove(queue);
                            }
                        }
                    }
                    Status::Running { .. } => moved = true,
                    _ => {}
                }
            }
            if !stepped && !self.lagging.is_empty() {
                let (waiting, idle): (Vec<_>, Vec<_>) =
                    std::mem::take(&mut self.lagging).into_iter().partition(|(w, _)| waited.contains(w));
                let workers = waiting.into_iter().map(|(w, _)| w).collect();
                self.fault(FaultEvent::CatchUp { workers, idle }, vec![]);
                continue;
            }
            if moved {
                continue;
            }
            let held = self.world.borrow().net.held.iter().map(|h| h.due_ms).min();
            let next = [self.clock.next_visibility_deadline(), held].into_iter().flatten().min();
            if let Some(deadline) = next {
                let jump = deadline.saturating_sub(self.clock.now_ms);
                self.fault(FaultEvent::Clock { ms: jump, drain: true }, vec![]);
                self.advance_clock(deadline)?;
                // Time passed: each periodic job runs once, as it would in production.
                for job in &periodic {
                    if matches!(self.status(job), Status::Parked { .. }) {
                        self.step(job, None)?;
                    }
                }
                continue;
            }
            if self.retries_upstream && upstream_rounds < UPSTREAM_RETRIES_MAX {
                let unsent = self.unsent_dispatches();
                if !unsent.is_empty() {
                    upstream_rounds += 1;
                    if let Some(deadline) = self.clock.last_lock_deadline() {
                        let jump = deadline.saturating_sub(self.clock.now_ms);
                        self.fault(FaultEvent::Clock { ms: jump, drain: true }, vec![]);
                        self.advance_clock(deadline)?;
                    }
                    let producer = self.queue_dispatch(&unsent)?;
                    self.fault(FaultEvent::UpstreamRetry { events: unsent }, vec![]);
                    self.wake_producer(&producer);
                    self.settle(None)?;
                    continue;
                }
            }
            if self.dead_letters_held() {
                // Past the first few, a redrive is worth it only when a fault fired since the
                // last: one-shot faults bound the redrives, a handler that always fails does not.
                if redrives < REDRIVES_MAX || self.faults_armed() < armed_at_redrive {
                    redrives += 1;
                    armed_at_redrive = self.faults_armed();
                    self.redrive()?;
                    continue;
                }
                let held: Vec<String> = self.dead_letters.iter().flat_map(|(_, p)| self.clock.stored_on(p.queue)).collect();
                return Ok(Some(format!(
                    "after {redrives} redrives the dead-letter queues still hold {}: each redriven message failed again",
                    held.join(", ")
                )));
            }
            let (mut left, visible_on) = self.admin.leftovers(&self.leftovers)?;
            let undelivered = self.undelivered();
            if !undelivered.is_empty() {
                left = [left].into_iter().chain(undelivered).filter(|s| !s.is_empty()).collect::<Vec<_>>().join(", ");
            }
            for q in visible_on {
                if !self.polls.may_receive(q) {
                    self.polls.unexplained.insert(q);
                }
            }
            if left.is_empty() {
                self.check_no_bypass()?;
                return Ok(None);
            }
            self.fault(FaultEvent::DrainPending { left: left.clone() }, vec![]);
            self.polls.seen.clear();
            // Pending work that waits for time (a lease) becomes due when the clock gets there.
            if let Some(due) = self.admin.next_due(&self.leftovers)?.filter(|d| *d > self.clock.now_ms) {
                self.fault(FaultEvent::Clock { ms: due - self.clock.now_ms, drain: true }, vec![]);
                self.advance_clock(due)?;
                stalled = 0;
                continue;
            }
            let now = (left, self.history.steps().filter(|s| !s.idle).count());
            stalled = if now == last { stalled + 1 } else { 0 };
            if stalled >= STALLED_ROUNDS_MAX {
                return Ok(Some(format!(
                    "not quiescent: {} still pending after {stalled} drain rounds in which no worker had anything to do",
                    self.world.borrow().names.relabel(&now.0)
                )));
            }
            last = now;
        }
        let list = |v: Vec<String>| if v.is_empty() { "none".to_string() } else { v.join(", ") };
        let stuck = list(self.clock.in_flight.keys().cloned().collect());
        let queued = list(self.clock.stored.keys().cloned().collect());
        Ok(Some(format!("not quiescent after {DRAIN_ROUNDS_MAX} drain rounds; still in the queues: {queued} (in flight: {stuck})")))
    }

    /// With external workers: every message the queues no longer hold must have left through
    /// a recorded DeleteMessage, a dead-letter move, a redrive or its retention. One that left unseen was received and deleted by a worker
    /// talking to LocalStack directly, past its proxy (its SDK was given another endpoint, or
    /// it sends to a queue URL's host). Errors: such a message, naming it.
    fn check_no_bypass(&self) -> Result<()> {
        if !self.has_external() {
            return Ok(());
        }
        let mut sent = std::collections::BTreeSet::new();
        let mut deleted = std::collections::BTreeSet::new();
        let mut received = std::collections::BTreeSet::new();
        for e in &self.history.entries {
            // A dead-letter move, a redrive or retention took it off its queue: not a worker's doing.
            if let crate::record::history::Entry::Fault {
                fault: FaultEvent::Redriven { msg, .. } | FaultEvent::Expired { msg, .. } | FaultEvent::DeadLettered { msg, .. },
                ..
            } = e
            {
                deleted.insert(msg.clone());
            }
            let facts = match e {
                crate::record::history::Entry::Step(s) => &s.facts,
                crate::record::history::Entry::Fault { facts, .. } => facts,
                _ => continue,
            };
            for f in facts {
                match f {
                    // What an outbound queue holds is another service's to delete.
                    Fact::Sent { queue, .. } if self.admin.queues.outbound.contains(queue) => {}
                    Fact::Sent { msg, .. } => {
                        sent.insert(msg.clone());
                    }
                    Fact::Deleted { msg, .. } => {
                        deleted.insert(msg.clone());
                    }
                    Fact::Received { msg, .. } => {
                        received.insert(msg.clone());
                    }
                    _ => {}
                }
            }
        }
        let unsent: Vec<String> = received.difference(&sent).cloned().collect();
        if !unsent.is_empty() {
            anyhow::bail!(
                "worker bypassed the proxy: {} was received but never sent through crashpoint (a worker sent it to \
                 LocalStack directly); point the worker's SDK at AWS_ENDPOINT_URL_SQS",
                unsent.join(", ")
            );
        }
        let unseen: Vec<String> = sent.difference(&deleted).cloned().collect();
        if !unseen.is_empty() {
            anyhow::bail!(
                "worker bypassed the proxy: {} left the queues without a DeleteMessage through crashpoint's SQS proxy; \
                 point the worker's SDK at AWS_ENDPOINT_URL_SQS and use the queue URLs crashpoint gives it",
                unseen.join(", ")
            );
        }
        Ok(())
    }
}
