//! `crashpoint repro` judges another schedule than the scenario file's own by the invariants
//! alone: the file's `expect_trace` describes its own schedule. Real services, started once for
//! this test process through the harness and handed to the binary as the external provider.

use std::process::Output;

mod common;

fn repro(args: &[&str]) -> Output {
    let dir = tempfile::tempdir().unwrap();
    common::crashpoint_on_test_services().arg("repro").args(args).arg("--report-dir").arg(dir.path()).output().unwrap()
}

#[test]
fn another_schedule_is_judged_by_the_invariants_alone() {
    // Not the file's schedule: the expected trace facts (a crash at after_commit) cannot appear.
    let out = repro(&["windows/crash-after-commit", "--schedule", "p:lock p:send c1:recv"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(!stdout.contains("expected trace fact missing"), "{stdout}");
    assert!(stdout.contains("PASS windows/crash-after-commit"), "{stdout}");
    // The file's own schedule (no --schedule) is still held to its expected trace facts.
    let out = repro(&["windows/crash-after-commit"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stdout));
}
