//! Scenario files: `scenarios/<group>/<name>.toml`, named `<group>/<name>`.
//!
//! ```toml
//! workload = "payout"                # optional: else the workload named like the group, else the default
//! description = "two consumers get the same event in two real PG transactions"
//! workers = "p c1 c2 r1 d1"          # names of the workload's roles: <prefix> or <prefix><n>
//! schedule = """
//! p:lock p:send c1:recv c2:recv ...
//! """
//! expect_trace = ["c2   claim"]     # substrings the trace must contain (key trace facts)
//!
//! [config]                           # the workload's handler policy; visibility_timeout_s
//! visibility_timeout_s = 30          # (every queue's, logical s) and fifo_queues (queues
//! fifo_queues = ["payments"]         # made FIFO: `crate::sim::fifo`) and dead_letter (a
//! dead_letter = { queue = "payments", max_receive_count = 2 }   # DLQ: `dead_letter`) are the engine's
//!
//! [[events]]                         # `name` is the engine's; the rest is the workload's
//! name = "e1"
//! payment = "p1"
//!
//! [[invariants]]                     # optional SQL invariants: a query returning violating rows
//! name = "at most one email per operation id"
//! sql = "SELECT operation_id FROM outgoing_email GROUP BY 1 HAVING count(*) > 1"
//! ```
//! An exploration scenario has no `schedule` but an `[explore]` table (`decisions_max`):
//! its schedules are generated (see [`crate::explore`]).
//!
//! Errors name the file, the line and the field, and say what was expected.

mod dead_letter;
pub(crate) mod file;
#[cfg(test)]
mod load_fuzz;
mod run;

pub use file::{discover, is_workload_file, scenarios_dir, InvariantSpec, Scenario, Strategy, WORKLOAD_FILE_SUFFIX};
#[cfg(any(test, feature = "internals"))]
pub use file::load;
pub(crate) use run::run_driven;
pub use run::{queues, run_scenario, Phases, ScenarioOutcome};

/// The system named `name` (`reference` or a mutant) of scenario `s`'s workload.
/// Errors: the workload has no such system; the message lists the ones it has.
///
/// With external workers (`[external.<role>]`), `name` must also be `reference` or one of the
/// variants each external worker declares in `systems`.
pub fn system_of(s: &Scenario, name: &str) -> anyhow::Result<std::rc::Rc<dyn crate::sim::cx::System>> {
    let system = s.workload.system(name).ok_or_else(|| {
        let known: Vec<&str> = s.workload.systems().iter().map(|i| i.name).collect();
        anyhow::anyhow!("workload `{}` (scenario {}) has no system `{name}`; known: {}", s.workload.name(), s.name, known.join(", "))
    })?;
    for ext in &s.external {
        if name != "reference" && !ext.systems.iter().any(|v| v == name) {
            anyhow::bail!(
                "the external worker of role `{}` (scenario {}) has no variant `{name}`; it has: reference{}",
                ext.role,
                s.name,
                ext.systems.iter().map(|v| format!(", {v}")).collect::<String>()
            );
        }
    }
    Ok(system)
}
