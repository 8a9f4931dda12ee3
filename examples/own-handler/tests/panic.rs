//! A panic inside the team's handler (an `unwrap` on a missing template, say) ends the
//! schedule with a harness error that carries the panic's message: never a pass, and never a
//! test process torn down with the services' schemas and queues left behind (issue 16 §3).
//!
//! Services: started through the harness on first use, or taken from DATABASE_URL,
//! SQS_ENDPOINT_URL and REDIS_URL when all three are set.

use std::borrow::Cow;
use std::path::Path;
use std::rc::Rc;
use std::sync::Arc;

use async_trait::async_trait;
use crashpoint::testkit::Schedule;
use crashpoint::testkit::{explore, ExploreOptions as Options};
use crashpoint::testkit::{run_scenario, Scenario};
use crashpoint::{testkit, Handler, Program, Registry, System, Workload};
use crashpoint::{CallError, Cx, Delivery};
use crashpoint_example_own_handler::OwnHandler;

const MESSAGE: &str = "template store unreachable";

/// A handler that panics on every delivery.
struct Panics;

#[async_trait(?Send)]
impl Handler for Panics {
    async fn on_delivery(&self, _cx: &mut Cx, d: Delivery) -> Result<(), CallError> {
        panic!("{MESSAGE} (delivery of {} bytes)", d.body.len());
    }
}

/// The reference's schema and producer, with [`Panics`] as its handler.
struct PanickingSystem(Rc<dyn System>);

impl System for PanickingSystem {
    fn name(&self) -> &str {
        "panicking"
    }
    fn schema_sql(&self) -> Cow<'_, str> {
        self.0.schema_sql()
    }
    fn program(&self, role: &str) -> Option<Program> {
        match role {
            "c" => Some(Program::Handler(Rc::new(Panics))),
            _ => self.0.program(role),
        }
    }
}

fn scenario() -> Scenario {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios");
    testkit::scenario_in(&dir, &Registry::new(vec![Arc::new(OwnHandler)]), "own-handler/explore")
}

fn panicking() -> Rc<dyn System> {
    Rc::new(PanickingSystem(OwnHandler.system("reference").unwrap()))
}

#[test]
fn a_panic_in_the_handler_is_a_harness_error_with_its_message_never_a_pass() {
    let (endpoints, s) = (testkit::endpoints(), scenario());
    // One schedule: the drain dispatches the requests and runs the handlers, which panic.
    let err = run_scenario(&endpoints, panicking(), &s, Some(&Schedule::default()))
        .map(|o| o.trace)
        .expect_err("a schedule whose handler panics returned an outcome");
    let text = format!("{err:#}");
    assert!(
        text.contains("panicked") && text.contains(MESSAGE),
        "the error does not carry the panic's message: {text}"
    );
    assert!(text.contains("worker c"), "the error does not name the worker: {text}");

    // Exploring: the first generated schedule that delivers a message ends the run with the
    // same error, not with a failure to shrink and not with a pass.
    let opts = Options { schedules: Some(5), seed: 0, ..Options::default() };
    let err =
        explore(&endpoints, panicking(), &s, &opts, |_| {}).map(|r| r.stats.schedules).expect_err("explore passed");
    let text = format!("{err:#}");
    assert!(text.contains("panicked") && text.contains(MESSAGE), "{text}");

    // The panicking schedules were torn down like any other: the reference still passes on
    // the same services, in namespaces the pool handed back.
    let report = explore(&endpoints, OwnHandler.system("reference").unwrap(), &s, &opts, |_| {}).unwrap();
    assert!(
        report.failure.is_none(),
        "the reference failed after the panics: {:?}",
        report.failure.map(|f| f.minimal.verdicts)
    );
    assert_eq!(report.stats.schedules, 5);
}
