//! Which step of a history broke an invariant.
//!
//! The checker judges the final state, so it knows *what* is wrong (a payment with two
//! payouts, an event without its effect) but not *when*. This module finds the step that made
//! the final state wrong, from the history alone:
//! - too much of an effect ([`CulpritKind::Excess`]): the commit of the second effect
//!   concerning the culprit's messages (a write outside a transaction counts as its own
//!   commit);
//! - an effect missing ([`CulpritKind::Missing`]): the last `delete` of one of its messages
//!   (the message was acknowledged without its effect), else the last step concerning them;
//! - work left in flight ([`CulpritKind::Stuck`]): the last entry of the history.
//!
//! A step *concerns* a message identity when it began a dispatch of it, sent or received a
//! message with that identity, or when its worker's current message (its last receive, or what a poller such
//! as an outbox relay sent since its `begin`) has it.

use std::collections::{BTreeMap, BTreeSet};

use uuid::Uuid;

use crate::checker::{CulpritKind, Verdict};
use crate::record::history::{Entry, Fact, History, Outcome};
use crate::spec::RoleKind;

/// The identities each entry concerns, by entry index, and whether it is an effective commit.
struct Reading {
    concerns: Vec<BTreeSet<Uuid>>,
    effective: Vec<bool>,
}

fn read(history: &History) -> Reading {
    let mut identity_of: BTreeMap<&str, Uuid> = BTreeMap::new();
    for f in history.facts() {
        if let Fact::Sent { msg, identity, .. } = f {
            identity_of.insert(msg, *identity);
        }
    }
    let mut current: BTreeMap<&str, BTreeSet<Uuid>> = BTreeMap::new();
    let mut in_tx: BTreeMap<&str, (bool, bool)> = BTreeMap::new(); // (open, wrote)
    let mut concerns = Vec::with_capacity(history.entries.len());
    let mut effective = Vec::with_capacity(history.entries.len());
    for e in &history.entries {
        let mut mine = BTreeSet::new();
        let mut eff = false;
        match e {
            Entry::Step(s) => {
                let w = s.worker.as_str();
                let poller = history.roles.get(w).is_some_and(|r| r.kind == RoleKind::Poller);
                if s.op == "begin" {
                    in_tx.insert(w, (true, false));
                    if poller {
                        current.remove(w);
                    }
                }
                for f in &s.facts {
                    match f {
                        Fact::Received { msg, .. } => {
                            let ids: BTreeSet<Uuid> = identity_of.get(msg.as_str()).copied().into_iter().collect();
                            current.insert(w, ids);
                        }
                        Fact::Sent { identity, .. } => {
                            mine.insert(*identity);
                            if poller {
                                current.entry(w).or_default().insert(*identity);
                            }
                        }
                        Fact::Deleted { msg, .. } => mine.extend(identity_of.get(msg.as_str()).copied()),
                        Fact::Dispatched { identity, .. } => {
                            mine.insert(*identity);
                        }
                        _ => {}
                    }
                }
                mine.extend(current.get(w).into_iter().flatten().copied());
                let tx = in_tx.entry(w).or_insert((false, false));
                if s.outcome.wrote() {
                    if tx.0 {
                        tx.1 = true;
                    } else {
                        eff = true;
                    }
                }
                if (s.op == "commit" || s.op == "rollback") && tx.0 {
                    // A COMMIT whose reply was lost (pg:commit-response-lost) committed too.
                    let committed = s.outcome == Outcome::Done
                        || matches!(&s.outcome, Outcome::Error { message } if message == crate::nemesis::pg::COMMIT_REPLY_LOST);
                    eff = s.op == "commit" && committed && tx.1;
                    *tx = (false, false);
                }
            }
            Entry::Crash { worker, .. } | Entry::Restart { worker, .. } => {
                in_tx.remove(worker.as_str());
                current.remove(worker.as_str());
            }
            Entry::Note { worker, .. } | Entry::Blocked { worker, .. } => {
                mine.extend(current.get(worker.as_str()).into_iter().flatten().copied());
            }
            Entry::Fault { .. } => {}
        }
        concerns.push(mine);
        effective.push(eff);
    }
    Reading { concerns, effective }
}

/// The index (into `history.entries`) of the step that broke `verdict`, by the rules in the
/// module docs. `None` when the verdict holds or has no culprit.
pub fn breaking_entry(history: &History, verdict: &Verdict) -> Option<usize> {
    if verdict.holds {
        return None;
    }
    let culprit = verdict.culprit.as_ref()?;
    let last = history.entries.len().checked_sub(1)?;
    match culprit.kind {
        CulpritKind::Stuck => return Some(last),
        CulpritKind::At(i) => return Some(i.min(last)),
        _ => {}
    }
    let wanted: BTreeSet<Uuid> = culprit.identities.iter().copied().collect();
    let r = read(history);
    let concerned = |i: usize| !r.concerns[i].is_disjoint(&wanted);
    let is_step = |i: usize, op: Option<&str>| match &history.entries[i] {
        Entry::Step(s) => op.is_none_or(|o| s.op == o),
        _ => false,
    };
    let found = match culprit.kind {
        CulpritKind::Excess => {
            let commits: Vec<usize> = (0..=last).filter(|&i| r.effective[i] && concerned(i)).collect();
            commits.get(1).or(commits.last()).copied()
        }
        _ => (0..=last)
            .rev()
            .find(|&i| concerned(i) && is_step(i, Some("delete")))
            .or_else(|| (0..=last).rev().find(|&i| concerned(i) && is_step(i, None))),
    };
    Some(found.unwrap_or(last))
}

/// The first broken invariant's breaking entry, with the invariant's name.
pub fn first_break<'v>(history: &History, verdicts: &'v [Verdict]) -> Option<(usize, &'v str)> {
    verdicts.iter().find_map(|v| breaking_entry(history, v).map(|i| (i, v.invariant.as_str())))
}

/// The trace line of the step where the first violated invariant of `o` broke.
pub fn breaking_line(o: &crate::scenario::ScenarioOutcome) -> Option<String> {
    first_break(&o.history, &o.verdicts).map(|(i, _)| crate::record::trace::line(&o.history.entries[i]))
}
