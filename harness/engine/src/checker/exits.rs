//! "Workers survive the faults injected": a team's process that exits by itself while a
//! schedule runs (an uncaught error after a failed call, a crash of its runtime) is a pod in a
//! crash loop in production: every message it held waits for its visibility timeout, and the
//! next transient error takes it down again. The harness answers every fault it injects the
//! way the service would (an SQS `InternalError`, a PostgreSQL error, a Redis `-ERR`, a dropped
//! connection); a worker is expected to survive each, as the payout article's consumers do
//! (roll back, leave the message to its visibility timeout, go on).
//!
//! Read from the history alone: each crash the worker caused itself
//! ([`crate::record::history::Exited`]), with the call it made last and what that call returned.
//! A worker that exits before its first call is not this: it cannot start, a setup error
//! (exit 2).

use super::{CheckCx, CulpritKind, Invariant, Problem, Verdict};
use crate::record::history::{Entry, History};

/// The name of [`WorkersSurvive`].
pub const WORKERS_SURVIVE: &str = "workers survive the faults injected";

/// Violated by every worker process that exited by itself during the schedule.
pub struct WorkersSurvive;

impl Invariant for WorkersSurvive {
    fn name(&self) -> String {
        WORKERS_SURVIVE.into()
    }

    fn check(&self, cx: &CheckCx) -> Verdict {
        Verdict::from_problems(WORKERS_SURVIVE, exits(cx.history))
    }
}

/// One problem per exit in `history`, pointing at it.
fn exits(history: &History) -> Vec<Problem> {
    let entries = &history.entries;
    let mut problems = Vec::new();
        for (i, e) in entries.iter().enumerate() {
            let Entry::Crash { t_ms, worker, exited: Some(exited), .. } = e else { continue };
            let last = entries[..i].iter().rev().find_map(|e| match e {
                Entry::Step(s) if &s.worker == worker => Some(s),
                _ => None,
            });
            let after = match last {
                Some(s) => format!(", after its call `{}` → {}", s.op, crate::record::trace::outcome_text(s)),
                None => String::new(),
            };
            let text = format!("{worker} exited by itself ({}) at {:.3}s{after}", exited.how, *t_ms as f64 / 1000.0);
            problems.push(Problem::new(text, CulpritKind::At(i), []));
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::history::{Exited, Outcome, Service, Step};

    fn verdict(entries: Vec<Entry>) -> Verdict {
        Verdict::from_problems(WORKERS_SURVIVE, exits(&History { entries, roles: Default::default() }))
    }

    #[test]
    fn a_worker_that_exits_by_itself_is_named_with_the_call_it_made_last() {
        let step = Step {
            t_ms: 1_000,
            worker: "c1".into(),
            op: "recv".into(),
            service: Service::Sqs,
            at: None,
            outcome: Outcome::ServiceErrorInjected { at: "after_lock" },
            idle: false,
            facts: vec![],
            unit: None,
        };
        let exit = Entry::Crash {
            t_ms: 1_000,
            worker: "c1".into(),
            at: None,
            op: None,
            graceful: false,
            exited: Some(Exited { how: "exit status: 1".into(), log_tail: "Traceback …".into() }),
        };
        let v = verdict(vec![Entry::Step(step), exit]);
        assert!(!v.holds);
        assert_eq!(
            v.detail,
            "c1 exited by itself (exit status: 1) at 1.000s, after its call `recv` → ✗ service error injected at after_lock: `recv` answered by the proxy, not made"
        );
        let killed = Entry::Crash { t_ms: 0, worker: "c1".into(), at: None, op: None, graceful: false, exited: None };
        assert!(verdict(vec![killed]).holds, "a crash the harness injected is not the worker's");
    }
}
