//! Shared services for integration tests: started once per test process through the harness
//! (the native provider here, or whatever `crate::services::choose` picks), and stopped when
//! the process exits (an `atexit` hook) or on SIGINT/SIGTERM.

//!
//! A team's tests need only this module and the crate root: [`endpoints`] for the services,
//! [`scenario_in`] for a scenario of its own `scenarios/` directory, then [`explore`] (generated
//! schedules, shrinking) or [`run_scenario`] (one scripted [`Schedule`]).

use std::sync::{Mutex, OnceLock};

use crate::services::{ServiceOptions, Services};

pub use crate::explore::{explore, Failure, Options as ExploreOptions, Report as ExploreReport};
pub use crate::scenario::{run_scenario, Scenario, ScenarioOutcome};
pub use crate::schedule::Schedule;
pub use crate::services::Endpoints;

static SERVICES: Mutex<Option<Services>> = Mutex::new(None);

extern "C" fn stop_at_exit() {
    // Services the harness did not start (given by environment) keep running: drop the
    // namespaces the tests pooled on them. A failure here must not abort the exit. Without
    // a subscriber: a test's (tracing-test's, at every level) would print the cleanup's SDK
    // traces after the test results.
    let quiet = || {
        tracing::subscriber::with_default(tracing::subscriber::NoSubscriber::default(), crate::namespace::pool::release)
    };
    let _ = std::panic::catch_unwind(quiet);
    let taken = SERVICES.lock().map(|mut s| s.take()).unwrap_or(None);
    drop(taken);
    crate::sim::wire::process::remove_logs_dir();
    crate::services::native::process::cleanup_all();
}

/// The endpoints of this process's shared services, starting them on first use.
/// Panics (failing the test) when they cannot start, with the reason.
pub fn endpoints() -> Endpoints {
    static ENDPOINTS: OnceLock<Result<Endpoints, String>> = OnceLock::new();
    ENDPOINTS
        .get_or_init(|| {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .map_err(|e| e.to_string())?;
            let services = rt.block_on(Services::start(&ServiceOptions::default())).map_err(|e| format!("{e:#}"))?;
            let endpoints = services.endpoints.clone();
            *SERVICES.lock().unwrap() = Some(services);
            // The runtime must outlive nothing: the native services are plain processes.
            std::mem::forget(rt);
            unsafe {
                libc::atexit(stop_at_exit);
            }
            Ok(endpoints)
        })
        .clone()
        .unwrap_or_else(|e| panic!("cannot start the services for the tests: {e}"))
}

/// The scenario named `name` from the scenarios directory, for the workloads of `registry`.
/// Panics when it is missing or a file does not load.
pub fn scenario(registry: &crate::workload::Registry, name: &str) -> crate::scenario::Scenario {
    scenario_in(&crate::scenario::scenarios_dir(), registry, name)
}

/// The scenario named `name` (`<group>/<file stem>`) under `dir`, for the workloads of
/// `registry` (a team's crate keeps its own scenarios directory). Panics when it is missing or
/// a file does not load.
pub fn scenario_in(
    dir: &std::path::Path,
    registry: &crate::workload::Registry,
    name: &str,
) -> crate::scenario::Scenario {
    crate::scenario::discover(dir, registry)
        .unwrap_or_else(|e| panic!("scenarios load: {e:#}"))
        .into_iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("no scenario {name}"))
}
