//! Scenario files: `scenarios/<group>/<name>.toml`, named `<group>/<name>`.
//!
//! ```toml
//! description = "two consumers get the same event in two real PG transactions"
//! workers = "p c1 c2 r1 d1"          # p producer, cN consumers, rN relays, dN downstream, ret retention
//! schedule = """
//! p:lock p:send c1:recv c2:recv ...
//! """
//! expect_trace = ["c2   claim"]     # substrings the trace must contain (key trace facts)
//!
//! [config]                           # the workload's handler policy; visibility_timeout_s
//! visibility_timeout_s = 30          # (every queue's, logical s) is the engine's
//!
//! [[events]]
//! name = "e1"
//! payment = "p1"
//! merchant = "mer1"
//! amount_minor = 12500
//! currency = "EUR"
//! ```
//! An exploration scenario has no `schedule` but an `[explore]` table (`decisions_max`):
//! its schedules are generated (see [`crate::explore`]).
//!
//! Errors name the file, the line and the field, and say what was expected.

mod file;
mod run;

pub use file::{discover, load, scenarios_dir, ExhaustiveSpec, ExploreSpec, Scenario};
pub(crate) use run::run_driven;
pub use run::{materialize, queues, run_scenario, Phases, ScenarioOutcome};

/// The system named `name` (`reference` or a mutant) of scenario `s`'s workload.
/// Errors: the workload has no such system; the message lists the ones it has.
pub fn system_of(s: &Scenario, name: &str) -> anyhow::Result<std::rc::Rc<dyn crate::sut::System>> {
    s.workload.system(name).ok_or_else(|| {
        let known: Vec<&str> = s.workload.systems().iter().map(|i| i.name).collect();
        anyhow::anyhow!("workload `{}` (scenario {}) has no system `{name}`; known: {}", s.workload.name(), s.name, known.join(", "))
    })
}
