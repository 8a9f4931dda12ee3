//! Invariants, checked against the real final state of PostgreSQL and the recorded history.
//!
//! Like Jepsen's checkers, they never ask the scheduler what it meant to do: each
//! [`Invariant`] is a value with a name and a `check` over a [`CheckCx`] (the schedule's
//! schema, its history, its events and labels), and [`check`] composes them. A check that
//! cannot decide (a query fails) says [`Verdict::unknown`], never "holds"; a run with an
//! unknown verdict ends as a harness error (exit 2).
//!
//! Reusable invariants: [`Quiescence`] (the drain's liveness finding), [`NothingExpired`]
//! (no message lost to its queue's retention), [`ReleasedByHolder`] (no lock deleted by a worker
//! that did not hold it), [`FailedAcksHandled`] (no failed batch delete ignored), [`StoppedHoldsNothing`] (a graceful stop
//! leaves nothing in flight), [`WorkersSurvive`] (no worker process exits by itself), [`CopiesBounded`] (a handler that requeues a copy deletes the original), [`NoReplaySuppressed`] (no replay dropped by FIFO deduplication) and [`SqlInvariant`] (a query that returns the
//! violating rows). A workload writes the rest against [`CheckCx`].

mod acks;
mod copies;
mod exits;
mod expired;
pub mod facts;
mod locks;
mod sql;
mod stops;
mod suppressed;

pub use acks::{FailedAcksHandled, FAILED_ACKS_HANDLED};
pub use copies::{CopiesBounded, COPIES_BOUNDED};
pub use exits::{WorkersSurvive, WORKERS_SURVIVE};
pub use expired::{NothingExpired, NOTHING_EXPIRED};
pub use locks::{ReleasedByHolder, RELEASED_BY_HOLDER};
pub use sql::SqlInvariant;
pub use stops::{StoppedHoldsNothing, STOPPED_HOLDS_NOTHING};
pub use suppressed::{NoReplaySuppressed, NO_REPLAY_SUPPRESSED};

use std::any::Any;
use std::cell::RefCell;
use std::collections::BTreeMap;

use anyhow::Result;
use sqlx::postgres::PgRow;
use sqlx::PgPool;
use uuid::Uuid;

use crate::namespace::admin::Admin;
use crate::record::history::History;
use crate::record::labels::Labels;
use crate::spec::Event;

/// The outcome of one invariant.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Verdict {
    /// The invariant, e.g. `exactly one payout per payment`.
    pub invariant: String,
    /// Whether it holds (false when violated or unknown).
    pub holds: bool,
    /// What was found (labels, not raw ids); empty when it holds trivially.
    pub detail: String,
    /// Why the check could not decide (a query error, with PostgreSQL's message); `None` when
    /// it decided. An unknown verdict ends the run as a harness error (exit 2).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unknown: Option<String>,
    /// For a violation: what its first problem (in the order of `detail`) is about, so that
    /// a report can point at the step that broke it. Not serialized: it holds per-run ids.
    #[serde(skip)]
    pub culprit: Option<Culprit>,
}

impl Verdict {
    /// A verdict from its problems, sorted by text: they often come from maps keyed by
    /// per-run UUIDs, and the printed detail must not depend on them. Holds when empty.
    pub fn from_problems(invariant: &str, mut problems: Vec<Problem>) -> Verdict {
        problems.sort_by(|a, b| a.text.cmp(&b.text));
        let detail = problems.iter().map(|p| p.text.as_str()).collect::<Vec<_>>().join("; ");
        let culprit = problems.into_iter().next().map(|p| p.culprit);
        Verdict { invariant: invariant.to_string(), holds: culprit.is_none(), detail, unknown: None, culprit }
    }

    /// An invariant that could not decide, and why.
    pub fn unknown(invariant: &str, reason: impl Into<String>) -> Verdict {
        let reason = reason.into();
        Verdict { invariant: invariant.to_string(), holds: false, detail: format!("unknown: {reason}"), unknown: Some(reason), culprit: None }
    }
}

/// What a violation is about: the message identities concerned (`event_id`s, `outbox_id`s,
/// any idempotency key) and whether there is too much of an effect or too little.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Culprit {
    /// Identities of the messages whose handling the problem concerns.
    pub identities: Vec<Uuid>,
    /// The kind of problem.
    pub kind: CulpritKind,
}

/// How a violation shows in the final state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CulpritKind {
    /// An effect committed more than once (two payouts, a counter too high).
    Excess,
    /// An effect missing: lost, never published, a dedup row without its effect.
    Missing,
    /// Work left in flight after the drain.
    Stuck,
    /// The step at this index of the history's entries did it (a lock deleted by a worker
    /// that did not hold it).
    At(usize),
}

/// One problem an invariant found: its text (with labels) and what it is about.
#[derive(Debug, Clone)]
pub struct Problem {
    /// E.g. `payment p1 has 2 payouts`.
    pub text: String,
    /// What it concerns.
    pub culprit: Culprit,
}

impl Problem {
    /// A problem of `kind` concerning the messages with `identities`.
    pub fn new(text: String, kind: CulpritKind, identities: impl IntoIterator<Item = Uuid>) -> Problem {
        Problem { text, culprit: Culprit { identities: identities.into_iter().collect(), kind } }
    }
}

/// What an invariant may look at: the schedule's schema (through the admin pool), the history,
/// the scenario's events and the labels. It never sees the scheduler.
pub struct CheckCx<'a> {
    admin: &'a Admin,
    /// The complete history of the schedule.
    pub history: &'a History,
    /// The scenario's events, in dispatch order.
    pub events: &'a [Event],
    /// Labels of the schedule's ids.
    pub names: &'a Labels,
    /// The drain's liveness finding: why the world was not quiescent, or `None`.
    pub not_quiescent: Option<&'a str>,
    /// The effects the workload's providers applied ([`crate::provider::Provider::effects`]),
    /// read from their ledgers after the drain.
    pub effects: &'a [crate::provider::Effect],
    memo: RefCell<BTreeMap<&'static str, Box<dyn Any>>>,
    /// Labels given to UUIDs first seen in violating rows ([`CheckCx::label_rows`]).
    row_labels: RefCell<Labels>,
}

impl<'a> CheckCx<'a> {
    /// The admin pool on the schedule's schema (`search_path` set).
    pub fn pg(&self) -> &PgPool {
        &self.admin.pg
    }

    /// Runs `sql` on the schedule's schema and returns its rows. Errors: PostgreSQL's.
    pub fn rows(&self, sql: &str) -> Result<Vec<PgRow>, sqlx::Error> {
        self.admin.rt.block_on(sqlx::query(sql).fetch_all(&self.admin.pg))
    }

    /// Runs `f` (which may query PostgreSQL) on the admin runtime.
    pub fn block_on<F: std::future::Future>(&self, f: F) -> F::Output {
        self.admin.rt.block_on(f)
    }

    /// The label of an id (`p1`, `ob2`), or its first 8 hex digits.
    pub fn label(&self, id: &Uuid) -> String {
        self.names.uuid(id)
    }

    /// `texts` (one per violating row) with every UUID in them replaced by its label: the
    /// schedule's label, or for a UUID it never labelled (one the worker generated: an outbox
    /// row's id) a `k<n>` label, numbered on from the trace's own. New labels are given in the
    /// order of first sight in the rows sorted by their text with those UUIDs left out, so the
    /// same schedule prints the same lines whatever ids the worker drew and whatever order the
    /// rows came in; they are kept for the invariants checked after.
    pub fn label_rows<'t>(&self, texts: impl Iterator<Item = &'t str>) -> Vec<String> {
        let texts: Vec<&str> = texts.collect();
        let mut labels = self.row_labels.borrow_mut();
        let masked = |t: &str, labels: &Labels| {
            let mut m = labels.relabel(&self.names.relabel(t));
            for id in crate::record::labels::uuids_in(&m.clone()) {
                m = m.replace(id, "?");
            }
            m
        };
        let mut order: Vec<usize> = (0..texts.len()).collect();
        order.sort_by_cached_key(|&i| masked(texts[i], &labels));
        for &i in &order {
            let known = self.names.relabel(texts[i]);
            labels.relabel_all_after(&known, self.names.unknown_count());
        }
        texts.iter().map(|t| labels.relabel(&self.names.relabel(t))).collect()
    }

    /// A value computed once per schedule and shared by the invariants that need it (e.g. the
    /// final state read once), keyed by `key`. Errors: those of `read`, each time it runs.
    pub fn memo<T: Clone + 'static>(&self, key: &'static str, read: impl FnOnce(&Self) -> Result<T>) -> Result<T> {
        if let Some(v) = self.memo.borrow().get(key).and_then(|b| b.downcast_ref::<T>()) {
            return Ok(v.clone());
        }
        let v = read(self)?;
        self.memo.borrow_mut().insert(key, Box::new(v.clone()));
        Ok(v)
    }
}

/// An invariant: a name and a check over the final state and the history.
pub trait Invariant {
    /// Its name, e.g. `exactly one payout per payment`.
    fn name(&self) -> String;
    /// Holds, violated (with problems) or unknown (with the reason).
    fn check(&self, cx: &CheckCx) -> Verdict;
}

/// Quiescence: after the drain, every message deleted or parked and nothing pending
/// ([`crate::workload::Workload::leftovers`]). Violated when the drain gave up.
pub struct Quiescence;

/// The name of [`Quiescence`].
pub const QUIESCENCE: &str = "quiescence: every message deleted or parked";

impl Invariant for Quiescence {
    fn name(&self) -> String {
        QUIESCENCE.into()
    }
    fn check(&self, cx: &CheckCx) -> Verdict {
        let stuck = cx.not_quiescent.map(|s| vec![Problem::new(s.to_string(), CulpritKind::Stuck, [])]).unwrap_or_default();
        Verdict::from_problems(QUIESCENCE, stuck)
    }
}

/// `invariants`, with each of the engine's own appended unless one of them is named like it:
/// [`NothingExpired`], [`ReleasedByHolder`], [`FailedAcksHandled`], [`StoppedHoldsNothing`],
/// [`CopiesBounded`], [`NoReplaySuppressed`], [`WorkersSurvive`], then [`Quiescence`].
pub fn with_engine_invariants(mut invariants: Vec<Box<dyn Invariant>>) -> Vec<Box<dyn Invariant>> {
    let engine: [Box<dyn Invariant>; 8] = [
        Box::new(NothingExpired),
        Box::new(ReleasedByHolder),
        Box::new(FailedAcksHandled),
        Box::new(StoppedHoldsNothing),
        Box::new(CopiesBounded),
        Box::new(NoReplaySuppressed),
        Box::new(WorkersSurvive),
        Box::new(Quiescence),
    ];
    for own in engine {
        if !invariants.iter().any(|i| i.name() == own.name()) {
            invariants.push(own);
        }
    }
    invariants
}

/// Checks every invariant, in order (Jepsen's `compose`). An invariant whose check errors is
/// [`Verdict::unknown`].
pub fn check(
    invariants: &[Box<dyn Invariant>],
    admin: &Admin,
    history: &History,
    events: &[Event],
    names: &Labels,
    effects: &[crate::provider::Effect],
    not_quiescent: Option<&str>,
) -> Vec<Verdict> {
    // PostgreSQL that does not answer makes every verdict unknown at once, rather than each
    // invariant waiting out the pool's acquire timeout in turn (a service killed mid-run).
    let probe = match admin.pg_refuses() {
        true => Err("its port refuses connections".to_string()),
        false => admin.rt.block_on(sqlx::query("SELECT 1").execute(&admin.pg)).map(|_| ()).map_err(|e| e.to_string()),
    };
    if let Err(e) = probe {
        admin.pg_unreachable();
        let why = format!("PostgreSQL does not answer the checker: {e}");
        return invariants.iter().map(|i| Verdict::unknown(&i.name(), why.clone())).collect();
    }
    let cx = CheckCx { admin, history, events, names, not_quiescent, effects, memo: RefCell::new(BTreeMap::new()), row_labels: RefCell::default() };
    // PostgreSQL killed in the middle of the checks: once a verdict is unknown and the port
    // refuses, the rest are unknown at once.
    let mut gone = false;
    let mut verdicts = Vec::new();
    for i in invariants {
        if gone {
            verdicts.push(Verdict::unknown(&i.name(), "PostgreSQL stopped answering during the checks".to_string()));
            continue;
        }
        let v = i.check(&cx);
        if v.unknown.is_some() && admin.pg_refuses() {
            admin.pg_unreachable();
            gone = true;
        }
        verdicts.push(v);
    }
    verdicts
}

/// The verdict of `result`: its problems, or unknown with the error (and its causes).
pub fn decide(invariant: &str, result: Result<Vec<Problem>>) -> Verdict {
    match result {
        Ok(problems) => Verdict::from_problems(invariant, problems),
        Err(e) => Verdict::unknown(invariant, format!("{e:#}")),
    }
}
