//! The `crashpoint` binary as a user runs it: doctor, up/down, Ctrl-C in the middle of a run,
//! a missing binary, and the containers provider (skipped with its reason without Docker).

use std::collections::BTreeSet;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_crashpoint");

/// A command with no external-provider variables, so that the native provider is chosen.
fn crashpoint() -> Command {
    let mut c = Command::new(BIN);
    for k in ["DATABASE_URL", "SQS_ENDPOINT_URL", "REDIS_URL", "DOCKER_HOST"] {
        c.env_remove(k);
    }
    c
}

fn text(o: &Output) -> (String, String) {
    (String::from_utf8_lossy(&o.stdout).into_owned(), String::from_utf8_lossy(&o.stderr).into_owned())
}

fn alive(pid: i32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
        && !std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default().contains(") Z ")
}

/// Pids (and command lines) of the processes whose parent is `parent`.
fn children(parent: u32) -> Vec<(i32, String)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else { continue };
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let ppid = stat.rsplit(')').next().and_then(|r| r.split_whitespace().nth(1)).and_then(|p| p.parse::<u32>().ok());
        if ppid == Some(parent) {
            let cmd = std::fs::read_to_string(format!("/proc/{pid}/cmdline")).unwrap_or_default().replace('\0', " ");
            out.push((pid, cmd));
        }
    }
    out
}

#[test]
fn doctor_reports_three_services_with_latencies() {
    let o = crashpoint().arg("doctor").output().unwrap();
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(0), "stdout:\n{out}\nstderr:\n{err}");
    assert!(out.contains("provider: native"), "{out}");
    for svc in ["postgres", "sqs", "redis"] {
        let line = out.lines().find(|l| l.trim_start().starts_with(svc) && l.contains("µs"));
        assert!(line.is_some(), "no latency line for {svc}:\n{out}");
    }
    assert!(out.contains("all three services reachable"), "{out}");
}

#[test]
fn doctor_without_redis_server_exits_2_naming_the_package() {
    let empty = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let o = crashpoint().arg("doctor").env("PATH", empty.path()).output().unwrap();
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(2), "stdout:\n{out}\nstderr:\n{err}");
    assert!(err.contains("`redis-server` was not found"), "{err}");
    assert!(err.contains("apt-get install redis-server"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(30), "took {:?}", started.elapsed());
}

#[test]
fn up_then_down_leaves_no_process_behind() {
    let state = tempfile::tempdir().unwrap();
    let state_file = state.path().join("up.json");
    let up = crashpoint().arg("up").env("CRASHPOINT_STATE_FILE", &state_file).output().unwrap();
    let (out, err) = text(&up);
    assert_eq!(up.status.code(), Some(0), "stdout:\n{out}\nstderr:\n{err}");
    for k in ["DATABASE_URL=", "SQS_ENDPOINT_URL=", "REDIS_URL="] {
        assert!(out.contains(k), "{out}");
    }
    let saved: serde_json::Value = serde_json::from_slice(&std::fs::read(&state_file).unwrap()).unwrap();
    let pids: Vec<i32> = saved["pids"].as_array().unwrap().iter().map(|p| p[1].as_i64().unwrap() as i32).collect();
    let dir = saved["dir"].as_str().unwrap().to_string();
    assert_eq!(pids.len(), 3, "{saved}");
    assert!(pids.iter().all(|p| alive(*p)), "not all running after up: {pids:?}");
    let down = crashpoint().arg("down").env("CRASHPOINT_STATE_FILE", &state_file).output().unwrap();
    let (out, err) = text(&down);
    assert_eq!(down.status.code(), Some(0), "stdout:\n{out}\nstderr:\n{err}");
    assert!(out.contains("stopped"), "{out}");
    assert!(pids.iter().all(|p| !alive(*p)), "still running after down: {pids:?}");
    assert!(!std::path::Path::new(&dir).exists(), "{dir} left behind");
    assert!(!state_file.exists());
}

#[test]
fn sigint_in_the_middle_of_run_stops_everything_it_started() {
    let reports = tempfile::tempdir().unwrap();
    let mut child =
        crashpoint().arg("run").arg("--report-dir").arg(reports.path()).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut seen: Vec<(i32, String)>;
    loop {
        seen = children(child.id());
        let names: BTreeSet<&str> = seen
            .iter()
            .filter_map(|(_, c)| ["postgres", "redis-server", "localstack"].into_iter().find(|n| c.contains(n)))
            .collect();
        if names.len() == 3 {
            break;
        }
        assert!(child.try_wait().unwrap().is_none(), "run ended before its services were all up");
        assert!(Instant::now() < deadline, "services did not start: {seen:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
    let data_dir = seen
        .iter()
        .find_map(|(_, c)| c.split_whitespace().skip_while(|w| *w != "-D").nth(1).map(str::to_string))
        .expect("postgres -D argument");
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGINT).unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130), "exit status {status:?}");
    let left: Vec<_> = seen.iter().filter(|(p, _)| alive(*p)).collect();
    assert!(left.is_empty(), "left running: {left:?}");
    let services_dir = std::path::Path::new(&data_dir).ancestors().nth(2).unwrap().to_path_buf();
    assert!(!services_dir.exists(), "{} left behind", services_dir.display());
    // The reports are complete and say why the run ended.
    for f in ["junit.xml", "report.json", "summary.md"] {
        assert!(reports.path().join(f).is_file(), "{f} missing after the interrupt");
    }
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(reports.path().join("report.json")).unwrap()).unwrap();
    assert!(json["error"].as_str().unwrap_or_default().starts_with("interrupted by signal 2"), "{}", json["error"]);
}

#[test]
fn containers_provider_runs_where_docker_answers() {
    if let Err(why) = crashpoint::services::docker::engine_status() {
        eprintln!("SKIPPED containers_provider_runs_where_docker_answers: {why}");
        return;
    }
    let o = crashpoint().args(["--services", "containers", "doctor"]).output().unwrap();
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(0), "stdout:\n{out}\nstderr:\n{err}");
    assert!(out.contains("provider: containers") && out.contains("all three services reachable"), "{out}");
}
