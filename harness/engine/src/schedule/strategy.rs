//! proptest strategies that generate schedules over a scenario's fault menu.
//!
//! Generation only: a failing schedule shrinks by deleting decisions
//! (`crate::explore`'s `ddmin`), not through these strategies' value trees, whose walk took
//! about n runs for n decisions before it reached the element simplifications.

use std::collections::BTreeMap;

use proptest::prelude::*;
use proptest::sample::select;
use proptest::strategy::Union;

use super::{Decision, Schedule, Vocabulary};
use crate::nemesis::pg::PgFault;
use crate::nemesis::sqs::SqsFault;
use crate::spec::{role_of, CrashPoint, RoleKind};

/// The clock jump the menu adds for a workload with providers: 24 h and 1 s, past the key
/// retention of a Stripe-like provider, logical ms.
pub const PAST_KEY_RETENTION_MS: u64 = 86_401_000;

/// The largest worker weight (`[explore] worker_weights`). A thousand to one already gives a
/// worker nearly every pick; a larger number is more likely a typo than a wish.
pub const WORKER_WEIGHT_MAX: u32 = 1000;

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
    /// Whether the PostgreSQL outcome faults (`pg:…`) are on the menu.
    pub pg_faults: bool,
    /// Whether the Redis faults (`redis:restart`, `redis:lose-lock`) are on the menu.
    pub redis_faults: bool,
    /// Whether `sqs:redrive` joins the SQS faults (the scenario has a dead-letter queue).
    pub redrive: bool,
    /// Whether graceful stops (`<handler>:stop`) of the handlers are on the menu.
    pub stops: bool,
    /// Calls `X` for which `crash@X:applied` is on the menu (none: the menu is as before).
    pub applied: Vec<String>,
    /// Relative weights of the workers (`[explore] worker_weights`). A decision that picks a
    /// worker (a step, a crash where it stands or at a crash point, an injected failure, a
    /// restart, a graceful stop, an applied-then-unanswered crash) draws each of its choices,
    /// a worker or a worker with one of its crash points or calls, in proportion to that
    /// worker's weight. Unlisted workers weigh 1. Empty: every pick is uniform, as before the
    /// field existed.
    pub worker_weights: BTreeMap<String, u32>,
    /// The workload's roles, crash points and faults.
    pub vocabulary: Vocabulary,
    /// Workers whose process may hold several calls at once: half of their steps grant the
    /// second, third or fourth held call (`c1/2`) instead of the first. Empty: every step is as
    /// before the field existed.
    pub concurrent: Vec<String>,
    /// Per role prefix, the boundaries after its calls (`after_commit`) that join its
    /// declared crash points on the menu (`[explore] call_boundaries`). Empty: the menu is as
    /// before the field existed.
    pub calls: BTreeMap<String, Vec<CrashPoint>>,
    /// The most logical time a generated schedule's ticks add up to, ms
    /// ([`clock_max_ms`] of the queues' shortest retention): a tick that would pass it is
    /// left out, so that exploration never holds a message past its queue's retention,
    /// which no handler survives. A scripted `tick:` is never capped.
    pub clock_max_ms: u64,
}

/// The most logical time generated ticks may add up to for queues whose shortest retention is
/// `retention_ms`: half of it (2 days for SQS's default 4), leaving the other half to the
/// drain, whose clock jumps are visibility deadlines (at most 12 h each, once per retry) and
/// leases.
pub fn clock_max_ms(retention_ms: u64) -> u64 {
    retention_ms / 2
}

impl Menu {
    fn kind(&self, worker: &str) -> Option<RoleKind> {
        role_of(&self.vocabulary.roles, worker).map(|r| r.kind)
    }

    fn points_of(&self, worker: &str) -> Vec<CrashPoint> {
        let Some(role) = role_of(&self.vocabulary.roles, worker) else {
            return Vec::new();
        };
        let mut points = role.points.to_vec();
        for cp in self.calls.get(role.prefix).into_iter().flatten() {
            if !points.contains(cp) {
                points.push(cp);
            }
        }
        points
    }

    fn worker_weight(&self, worker: &str) -> u64 {
        self.worker_weights.get(worker).map_or(1, |w| u64::from(*w))
    }

    /// One of `items` (not empty), each drawn in proportion to the weight of its worker
    /// (`worker_of`): with `{ p = 4 }`, each of p's crash points is four times as likely as
    /// each of another worker's. Through [`select`] when every weight is 1, so that a menu
    /// without weights generates, for a given seed, what it did before weights existed;
    /// otherwise one draw in `0..Σ weight` (u64: no sum of weights overflows).
    fn pick<T: Clone + std::fmt::Debug + 'static>(
        &self,
        items: Vec<T>,
        worker_of: impl Fn(&T) -> &str,
    ) -> BoxedStrategy<T> {
        let weights: Vec<u64> = items
            .iter()
            .map(|i| self.worker_weight(worker_of(i)))
            .collect();
        if weights.iter().all(|w| *w == 1) {
            return select(items).boxed();
        }
        // Item k is drawn for the numbers from ends[k - 1] (0 for the first) up to ends[k].
        let ends: Vec<u64> = weights
            .iter()
            .scan(0u64, |sum, w| {
                *sum += w;
                Some(*sum)
            })
            .collect();
        let total = *ends.last().expect("a pick has at least one item");
        (0..total)
            .prop_map(move |r| items[ends.partition_point(|end| *end <= r)].clone())
            .boxed()
    }
}

/// One decision: mostly worker steps, sometimes a fault. Periodic workers are stepped now and
/// then but never crashed; the workload's own faults are on the menu with weight 1 each.
pub fn decision(menu: &Menu) -> BoxedStrategy<Decision> {
    let workers = menu.workers.clone();
    let periodic: Vec<String> = workers
        .iter()
        .filter(|w| menu.kind(w) == Some(RoleKind::Periodic))
        .cloned()
        .collect();
    let steppable: Vec<String> = workers
        .iter()
        .filter(|w| !periodic.contains(w))
        .cloned()
        .collect();
    let at_points: Vec<(String, CrashPoint)> = workers
        .iter()
        .flat_map(|w| menu.points_of(w).into_iter().map(move |c| (w.clone(), c)))
        .collect();
    let killable = steppable.clone();
    let steppable_workers = steppable.clone();
    let events = menu.events.clone();
    let step = menu
        .pick(steppable, |w| w)
        .prop_map(|worker| Decision::Step { worker, op: None });
    let step = match menu.concurrent.clone() {
        concurrent if concurrent.is_empty() => step.boxed(),
        concurrent => (step, 0u8..6)
            .prop_map(move |(d, k)| match d {
                Decision::Step { worker, op: None } if k >= 3 && concurrent.contains(&worker) => {
                    Decision::Step {
                        worker,
                        op: Some(format!("#{}", k - 1)),
                    }
                }
                d => d,
            })
            .boxed(),
    };
    let crash = menu
        .pick(killable.clone(), |w| w)
        .prop_map(|worker| Decision::Crash { worker, at: None });
    let restart = menu
        .pick(killable, |w| w)
        .prop_map(|worker| Decision::Restart { worker });
    let mut ticks = vec![1_000u64, 31_000, 901_000, 3_601_000];
    if !menu.vocabulary.providers.is_empty() {
        // Past a provider's key retention (Stripe keeps idempotency keys 24 h).
        ticks.push(PAST_KEY_RETENTION_MS);
    }
    let tick = select(ticks).prop_map(|ms| Decision::Tick { ms });
    let dispatch = select(events).prop_map(|event| Decision::Dispatch { event });
    // The arms, weights and order are those of the strategy before the Workload seam, so that
    // a run seed generates the same schedules as it did then.
    let mut arms: Vec<(u32, BoxedStrategy<Decision>)> =
        vec![(12, step.boxed()), (1, crash.boxed())];
    if !at_points.is_empty() {
        let crash_at = menu
            .pick(at_points.clone(), |(w, _)| w)
            .prop_map(|(worker, at)| Decision::Crash {
                worker,
                at: Some(at),
            });
        let fail_at = menu
            .pick(at_points, |(w, _)| w)
            .prop_map(|(worker, at)| Decision::Fail { worker, at });
        arms.push((2, crash_at.boxed()));
        arms.push((1, fail_at.boxed()));
    }
    arms.extend([
        (2, restart.boxed()),
        (2, tick.boxed()),
        (1, dispatch.boxed()),
    ]);
    match menu.vocabulary.faults.as_slice() {
        [] => {}
        [one] => arms.push((1, Just(Decision::Fault(one)).boxed())),
        many => arms.push((1, select(many.to_vec()).prop_map(Decision::Fault).boxed())),
    }
    if menu.redis_faults {
        arms.push((1, Just(Decision::RedisRestart).boxed()));
        arms.push((1, Just(Decision::Redis(crate::nemesis::redis::RedisFault::LoseLock)).boxed()));
    }
    let mut s = Union::new_weighted(arms).boxed();
    if !periodic.is_empty() {
        let periodic = match periodic.as_slice() {
            [one] => Just(Decision::Step {
                worker: one.clone(),
                op: None,
            })
            .boxed(),
            _ => select(periodic)
                .prop_map(|worker| Decision::Step { worker, op: None })
                .boxed(),
        };
        s = prop_oneof![10 => s, 1 => periodic].boxed();
    }
    if menu.sqs_faults {
        let mut faults = SqsFault::ALL.to_vec();
        if menu.redrive {
            faults.push(SqsFault::Redrive);
        }
        let sqs = select(faults).prop_map(Decision::Sqs);
        s = prop_oneof![12 => s, 1 => sqs].boxed();
    }
    if menu.pg_faults {
        let pg = select(PgFault::ALL.to_vec()).prop_map(Decision::Pg);
        s = prop_oneof![12 => s, 1 => pg].boxed();
    }
    let handlers: Vec<String> = workers
        .iter()
        .filter(|w| matches!(menu.kind(w), Some(RoleKind::Handler { .. })))
        .cloned()
        .collect();
    if menu.stops && !handlers.is_empty() {
        let stop = menu
            .pick(handlers, |w| w)
            .prop_map(|worker| Decision::Stop { worker });
        s = prop_oneof![12 => s, 1 => stop].boxed();
    }
    if !menu.vocabulary.providers.is_empty() {
        let net = select(crate::nemesis::net::NetFault::menu(
            &menu.vocabulary.providers,
            &menu.vocabulary.webhooks,
            &menu.vocabulary.routes,
        ))
        .prop_map(Decision::Net);
        s = prop_oneof![6 => s, 1 => net].boxed();
    }
    if !menu.applied.is_empty() {
        let pairs: Vec<(String, String)> = steppable_workers
            .iter()
            .flat_map(|w| menu.applied.iter().map(move |op| (w.clone(), op.clone())))
            .collect();
        let applied = menu
            .pick(pairs, |(w, _)| w)
            .prop_map(|(worker, op)| Decision::CrashApplied { worker, op });
        s = prop_oneof![16 => s, 1 => applied].boxed();
    }
    s
}

/// Schedules of 0 to `decisions_max` decisions.
pub fn schedules(menu: &Menu) -> BoxedStrategy<Schedule> {
    let clock_max_ms = menu.clock_max_ms;
    proptest::collection::vec(decision(menu), 0..=menu.decisions_max)
        .prop_map(move |decisions| Schedule {
            decisions: cap_ticks(decisions, clock_max_ms),
        })
        .boxed()
}

/// `decisions` without the ticks that would carry the sum of ticks past `clock_max_ms`.
pub(super) fn cap_ticks(decisions: Vec<Decision>, clock_max_ms: u64) -> Vec<Decision> {
    let mut clock = 0u64;
    decisions
        .into_iter()
        .filter(|d| match d {
            Decision::Tick { ms } if clock.saturating_add(*ms) > clock_max_ms => false,
            Decision::Tick { ms } => {
                clock += ms;
                true
            }
            _ => true,
        })
        .collect()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::test_runner::TestRunner;

    /// A menu over the engine's own test vocabulary (`text::tests::vocabulary`).
    pub(crate) fn menu() -> Menu {
        Menu {
            workers: "p c1 c2 c3 r1 r2 d1 ret"
                .split(' ')
                .map(String::from)
                .collect(),
            events: vec!["e1".into(), "e2".into()],
            decisions_max: 30,
            sqs_faults: true,
            pg_faults: true,
            redis_faults: true,
            redrive: true,
            stops: true,
            applied: vec!["commit".into()],
            worker_weights: BTreeMap::new(),
            vocabulary: crate::schedule::text::tests::vocabulary(),
            calls: BTreeMap::new(),
            clock_max_ms: clock_max_ms(crate::spec::DEFAULT_RETENTION_S * 1000),
            concurrent: vec![],
        }
    }

    /// Every decision form, including named calls and arbitrary durations, which the
    /// exploration strategy itself does not generate.
    fn any_decision() -> impl Strategy<Value = Decision> {
        prop_oneof![
            decision(&menu()),
            (select(menu().workers), "[a-z_]{1,14}")
                .prop_filter(
                    "crash, fail and restart are decisions, not calls",
                    |(_, op)| { !["crash", "fail", "restart"].contains(&op.as_str()) }
                )
                .prop_map(|(worker, op)| Decision::Step {
                    worker,
                    op: Some(op)
                }),
            (1u64..10_000_000).prop_map(|ms| Decision::Tick { ms }),
            (select(menu().workers), "[a-z_]{1,14}")
                .prop_map(|(worker, op)| Decision::CrashApplied { worker, op }),
            (select(menu().workers), 1u32..20).prop_map(|(worker, k)| Decision::Step {
                worker,
                op: Some(format!("#{k}"))
            }),
        ]
    }

    proptest! {
        /// parse ∘ print = id on every generated schedule.
        #[test]
        fn text_form_round_trips(s in schedules(&menu())) {
            let text = s.to_string();
            prop_assert_eq!(crate::schedule::parse(&text, &menu().vocabulary).unwrap(), s);
        }

        /// Generated ticks never add up past the menu's cap, even with a day-long tick on
        /// the menu (a workload with providers) and a small cap; the other decisions stay.
        #[test]
        fn generated_ticks_stay_inside_the_clock_cap(decisions in proptest::collection::vec(any_decision(), 0..40)) {
            let cap = 2 * PAST_KEY_RETENTION_MS;
            let kept = cap_ticks(decisions.clone(), cap);
            let ticks: u64 = kept.iter().map(|d| if let Decision::Tick { ms } = d { *ms } else { 0 }).sum();
            prop_assert!(ticks <= cap);
            let others = |ds: &[Decision]| ds.iter().filter(|d| !matches!(d, Decision::Tick { .. })).count();
            prop_assert_eq!(others(&kept), others(&decisions));
        }

        /// parse ∘ print = id on every decision form.
        #[test]
        fn every_decision_form_round_trips(ds in proptest::collection::vec(any_decision(), 0..40)) {
            let s = Schedule { decisions: ds };
            prop_assert_eq!(crate::schedule::parse(&s.to_string(), &menu().vocabulary).unwrap(), s);
        }
    }

    #[test]
    fn the_clock_cap_is_half_the_retention() {
        assert_eq!(clock_max_ms(345_600_000), 172_800_000);
        assert_eq!(clock_max_ms(60_000), 30_000);
    }

    /// A weight moves every kind of pick towards its workers, each kind on its own; without
    /// weights each worker has its share. 6000 decisions from the deterministic runner.
    #[test]
    fn worker_weights_move_every_pick_towards_their_workers() {
        // Per kind of pick: (decisions of that kind, of those picking p or d1).
        let shares = |menu: &Menu| {
            let mut runner = TestRunner::deterministic();
            let mut by_kind: BTreeMap<&str, (u32, u32)> = BTreeMap::new();
            for _ in 0..6000 {
                let (kind, worker) = match decision(menu).new_tree(&mut runner).unwrap().current() {
                    // ret is periodic: a draw of its own, outside the weights.
                    Decision::Step { worker, .. } if worker == "ret" => continue,
                    Decision::Step { worker, .. } => ("step", worker),
                    Decision::Crash { worker, at: None } => ("crash", worker),
                    Decision::Crash {
                        worker,
                        at: Some(_),
                    } => ("crash at a point", worker),
                    Decision::Fail { worker, .. } => ("failure at a point", worker),
                    Decision::Restart { worker } => ("restart", worker),
                    Decision::Stop { worker } => ("stop", worker),
                    Decision::CrashApplied { worker, .. } => ("applied crash", worker),
                    _ => continue,
                };
                let n = by_kind.entry(kind).or_default();
                n.0 += 1;
                n.1 += u32::from(worker == "p" || worker == "d1");
            }
            by_kind
        };
        let plain = shares(&menu());
        let weighted = shares(&Menu {
            worker_weights: [("p".to_string(), 8), ("d1".to_string(), 8)].into(),
            ..menu()
        });
        assert_eq!(plain.len(), 7, "{plain:?}");
        // Uniform: 2 of 7 workers (steps, crashes, restarts, applied crashes), p's 2 of the 10
        // crash points (d1 has none), d1 among the 4 handlers (stops). Weighted 8: 16 of 21,
        // 16 of 24, 8 of 11.
        for (kind, (n, hits)) in &plain {
            let (wn, whits) = weighted[kind];
            let (share, weighted_share) = (
                f64::from(*hits) / f64::from(*n),
                f64::from(whits) / f64::from(wn),
            );
            assert!(*n >= 80 && wn >= 80, "{kind}: {n} and {wn} decisions");
            assert!(
                share < 0.4 && weighted_share > 0.55,
                "{kind}: {share:.2} → {weighted_share:.2}"
            );
        }
    }

    /// Without weights the strategy draws what it drew before weights existed: the first
    /// schedule of two fixed runner seeds, printed by the commit before `[explore]
    /// worker_weights` came in (where also `payout`'s catalogue with seed 1 gave the same table
    /// before and after). The provider faults' menu grew since by `net:duplicate` and the
    /// request faults aimed at a route that applies effects: the second pin's provider faults
    /// are its draws on that menu. The Redis faults grew by `redis:lose-lock`, an arm of every
    /// workload's menu: both pins are the draws on that menu (every workload draws other
    /// schedules since; the compiled catalogues' detection over seeds 1–10 was measured again).
    #[test]
    fn schedules_without_weights_are_those_of_before() {
        let first = |seed: u8| {
            let mut runner = TestRunner::new_with_rng(
                proptest::test_runner::Config::default(),
                proptest::test_runner::TestRng::from_seed(
                    proptest::test_runner::RngAlgorithm::ChaCha,
                    &[seed; 32],
                ),
            );
            schedules(&menu())
                .new_tree(&mut runner)
                .unwrap()
                .current()
                .to_string()
        };
        assert_eq!(first(1), PINNED_1);
        assert_eq!(first(2), PINNED_2);
    }

    const PINNED_1: &str = "tick:901s pg:connection-reset net:drop-request@gateway";
    const PINNED_2: &str = "c3 dispatch:e1 c1:crash@commit:applied d1 d1:crash p:crash@commit:applied r1 c1 c2:restart c2 c2 d1 \
                            c1:restart redis:lose-lock r1 net:delay@gateway/apply:5s pg:commit-response-lost redis:restart r2 c1:fail@after_commit";

    #[test]
    fn crash_points_match_the_worker_role() {
        let mut runner = TestRunner::deterministic();
        for _ in 0..200 {
            let d = decision(&menu()).new_tree(&mut runner).unwrap().current();
            if let Decision::Crash {
                worker,
                at: Some(at),
            }
            | Decision::Fail { worker, at } = &d
            {
                assert!(menu().points_of(worker).contains(at), "{d}");
            }
        }
    }
}
