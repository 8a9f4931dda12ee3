//! Scenario files are checked against their workload's vocabulary when they load: errors name
//! the file, the line and the field, and say what was expected. No services are needed.

use std::path::{Path, PathBuf};

use crashpoint::scenario::load;

mod common;

fn write(dir: &Path, name: &str, body: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, body).unwrap();
    p
}

const GOOD: &str = "description = \"d\"\nworkers = \"p c1\"\nschedule = \"\"\"\np:lock\n  c1:crash@lunch\n\"\"\"\n[[events]]\nname = \"e1\"\npayment = \"p1\"\n";

fn error(dir: &Path, name: &str, body: &str) -> String {
    let p = write(dir, name, body);
    format!("{:#}", load(dir, &p, &common::registry()).unwrap_err())
}

#[test]
fn schedule_errors_name_file_line_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let e = error(dir.path(), "bad.toml", GOOD);
    assert!(e.contains("bad.toml:5: field `schedule`"), "{e}");
    assert!(e.contains("unknown crash point `lunch`"), "{e}");
}

#[test]
fn unknown_fields_and_workers_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let e = error(dir.path(), "w.toml", &GOOD.replace("p c1", "p x1").replace("crash@lunch", "crash@after_claim"));
    assert!(e.contains("w.toml:2: field `workers`: `x1`"), "{e}");
    assert!(e.contains("c (payout consumer)"), "the known prefixes are listed: {e}");
    let e = error(dir.path(), "u.toml", &format!("colour = 1\n{}", GOOD.replace("crash@lunch", "crash@after_claim")));
    assert!(e.contains("u.toml") && e.contains("line 1") && e.contains("colour"), "{e}");
}

#[test]
fn the_workload_checks_its_own_fields() {
    let dir = tempfile::tempdir().unwrap();
    let good = GOOD.replace("crash@lunch", "crash@after_claim");
    let e = error(dir.path(), "wl.toml", &format!("workload = \"ledger\"\n{good}"));
    assert!(
        e.contains("wl.toml:1: field `workload`: unknown workload `ledger`; expected one of payout, counter"),
        "{e}"
    );
    let e = error(dir.path(), "ev.toml", &good.replace("payment = \"p1\"", "paymnt = \"p1\""));
    assert!(e.contains("ev.toml: field `events`: events[0] (e1)") && e.contains("paymnt"), "{e}");
    let e = error(dir.path(), "cf.toml", &format!("{good}[config]\nmax_retriez = 2\n"));
    assert!(e.contains("cf.toml") && e.contains("field `config`") && e.contains("max_retriez"), "{e}");
    let e = error(dir.path(), "vt.toml", &format!("{good}[config]\nvisibility_timeout_s = \"soon\"\n"));
    assert!(e.contains("field `config.visibility_timeout_s`: expected a positive number of seconds"), "{e}");
}

#[test]
fn a_counter_scenario_rejects_payout_names() {
    let dir = tempfile::tempdir().unwrap();
    let counter = |schedule: &str| {
        format!("workload = \"counter\"\ndescription = \"d\"\nworkers = \"p c1\"\nschedule = \"{schedule}\"\n[[events]]\nname = \"e1\"\ncustomer = \"cu1\"\n")
    };
    assert!(load(
        dir.path(),
        &write(dir.path(), "ok.toml", &counter("p c1:crash@between_handlers")),
        &common::registry()
    )
    .is_ok());
    let e = error(dir.path(), "c.toml", &counter("p c1:crash@relay_after_send"));
    assert!(
        e.contains("c.toml:4: field `schedule`")
            && e.contains("unknown crash point `relay_after_send`; expected one of after_send, after_receive"),
        "{e}"
    );
    let e = error(dir.path(), "r.toml", &counter("p replay"));
    assert!(e.contains("`replay`: expected a worker or a fault (p, c1)"), "{e}");
    let e = error(dir.path(), "w.toml", &counter("p").replace("p c1", "p c1 r1"));
    assert!(e.contains("`r1` is not a worker name of workload `counter`"), "{e}");
}

#[test]
fn every_scenario_of_the_repository_loads() {
    let all = crashpoint::scenario::discover(&crashpoint::scenario::scenarios_dir(), &common::registry()).unwrap();
    let workloads: std::collections::BTreeSet<&str> = all.iter().map(|s| s.workload.name()).collect();
    assert_eq!(workloads.into_iter().collect::<Vec<_>>(), ["counter", "orders", "payout"]);
    assert!(all.iter().any(|s| s.name == "counter/explore" && s.explore.is_some()));
    assert!(all.iter().any(|s| s.name == "orders/explore" && s.explore.is_some()));
}
