//! External workers: the payout article's consumer as a real Python process (examples/python-worker),
//! gated at the wire by crashpoint's PostgreSQL, SQS and Redis proxies and crashed with SIGKILL,
//! under the same schedules and invariants as the in-process consumer.

use std::time::{Duration, Instant};

use crashpoint::explore::{self, Options};
use crashpoint::testkit;
mod common;

fn opts(schedules: u64, seed: u64) -> Options {
    Options {
        schedules: Some(schedules),
        time: None,
        seed,
        check_determinism: false,
        shard: Default::default(),
        jobs: 1,
    }
}

#[test]
fn scripted_windows_pass_on_the_python_worker_and_repeat_byte_for_byte() {
    common::passes_twice_identically(&[
        "python/concurrent-same-event",
        "python/crash-after-commit",
        "python/lock-expiry",
        "python/commit-applied",
        "python/commit-response-lost",
        "python/connection-reset",
    ]);
}

#[test]
#[ignore = "full tier: 100 schedules of Python worker processes; `cargo test -- --include-ignored` runs it"]
fn the_correct_python_worker_passes_100_explored_schedules() {
    let s = common::scenario("python/explore");
    let report =
        explore::explore(&testkit::endpoints(), common::payout("reference"), &s, &opts(100, 20261130), |_| {}).unwrap();
    if let Some(f) = &report.failure {
        panic!("the reference Python worker failed: {}\n{}", f.minimal.schedule, f.minimal.trace);
    }
    assert_eq!(report.stats.schedules, 100);
}

/// Each Python variant is caught on the invariant that catches the in-tree Rust mutant of the
/// same name (harness/cli/tests/catalogue.rs), shrunk to at most 4 decisions. (Seed 7's first
/// failure of `ack-before-commit` shrinks to `c2:fail@after_claim p c2:crash@after_delete p`, a
/// local minimum: without its first decision c2's message is one whose payment c1 pays, and
/// nothing is lost; `c1:crash@after_delete` alone fails too.)
#[test]
fn python_variants_are_caught_like_the_in_tree_mutants_within_4_decisions() {
    let s = common::scenario("python/explore");
    for (variant, invariant) in
        [("check-then-insert", "exactly one payout per payment"), ("ack-before-commit", "nothing lost")]
    {
        let report =
            explore::explore(&testkit::endpoints(), common::payout(variant), &s, &opts(100, 7), |_| {}).unwrap();
        let f = report.failure.unwrap_or_else(|| panic!("{variant} was not caught in 100 schedules"));
        assert!(f.minimal.schedule.decisions.len() <= 4, "{variant}: shrunk only to {}", f.minimal.schedule);
        let violated: Vec<&str> =
            f.minimal.verdicts.iter().filter(|v| !v.holds).map(|v| v.invariant.as_str()).collect();
        assert!(
            violated.iter().any(|v| v.starts_with(invariant)),
            "{variant} violated {violated:?}, expected `{invariant}`"
        );
    }
}

/// A scenario directory of its own, with one scenario whose `[external.c]` table is `external`.
fn scenario_dir(external: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let group = dir.path().join("scenarios/python");
    std::fs::create_dir_all(&group).unwrap();
    let text = format!(
        "description = \"an external worker under test\"\nworkers = \"p c1\"\nschedule = \"p:lock p:send\"\n\n\
         [external.c]\n{external}\n\n[config]\nvisibility_timeout_s = 30\n\n[[events]]\nname = \"e1\"\npayment = \"p1\"\n"
    );
    std::fs::write(group.join("bad.toml"), text).unwrap();
    dir
}

fn repo() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

#[test]
fn a_worker_that_hangs_fails_the_run_with_exit_2_within_its_step_timeout_naming_it() {
    let dir = scenario_dir("command = [\"sleep\", \"600\"]\nstep_timeout_s = 2");
    let started = Instant::now();
    let out = run_in(&dir);
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(text.contains("c1") && text.contains("made no progress for 2 s"), "{text}");
    assert!(started.elapsed() < Duration::from_secs(30), "took {:?}", started.elapsed());
}

/// `crashpoint run python/bad` on this process's services, with `dir`'s scenarios.
fn run_in(dir: &tempfile::TempDir) -> std::process::Output {
    run_in_with(dir, |_| {})
}

/// [`run_in`] with the command changed by `adjust` first.
fn run_in_with(dir: &tempfile::TempDir, adjust: impl FnOnce(&mut std::process::Command)) -> std::process::Output {
    let mut c = common::crashpoint_on_test_services();
    c.args(["run", "python/bad", "--no-calibrate"])
        .env("CRASHPOINT_SCENARIOS", dir.path().join("scenarios"))
        .current_dir(dir.path());
    adjust(&mut c);
    c.output().unwrap()
}

#[test]
fn a_worker_pointed_straight_at_localstack_is_reported_as_bypassing_the_proxy_with_exit_2() {
    let root = repo();
    let e = testkit::endpoints();
    let ext = format!(
        "command = [\"{py}\", \"{worker}\"]\nsetup = [\"bash\", \"{setup}\"]\nenv = {{ AWS_ENDPOINT_URL_SQS = \"{sqs}\" }}",
        py = root.join("target/python-venv/bin/python").display(),
        worker = root.join("examples/python-worker/worker.py").display(),
        setup = root.join("examples/python-worker/setup.sh").display(),
        sqs = e.sqs_endpoint_url,
    );
    let dir = scenario_dir(&ext);
    // One SQS endpoint, so that the worker's is the one that holds the run's queues.
    let out = run_in_with(&dir, |c| {
        c.env_remove(crashpoint::services::external::SQS_SHARDS_VAR);
    });
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(text.contains("worker bypassed the proxy"), "{text}");
}

#[test]
fn a_worker_that_requires_tls_gets_a_clear_error_naming_sslmode_with_exit_2() {
    let root = repo();
    let connect =
        "import os, psycopg; psycopg.connect(os.environ['DATABASE_URL'].replace('sslmode=disable', 'sslmode=require'))";
    let ext = format!(
        "command = [\"{py}\", \"-c\", \"{connect}\"]\nsetup = [\"bash\", \"{setup}\"]",
        py = root.join("target/python-venv/bin/python").display(),
        setup = root.join("examples/python-worker/setup.sh").display(),
    );
    let dir = scenario_dir(&ext);
    let out = run_in(&dir);
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(text.contains("sslmode") && text.contains("c1"), "{text}");
}
