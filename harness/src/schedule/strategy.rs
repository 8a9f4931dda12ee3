//! proptest strategies that generate schedules over a scenario's fault menu.
//!
//! Shrinking lives in the value tree, as proptest intends: a failing schedule shrinks by
//! dropping decisions (the `Vec` strategy) and by turning faults into plain steps (the first
//! alternative of each `prop_oneof!` is the simplest).

use proptest::prelude::*;
use proptest::sample::select;

use super::{Decision, Schedule};
use crate::faults::sqs::SqsFault;
use crate::sim::points::CrashPoint;
use crate::sim::programs::Role;

/// What generated schedules may use.
#[derive(Debug, Clone)]
pub struct Menu {
    /// Worker names (the fleet of the scenario).
    pub workers: Vec<String>,
    /// Event labels (for `dispatch:<event>`).
    pub events: Vec<String>,
    /// Most decisions per schedule.
    pub decisions_max: usize,
    /// Whether the AWS-only SQS faults (`sqs:…`) are on the menu.
    pub sqs_faults: bool,
}

fn points_of(worker: &str) -> Vec<CrashPoint> {
    let role = match Role::of(worker) {
        Some(Role::Producer) => "producer",
        Some(Role::Consumer) => "consumer",
        Some(Role::Relay) => "relay",
        _ => return vec![],
    };
    CrashPoint::ALL.into_iter().filter(|c| c.role() == role).collect()
}

/// One decision: mostly worker steps, sometimes a fault.
pub fn decision(menu: &Menu) -> BoxedStrategy<Decision> {
    let workers = menu.workers.clone();
    let steppable: Vec<String> = workers.iter().filter(|w| Role::of(w) != Some(Role::Retention)).cloned().collect();
    let at_points: Vec<(String, CrashPoint)> =
        workers.iter().flat_map(|w| points_of(w).into_iter().map(move |c| (w.clone(), c))).collect();
    let killable: Vec<String> = workers.iter().filter(|w| Role::of(w) != Some(Role::Retention)).cloned().collect();
    let has_ret = workers.iter().any(|w| w == "ret");
    let events = menu.events.clone();
    let step = select(steppable).prop_map(|worker| Decision::Step { worker, op: None });
    let crash = select(killable.clone()).prop_map(|worker| Decision::Crash { worker, at: None });
    let crash_at = select(at_points.clone()).prop_map(|(worker, at)| Decision::Crash { worker, at: Some(at) });
    let fail_at = select(at_points).prop_map(|(worker, at)| Decision::Fail { worker, at });
    let restart = select(killable).prop_map(|worker| Decision::Restart { worker });
    let tick = select(vec![1_000u64, 31_000, 901_000, 3_601_000]).prop_map(|ms| Decision::Tick { ms });
    let dispatch = select(events).prop_map(|event| Decision::Dispatch { event });
    let retention = Just(Decision::Step { worker: "ret".into(), op: None });
    let mut s = prop_oneof![
        12 => step,
        1 => crash,
        2 => crash_at,
        1 => fail_at,
        2 => restart,
        2 => tick,
        1 => dispatch,
        1 => Just(Decision::Replay),
        1 => Just(Decision::RedisRestart),
    ]
    .boxed();
    if has_ret {
        s = prop_oneof![10 => s, 1 => retention].boxed();
    }
    if menu.sqs_faults {
        let sqs = select(SqsFault::ALL.to_vec()).prop_map(Decision::Sqs);
        s = prop_oneof![12 => s, 1 => sqs].boxed();
    }
    s
}

/// Schedules of 0 to `decisions_max` decisions.
pub fn schedules(menu: &Menu) -> BoxedStrategy<Schedule> {
    proptest::collection::vec(decision(menu), 0..=menu.decisions_max)
        .prop_map(|decisions| Schedule { decisions })
        .boxed()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::test_runner::TestRunner;

    fn menu() -> Menu {
        Menu {
            workers: "p c1 c2 c3 r1 r2 d1 ret".split(' ').map(String::from).collect(),
            events: vec!["e1".into(), "e2".into()],
            decisions_max: 30,
            sqs_faults: true,
        }
    }

    /// Every decision form, including named calls and arbitrary durations, which the
    /// exploration strategy itself does not generate.
    fn any_decision() -> impl Strategy<Value = Decision> {
        prop_oneof![
            decision(&menu()),
            (select(menu().workers), "[a-z_]{1,14}")
                .prop_filter("crash, fail and restart are decisions, not calls", |(_, op)| {
                    !["crash", "fail", "restart"].contains(&op.as_str())
                })
                .prop_map(|(worker, op)| Decision::Step { worker, op: Some(op) }),
            (1u64..10_000_000).prop_map(|ms| Decision::Tick { ms }),
        ]
    }

    proptest! {
        /// parse ∘ print = id on every generated schedule.
        #[test]
        fn text_form_round_trips(s in schedules(&menu())) {
            let text = s.to_string();
            prop_assert_eq!(crate::schedule::parse(&text).unwrap(), s);
        }

        /// parse ∘ print = id on every decision form.
        #[test]
        fn every_decision_form_round_trips(ds in proptest::collection::vec(any_decision(), 0..40)) {
            let s = Schedule { decisions: ds };
            prop_assert_eq!(crate::schedule::parse(&s.to_string()).unwrap(), s);
        }
    }

    #[test]
    fn crash_points_match_the_worker_role() {
        let mut runner = TestRunner::deterministic();
        for _ in 0..200 {
            let d = decision(&menu()).new_tree(&mut runner).unwrap().current();
            if let Decision::Crash { worker, at: Some(at) } | Decision::Fail { worker, at } = &d {
                assert!(points_of(worker).contains(at), "{d}");
            }
        }
    }
}
