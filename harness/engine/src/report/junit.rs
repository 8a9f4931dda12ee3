//! `junit.xml`, written with `quick-junit`: one test suite for the run, one test case per
//! scenario and system. A failure's message names the violated invariant and the command that
//! reproduces it; its body holds the minimal schedule's trace.

use std::time::Duration;

use quick_junit::{NonSuccessKind, Property, Report, TestCase, TestCaseStatus, TestSuite};

use super::model::{Outcome, RunReport};

/// Renders `run` as JUnit XML. Errors: serialization (not expected for valid UTF-8).
pub fn render(run: &RunReport) -> anyhow::Result<String> {
    let mut report = Report::new("crashpoint");
    let mut suite = TestSuite::new(format!("crashpoint {}", run.command));
    suite.add_property(Property::new("seed", run.seed.to_string()));
    suite.add_property(Property::new("shard", format!("{}/{}", run.shard.index, run.shard.count)));
    if let Some(n) = run.budget.schedules {
        suite.add_property(Property::new("budget_schedules", n.to_string()));
    }
    if let Some(s) = run.budget.seconds {
        suite.add_property(Property::new("budget_seconds", s.to_string()));
    }
    for s in &run.scenarios {
        let status = match (&s.failure, s.verdict) {
            (_, v) if v == s.expected && v == Outcome::Fail => {
                let mut st = TestCaseStatus::success();
                st.set_message("a known-bad system, caught as expected");
                st
            }
            (None, Outcome::Pass) if s.expected == Outcome::Fail => {
                let mut st = TestCaseStatus::non_success(NonSuccessKind::Failure);
                st.set_message("a known-bad system passed: the harness did not catch it within the budget");
                st.set_type("mutant not caught");
                st
            }
            (Some(f), Outcome::Fail) => {
                let mut st = TestCaseStatus::non_success(NonSuccessKind::Failure);
                let first = f.repro.first().cloned().unwrap_or_default();
                st.set_message(format!("{} — reproduce: {first}", f.violated.join("; ")));
                st.set_type("invariant violated");
                let mut body = format!("minimal schedule: {}\n", f.schedule);
                if let Some(b) = &f.breaking_step {
                    body.push_str(&format!("breaks at: {}\n", b.trim()));
                }
                for r in &f.repro {
                    body.push_str(&format!("reproduce: {r}\n"));
                }
                body.push_str("trace:\n");
                body.push_str(&f.trace);
                st.set_description(body);
                st
            }
            (_, Outcome::Fail) => {
                let mut st = TestCaseStatus::non_success(NonSuccessKind::Failure);
                st.set_message("failed");
                st
            }
            _ => TestCaseStatus::success(),
        };
        let mut tc = TestCase::new(format!("{} ({})", s.name, s.system), status);
        tc.set_classname(s.name.split('/').next().unwrap_or(&s.name).to_string());
        tc.set_time(Duration::from_secs_f64(s.wall_s));
        tc.add_property(Property::new("schedules", s.schedules.to_string()));
        for c in &s.caveats {
            tc.add_property(Property::new("caveat", c.clone()));
        }
        suite.add_test_case(tc);
    }
    if let Some(e) = &run.error {
        let mut st = TestCaseStatus::non_success(NonSuccessKind::Error);
        st.set_message(e.clone());
        st.set_type("harness or services error");
        suite.add_test_case(TestCase::new("crashpoint harness", st));
    }
    suite.set_time(Duration::from_secs_f64(run.wall_s));
    report.add_test_suite(suite);
    Ok(report.to_string()?)
}
