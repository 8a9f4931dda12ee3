//! The drain phase: after the last decision, crashed workers restart and everyone runs until
//! the world is quiescent (Jepsen's final "heal and recover" generator).
//!
//! A worker whose last poll found nothing (an empty receive, a relay select with no rows) is
//! polled again only when something it could see has changed since: a message was sent to or
//! became visible on its queue, or a transaction that could have written or unlocked outbox
//! rows ended. The bookkeeping comes from the history, so the drain is as deterministic as the
//! schedule. Quiescence is confirmed by asking SQS and PostgreSQL, not assumed.

use std::collections::BTreeMap;

use anyhow::Result;

use super::Run;
use crate::schedule::format_duration_ms;
use crate::sim::history::QueueRole;
use crate::sim::programs::Role;
use crate::sim::world::Status;

/// Rounds of the drain phase before the schedule is declared not quiescent.
pub const DRAIN_ROUNDS_MAX: usize = 200;

/// Change counters, and the counter each idle worker last polled at.
#[derive(Debug, Default)]
pub(super) struct Polls {
    payments: u64,
    payouts: u64,
    outbox: u64,
    seen: BTreeMap<String, u64>,
}

impl Polls {
    /// A message was sent to, or became visible again on, `q`.
    pub(super) fn queue_changed(&mut self, q: QueueRole) {
        match q {
            QueueRole::Payments => self.payments += 1,
            QueueRole::Payouts => self.payouts += 1,
        }
    }

    /// A transaction that may have written or unlocked outbox rows ended.
    pub(super) fn outbox_changed(&mut self) {
        self.outbox += 1;
    }

    fn counter(&self, role: Role) -> Option<u64> {
        match role {
            Role::Consumer => Some(self.payments),
            Role::Downstream => Some(self.payouts),
            Role::Relay => Some(self.outbox),
            _ => None,
        }
    }
}

impl Run<'_> {
    /// True when `w` is parked at its poll after a poll that found nothing, and nothing it
    /// could see changed since.
    fn poll_is_stale(&self, w: &str) -> bool {
        let Some(role) = Role::of(w) else { return false };
        let poll_op = if role == Role::Relay { "begin" } else { "recv" };
        let at_poll = matches!(self.status(w), Status::Parked { op, .. } if op == poll_op);
        at_poll
            && self.with_slot(w, |s| s.idle)
            && self.polls.counter(role).is_some_and(|c| self.polls.seen.get(w) == Some(&c))
    }

    /// Restarts crashed workers, then runs every worker but `ret` round-robin until the world
    /// is quiescent: a round in which nobody had anything to do, nothing in flight (the clock
    /// jumps to the next visibility deadline while something is, and `ret`, the periodic
    /// retention job, runs once after each jump), and SQS and PostgreSQL
    /// confirm that no message and no unpublished outbox row is left. `Ok(Some(why))` when it
    /// is not quiescent after [`DRAIN_ROUNDS_MAX`] rounds: a liveness violation.
    pub fn drain(&mut self) -> Result<Option<String>> {
        self.fault("drain: restart crashed workers, run everyone until quiescent".into(), vec![]);
        let drainers: Vec<String> =
            self.workers.iter().filter(|w| Role::of(w) != Some(Role::Retention)).cloned().collect();
        self.polls.seen.clear();
        for _ in 0..DRAIN_ROUNDS_MAX {
            let mut moved = false;
            for w in &drainers {
                // The orchestrator restarts a crashed pod (an armed crash may fire here).
                if self.status(w) == Status::Crashed {
                    self.restart(w)?;
                    moved = true;
                }
                match self.status(w) {
                    Status::Parked { .. } if !self.poll_is_stale(w) => {
                        self.step(w, None)?;
                        moved = true;
                        if self.with_slot(w, |s| s.idle) {
                            if let Some(c) = Role::of(w).and_then(|r| self.polls.counter(r)) {
                                self.polls.seen.insert(w.clone(), c);
                            }
                        }
                    }
                    Status::Running { .. } => moved = true,
                    _ => {}
                }
            }
            if moved {
                continue;
            }
            if let Some(deadline) = self.clock.next_visibility_deadline() {
                let jump = deadline.saturating_sub(self.clock.now_ms);
                self.fault(format!("drain: clock +{}", format_duration_ms(jump)), vec![]);
                self.advance_clock(deadline)?;
                // Time passed: the periodic retention job runs once, as it would in production.
                if let Some(ret) = self.workers.iter().find(|w| Role::of(w) == Some(Role::Retention)).cloned() {
                    if matches!(self.status(&ret), Status::Parked { .. }) {
                        self.step(&ret, None)?;
                    }
                }
                continue;
            }
            let left = self.admin.leftovers()?;
            if left.is_empty() {
                return Ok(None);
            }
            self.fault(format!("drain: {left}; polling again"), vec![]);
            self.polls.seen.clear();
        }
        let stuck: Vec<String> = self.clock.in_flight.keys().cloned().collect();
        Ok(Some(format!(
            "not quiescent after {DRAIN_ROUNDS_MAX} drain rounds; in flight: {}",
            if stuck.is_empty() { "none".to_string() } else { stuck.join(", ") }
        )))
    }
}
