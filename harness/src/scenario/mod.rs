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
//! [config]                           # crate::sut::SystemConfig; every field optional
//! visibility_timeout_s = 30
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

pub use file::{discover, load, scenarios_dir, EventSpec, ExhaustiveSpec, ExploreSpec, Scenario};
pub use run::{run_driven, run_scenario, ScenarioOutcome};
