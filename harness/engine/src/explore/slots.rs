//! Parallel slots: K generated cases run at once, each slot on its own thread with its own
//! turmoil simulation, system instance and namespace (every schedule gets a fresh schema,
//! queues and key prefix), and the results are handed over in case order.
//!
//! Slots take case indices in increasing order from one counter. The consumer sees outcomes
//! strictly by index, so what it records, prints and stops at is what one slot would give:
//! the first failure in case order wins, whatever slot found it first, and cases after it that
//! ran anyway are dropped unseen.

use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Instant;

use anyhow::{anyhow, Result};
use proptest::strategy::{Strategy, ValueTree};

use super::board::{Board, Work};
use super::guide::{uniform_case, Guide};
use super::reorder::InOrder;
use super::{case_seed, first_divergence, menu, runner_for, Calls, Options};
use crate::scenario::{run_scenario, Scenario, ScenarioOutcome};
use crate::schedule::{schedules, Schedule};
use crate::services::Endpoints;
use crate::sim::cx::System;

/// One generated case, run.
pub(super) struct Ran {
    /// Index in the unsharded run, 0-based.
    pub index: u64,
    /// Its case seed.
    pub seed: u64,
    /// Whether its schedule is a mutation of earlier cases (a guided case made from a corpus
    /// that was not empty), which its seed alone does not give.
    pub mutation: bool,
    /// The schedule generated for it.
    pub schedule: Schedule,
    /// Its outcome.
    pub outcome: ScenarioOutcome,
    /// With `check_determinism`: the first trace line where a second run differed.
    pub divergence: Option<String>,
    /// When it failed on kept worker processes and their replay on fresh ones differed (two
    /// fresh runs agreeing): the schedule and how kept and fresh differed. Its outcome is the
    /// fresh one's.
    pub kept_differs: Option<String>,
    /// Its abstract coverage signal (`super::signal`), computed here once for the stats and
    /// a guided exploration's corpus.
    pub signal: std::collections::BTreeSet<String>,
}

impl Ran {
    fn stops(&self) -> bool {
        !self.outcome.passed() || self.divergence.is_some()
    }
}

/// What a slot hands its sink: the result of a case, or word that it waits for the feedback
/// of cases that other slots run (a sink that takes their results in takes them now).
enum Handed {
    Ran(u64, Box<Result<Ran>>),
    Waiting,
}

/// What the slots share: the next index to take, and the lowest index at which the run stops
/// (a failure or an error found there; later indices need not run).
struct Shared {
    next: AtomicU64,
    stop_at: AtomicU64,
    opts: Options,
    /// The call boundaries on the menu ([`super::call_boundaries`]).
    calls: Calls,
    /// The corpus of a guided exploration (`[explore] strategy = "guided"`).
    guide: Option<Guide>,
    started: Instant,
    /// Set once a schedule ran otherwise on kept worker processes than on fresh ones: the
    /// kept processes carry something that changes what they do, and every later schedule
    /// starts its processes afresh.
    fresh_only: std::sync::atomic::AtomicBool,
}

impl Shared {
    /// The next index this shard owns, or `None` when the budget is spent or the run stops.
    fn take(&self) -> Option<u64> {
        loop {
            // Once past, elapsed time stays past: every slot stops taking.
            if self.opts.time.is_some_and(|t| self.started.elapsed() >= t) {
                return None;
            }
            let i = self.next.fetch_add(1, Ordering::Relaxed);
            if self.opts.schedules.is_some_and(|n| i >= n) || i > self.stop_at.load(Ordering::Relaxed) {
                return None;
            }
            if self.opts.shard.owns(i) {
                return Some(i);
            }
        }
    }
}

/// One slot: runs the cases it takes until none is left, handing each result to `sink`
/// (which returns `false` when nobody listens any more), and calling it with
/// [`Handed::Waiting`] while a guided case waits for feedback.
fn slot(endpoints: &Endpoints, system: Rc<dyn System>, s: &Scenario, shared: &Shared, mut sink: impl FnMut(Handed) -> bool) {
    let menu = menu(s, &shared.calls);
    let strategy = schedules(&menu);
    let roles = s.workload.roles();
    while let Some(index) = shared.take() {
        // A guided case that is a mutation starts from the corpus as the cases before
        // `index - WINDOW` left it, with a case seed of its own; every other case is a uniform
        // case, with its seed and schedule.
        let (seed, feedback) = match (&shared.guide, uniform_case(index)) {
            (None, _) => (case_seed(shared.opts.seed, index), None),
            (Some(_), Some(u)) => (case_seed(shared.opts.seed, u), None),
            (Some(g), None) => (case_seed(!shared.opts.seed, index), Some(g)),
        };
        let parents = match feedback {
            Some(g) => match g.parents_for(index, &mut || {
                sink(Handed::Waiting);
            }) {
                Some(p) => p,
                None => return,
            },
            _ => Default::default(),
        };
        // A panic (in a workload's handler, say) is this case's error, handed over in case
        // order like any other, so that the run stops there rather than waiting for it.
        let mutation = !parents.corpus.is_empty();
        let ran = guarded(&format!("case {index} (case seed {seed})"), || {
            let mut runner = runner_for(seed);
            let schedule = match mutation {
                true => crate::schedule::mutate(&menu, &parents, &mut runner),
                false => strategy.new_tree(&mut runner).map_err(|e| anyhow!("{e}"))?.current(),
            };
            tracing::debug!(case = index, mutation, %schedule, "case schedule");
            // A schedule that ran otherwise on kept processes than on fresh ones: how, and
            // every later schedule starts fresh processes.
            let kept_fell_back = |differs: String| {
                shared.fresh_only.store(true, Ordering::Relaxed);
                format!("schedule `{schedule}`: {differs}")
            };
            // On the processes the namespace kept, where roles declare `reuse = true`; a
            // failure found on them is reported only as fresh processes replay it.
            let outcome = match shared.fresh_only.load(Ordering::Relaxed) {
                false => crate::sim::wire::keep::reusing(|| run_scenario(endpoints, system.clone(), s, Some(&schedule)))?,
                true => run_scenario(endpoints, system.clone(), s, Some(&schedule))?,
            };
            let (mut outcome, mut kept_differs) = match outcome.reused.is_empty() || outcome.passed() {
                true => (outcome, None),
                false => {
                    let fresh = run_scenario(endpoints, system.clone(), s, Some(&schedule))?;
                    match kept_against_fresh(&outcome, &fresh) {
                        None => (fresh, None),
                        // A kept process carries what a fresh one has not: its own state, and
                        // timers a schedule's end started (a client's reconnect backoff). Fresh
                        // processes decide, as long as they agree with each other.
                        Some(differs) => {
                            let again = run_scenario(endpoints, system.clone(), s, Some(&schedule))?;
                            if let Some(d) = fresh_differs(&fresh, &again) {
                                return Err(not_deterministic(&outcome, &differs, &d));
                            }
                            (fresh, Some(kept_fell_back(differs)))
                        }
                    }
                }
            };
            // The second run on fresh processes: it checks the reuse too.
            let divergence = match shared.opts.check_determinism {
                true => {
                    let again = run_scenario(endpoints, system.clone(), s, Some(&schedule))?;
                    match kept_against_fresh(&outcome, &again) {
                        // A run on kept processes that passed, against fresh ones: two runs of
                        // fresh processes judge determinism, and the fresh outcome stands.
                        Some(differs) => {
                            let third = run_scenario(endpoints, system.clone(), s, Some(&schedule))?;
                            kept_differs.get_or_insert(kept_fell_back(differs));
                            let d = first_divergence(&again.trace, &third.trace);
                            outcome = again;
                            d
                        }
                        None => first_divergence(&outcome.trace, &again.trace),
                    }
                }
                false => None,
            };
            let signal = super::signal::signal(&outcome.history, &roles);
            Ok(Ran { index, seed, mutation, schedule, outcome, divergence, signal, kept_differs })
        });
        if ran.as_ref().map_or(true, Ran::stops) {
            shared.stop_at.fetch_min(index, Ordering::Relaxed);
        }
        if !sink(Handed::Ran(index, Box::new(ran))) {
            return;
        }
    }
}

/// How `fresh`, a replay on fresh processes, differs from `reused`, a run on processes kept
/// from the schedule before: in the invariants it broke, else at the first trace line where
/// they part. `None` when they agree, or when `reused` took no kept process.
fn kept_against_fresh(reused: &ScenarioOutcome, fresh: &ScenarioOutcome) -> Option<String> {
    if reused.reused.is_empty() {
        return None;
    }
    differs(reused, fresh, "kept processes", "fresh ones")
}

/// How two runs of one schedule on fresh processes differ, as [`kept_against_fresh`] says it.
fn fresh_differs(first: &ScenarioOutcome, second: &ScenarioOutcome) -> Option<String> {
    differs(first, second, "a first run on fresh processes", "a second")
}

/// How runs `a` and `b` of one schedule differ: the invariants each broke, else the first
/// trace line where they part (`a_is`, `b_is` name them).
fn differs(a: &ScenarioOutcome, b: &ScenarioOutcome, a_is: &str, b_is: &str) -> Option<String> {
    let broken = |o: &ScenarioOutcome| -> Vec<String> {
        o.verdicts.iter().filter(|v| !v.holds).map(|v| v.invariant.clone()).chain(o.missing_trace_facts.iter().cloned()).collect()
    };
    match (broken(a), broken(b)) {
        (x, y) if x != y => Some(format!("broken on {a_is}: {x:?}; on {b_is}: {y:?}")),
        _ => first_divergence(&a.trace, &b.trace).map(|d| format!("the traces differ at {d} ({a_is} ≠ {b_is})")),
    }
}

/// The error of a schedule that ran differently on kept processes (`kept`: how) and then on
/// two runs of fresh ones (`fresh`: how): the run is not deterministic.
fn not_deterministic(reused: &ScenarioOutcome, kept: &str, fresh: &str) -> anyhow::Error {
    let roles: Vec<String> = reused.reused.iter().map(|r| format!("`{r}`")).collect();
    anyhow!(
        "schedule `{}` is not deterministic: on worker processes kept from the schedule before and on fresh ones, {kept}; \
         on two runs of fresh processes, {fresh}. Run it again with `crashpoint repro` a few times to see it, and with \
         `--check-determinism` after removing `reuse = true` from role {}",
        reused.schedule,
        roles.join(", ")
    )
}

/// Puts results back in case order and hands them to the consumer.
struct Consumer<'a, F> {
    order: InOrder<Result<Ran>>,
    done: Option<Result<()>>,
    shared: &'a Shared,
    each: F,
}

impl<F: FnMut(Ran) -> Result<bool>> Consumer<'_, F> {
    /// Takes the result of case `index`; returns `false` once the consumer is done.
    fn feed(&mut self, index: u64, ran: Result<Ran>) -> bool {
        let shard = &self.shared.opts.shard;
        for (index, ran) in self.order.put(index, ran, |i| !shard.owns(i)) {
            if self.done.is_some() {
                break;
            }
            if let (Some(g), Ok(r)) = (&self.shared.guide, &ran) {
                g.take_in(index, &r.schedule, &r.signal);
            }
            match ran.and_then(&mut self.each) {
                Ok(true) => {}
                Ok(false) => self.done = Some(Ok(())),
                Err(e) => self.done = Some(Err(e)),
            }
            if self.done.is_some() {
                // Later cases need not run; those running finish and are dropped.
                self.shared.stop_at.fetch_min(index, Ordering::Relaxed);
            }
        }
        if let Some(g) = &self.shared.guide {
            g.taken_up_to(self.order.next());
            if self.done.is_some() {
                g.stop();
            }
        }
        self.done.is_none()
    }
}

/// Runs the generated cases of `s` within `opts`' budget on `opts.jobs` slots (at least one),
/// and calls `each` with every result in case order until it returns `false` (a failure to
/// stop at) or an error comes up. Each slot instantiates the system of `system`'s name from
/// the scenario's workload; a system that is not the workload's own, and a scenario with
/// external worker processes (whose step timeouts assume an unloaded machine), run on one
/// slot, in this thread ([`parallel_ok`]). When the others may run in parallel and
/// `opts.jobs` is 1 (inside [`super::explore_each`]), the cases are also offered to `board`'s
/// idle threads, each of which runs them as one more slot. Errors: a service failure of a
/// case, in case order.
// Each argument is a different input of the exploration, as `explore` and `explore_each`
// hand them over; a struct would only repack them once more.
#[allow(clippy::too_many_arguments)]
pub(super) fn run_cases<'e>(
    endpoints: &'e Endpoints,
    system: &Rc<dyn System>,
    s: &'e Scenario,
    opts: &Options,
    calls: &Calls,
    started: Instant,
    board: Option<&Board<'e>>,
    each: impl FnMut(Ran) -> Result<bool>,
) -> Result<()> {
    let guided = s.explore.as_ref().is_some_and(|e| e.strategy == crate::scenario::Strategy::Guided);
    let guide = guided.then(Guide::default);
    let shared = Arc::new(Shared { next: AtomicU64::new(0), stop_at: AtomicU64::new(u64::MAX), opts: opts.clone(), calls: calls.clone(), guide, started, fresh_only: Default::default() });
    let mut order = Consumer { order: InOrder::new(), done: None, shared: &shared, each };
    let name = system.name().to_string();
    let parallel = parallel_ok(system.as_ref(), s);
    match (parallel, opts.jobs <= 1, board) {
        (true, true, Some(board)) => helped(endpoints, system, s, &shared, board, &mut order),
        (true, false, _) => {
            let (tx, rx) = mpsc::channel();
            std::thread::scope(|scope| {
                for k in 0..opts.jobs {
                    let (tx, shared, name) = (tx.clone(), &shared, name.clone());
                    std::thread::Builder::new()
                        .name(format!("slot-{k}"))
                        .spawn_scoped(scope, move || sending_slot(endpoints, s, &name, shared, &tx))
                        .expect("spawning a slot thread");
                }
                drop(tx);
                rx.into_iter().for_each(|(index, ran)| {
                    order.feed(index, ran);
                });
            });
        }
        // One slot: every case before a guided case's horizon has been taken in; it never waits.
        _ => slot(endpoints, system.clone(), s, &shared, |h| match h {
            Handed::Ran(i, r) => order.feed(i, *r),
            Handed::Waiting => true,
        }),
    }
    order.done.unwrap_or(Ok(()))
}

/// A slot of its own for a thread: a new instance of the system `name` runs the cases it
/// takes from `shared` and sends each result to `tx`. Returns the number of cases it ran.
fn sending_slot(endpoints: &Endpoints, s: &Scenario, name: &str, shared: &Shared, tx: &mpsc::Sender<(u64, Result<Ran>)>) -> usize {
    let system = instance(s, name).expect("parallel_ok checked that the workload has the system");
    let mut ran = 0;
    slot(endpoints, system, s, shared, |h| match h {
        Handed::Ran(i, r) => {
            ran += 1;
            tx.send((i, *r)).is_ok()
        }
        // The consumer, on another thread, takes the results in.
        Handed::Waiting => true,
    });
    ran
}

/// Runs the cases on this thread while offering them to `board`'s idle threads, each of which
/// runs them as one more slot (see [`super::board`]), and feeds every result to `order`, in
/// case order. Returns once no thread runs a case any more, also when the consumer panics
/// (the panic then goes on, after the cases running elsewhere have ended): no helper
/// outlives the exploration. A helper that ran cases says so in a debug log line.
fn helped<'e, F: FnMut(Ran) -> Result<bool>>(
    endpoints: &'e Endpoints,
    system: &Rc<dyn System>,
    s: &'e Scenario,
    shared: &Arc<Shared>,
    board: &Board<'e>,
    order: &mut Consumer<'_, F>,
) {
    let (tx, rx) = mpsc::channel();
    let work: Work<'e> = {
        let (shared, name) = (shared.clone(), system.name().to_string());
        Arc::new(move || {
            let cases = sending_slot(endpoints, s, &name, &shared, &tx);
            if cases > 0 {
                tracing::debug!(system = %name, scenario = %s.name, cases, "an idle slot helped an exploration");
            }
        })
    };
    let ticket = board.offer(work);
    let fed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // While a guided case of this slot waits for feedback, the helpers' results are taken
        // in here: nobody else takes them.
        slot(endpoints, system.clone(), s, shared, |h| {
            let more = match h {
                Handed::Ran(i, r) => order.feed(i, *r),
                Handed::Waiting => true,
            };
            while let Ok((i, r)) = rx.try_recv() {
                order.feed(i, r);
            }
            more
        });
        // No thread starts helping now (the board held the only other sender); those helping
        // finish their case, find nothing left to take, and drop their copy of the work.
        board.withdraw(ticket);
        for (index, ran) in rx.iter() {
            order.feed(index, ran);
        }
    }));
    if let Err(panic) = fed {
        // Nobody takes another case; the results of those running are dropped.
        board.withdraw(ticket);
        shared.stop_at.fetch_min(0, Ordering::Relaxed);
        rx.iter().for_each(drop);
        std::panic::resume_unwind(panic)
    }
}

/// Whether schedules of `system` on scenario `s` may run on several threads at once, each
/// with its own instance of the system: only when the scenario's workload can instantiate it
/// by name (a system from elsewhere cannot be copied), and without external worker processes
/// (their step timeouts assume an unloaded machine).
pub(super) fn parallel_ok(system: &dyn System, s: &Scenario) -> bool {
    s.workload.system(system.name()).is_some() && s.external.is_empty()
}

/// A new instance of the scenario's workload's system `name`, for a thread of its own.
/// Errors: `name` is not one of the workload's systems.
pub(super) fn instance(s: &Scenario, name: &str) -> Result<Rc<dyn System>> {
    s.workload.system(name).ok_or_else(|| anyhow!("system `{name}` is not one of workload `{}`", s.workload.name()))
}

/// Runs `f`, a panic in it (in a workload's handler, say) becoming an error that names `what`.
pub(super) fn guarded<T>(what: &str, f: impl FnOnce() -> Result<T>) -> Result<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_else(|p| Err(anyhow!("{what} panicked: {}", crate::error::panic_text(&*p))))
}

/// The number of slots a machine can feed: two per core, since a slot waits on the services
/// about half of its time (measured with `crashpoint bench --jobs 1..4` on 2 cores: 4.5, 5.9,
/// 6.2 and 6.8 schedules/s).
pub fn default_jobs() -> usize {
    2 * std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
}
