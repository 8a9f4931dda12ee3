//! `crashpoint repro` judges another schedule than the scenario file's own by the invariants
//! alone: the file's `expect_trace` describes its own schedule. Real services, started once for
//! this test process through the harness and handed to the binary as the external provider.

use std::process::{Command, Output};

use crashpoint::testkit;

fn repro(args: &[&str]) -> Output {
    let e = testkit::endpoints();
    let dir = tempfile::tempdir().unwrap();
    Command::new(env!("CARGO_BIN_EXE_crashpoint"))
        .arg("repro")
        .args(args)
        .arg("--report-dir")
        .arg(dir.path())
        .env("DATABASE_URL", &e.database_url)
        .env("SQS_ENDPOINT_URL", &e.sqs_endpoint_url)
        .env("REDIS_URL", &e.redis_url)
        .env("CI", "true")
        .output()
        .unwrap()
}

#[test]
fn another_schedule_is_judged_by_the_invariants_alone() {
    // Not the file's schedule: the expected trace facts (a crash at after_commit) cannot appear.
    let out = repro(&["seed/crash-after-commit", "--schedule", "p:lock p:send c1:recv"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(!stdout.contains("expected trace fact missing"), "{stdout}");
    assert!(stdout.contains("PASS seed/crash-after-commit"), "{stdout}");
    // The file's own schedule (no --schedule) is still held to its expected trace facts.
    let out = repro(&["seed/crash-after-commit"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stdout));
}
