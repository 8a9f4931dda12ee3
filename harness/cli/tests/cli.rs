//! The `crashpoint` binary as a user runs it: doctor, up/down, Ctrl-C in the middle of a run,
//! a service killed in the middle of a run, a missing binary, and the containers provider
//! (skipped with its reason without Docker).

use std::collections::BTreeSet;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crashpoint::services::external::SQS_SHARDS_VAR;

const BIN: &str = env!("CARGO_BIN_EXE_crashpoint");

/// A command with no external-provider variables, so that the native provider is chosen.
fn crashpoint() -> Command {
    let mut c = Command::new(BIN);
    for k in ["DATABASE_URL", "SQS_ENDPOINT_URL", "REDIS_URL", "DOCKER_HOST", SQS_SHARDS_VAR] {
        c.env_remove(k);
    }
    c
}

/// LocalStack instances the native provider starts on this machine.
fn localstacks() -> usize {
    crashpoint::services::native::localstack::instances().unwrap()
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
        let ppid =
            stat.rsplit(')').next().and_then(|r| r.split_whitespace().nth(1)).and_then(|p| p.parse::<u32>().ok());
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
    // A `TMPDIR` that is set is where the services' directory goes (else `/dev/shm` when it is
    // a roomy tmpfs): one that PostgreSQL's account can enter, as it can `/tmp`.
    let tmp = tempfile::tempdir().unwrap();
    std::fs::set_permissions(tmp.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let up =
        crashpoint().arg("up").env("CRASHPOINT_STATE_FILE", &state_file).env("TMPDIR", tmp.path()).output().unwrap();
    let (out, err) = text(&up);
    assert_eq!(up.status.code(), Some(0), "stdout:\n{out}\nstderr:\n{err}");
    for k in ["DATABASE_URL=", "SQS_ENDPOINT_URL=", "REDIS_URL="] {
        assert!(out.contains(k), "{out}");
    }
    // Each further LocalStack instance is a URL of the shards line, which is there (empty) even
    // with one, so that it replaces a value an earlier `up` left in the shell.
    let line = out
        .lines()
        .find_map(|l| l.strip_prefix(&format!("export {SQS_SHARDS_VAR}=")))
        .unwrap_or_else(|| panic!("no {SQS_SHARDS_VAR} line:\n{out}"));
    let shards = line.split(',').filter(|u| !u.is_empty()).count();
    assert_eq!(shards, localstacks() - 1, "{out}");
    let saved: serde_json::Value = serde_json::from_slice(&std::fs::read(&state_file).unwrap()).unwrap();
    let pids: Vec<i32> = saved["pids"].as_array().unwrap().iter().map(|p| p[1].as_i64().unwrap() as i32).collect();
    let dir = saved["dir"].as_str().unwrap().to_string();
    assert!(
        std::path::Path::new(&dir).starts_with(tmp.path()),
        "services' directory {dir} is not under TMPDIR {}",
        tmp.path().display()
    );
    assert_eq!(pids.len(), 2 + localstacks(), "{saved}");
    assert!(pids.iter().all(|p| alive(*p)), "not all running after up: {pids:?}");
    let down = crashpoint().arg("down").env("CRASHPOINT_STATE_FILE", &state_file).output().unwrap();
    let (out, err) = text(&down);
    assert_eq!(down.status.code(), Some(0), "stdout:\n{out}\nstderr:\n{err}");
    assert!(out.contains("stopped"), "{out}");
    assert!(pids.iter().all(|p| !alive(*p)), "still running after down: {pids:?}");
    assert!(!std::path::Path::new(&dir).exists(), "{dir} left behind");
    assert!(!state_file.exists());
}

/// The service processes a `run` started, once all are up (every LocalStack instance among
/// them): (pid, command line) each. Panics when the run ends first or they are not up within
/// 120 s.
fn services_of(run: &mut std::process::Child) -> Vec<(i32, String)> {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let seen = children(run.id());
        let names: BTreeSet<&str> =
            seen.iter().filter_map(|(_, c)| SERVICES.into_iter().find(|n| c.contains(n))).collect();
        let localstack = seen.iter().filter(|(_, c)| c.contains("localstack")).count();
        if names.len() == 3 && localstack == localstacks() {
            return seen;
        }
        assert!(run.try_wait().unwrap().is_none(), "run ended before its services were all up");
        assert!(Instant::now() < deadline, "services did not start: {seen:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The command-line names of the three native services.
const SERVICES: [&str; 3] = ["postgres", "redis-server", "localstack"];

/// Asserts that nothing `seen` still runs, that the run's services directory (found from
/// PostgreSQL's `-D`) is gone, and that the reports exist with `error` starting with `error`.
fn assert_cleaned_up_with_reports(seen: &[(i32, String)], reports: &std::path::Path, error: &str) {
    let data_dir = seen
        .iter()
        .find_map(|(_, c)| c.split_whitespace().skip_while(|w| *w != "-D").nth(1).map(str::to_string))
        .expect("postgres -D argument");
    let left: Vec<_> = seen.iter().filter(|(p, _)| alive(*p)).collect();
    assert!(left.is_empty(), "left running: {left:?}");
    let services_dir = std::path::Path::new(&data_dir).ancestors().nth(2).unwrap().to_path_buf();
    assert!(!services_dir.exists(), "{} left behind", services_dir.display());
    for f in ["junit.xml", "report.json", "summary.md"] {
        assert!(reports.join(f).is_file(), "{f} missing");
    }
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(reports.join("report.json")).unwrap()).unwrap();
    assert!(json["error"].as_str().unwrap_or_default().starts_with(error), "{}", json["error"]);
}

#[test]
fn sigint_in_the_middle_of_run_stops_everything_it_started() {
    let reports = tempfile::tempdir().unwrap();
    let mut child = crashpoint()
        .arg("run")
        .arg("--report-dir")
        .arg(reports.path())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let seen = services_of(&mut child);
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGINT).unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130), "exit status {status:?}");
    // The reports are complete and say why the run ended.
    assert_cleaned_up_with_reports(&seen, reports.path(), "interrupted by signal 2");
}

/// A run that gets SIGINT (and is waited for) when dropped still running: a failed assertion
/// leaves no run and no service behind.
struct Interrupted(std::process::Child);

impl Drop for Interrupted {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(self.0.id() as i32),
                nix::sys::signal::Signal::SIGINT,
            );
            let _ = self.0.wait();
        }
    }
}

/// A service that dies under a running exploration ends the run with exit 2 within
/// 10 s, naming the service, with its reports written and nothing left behind.
#[test]
#[ignore = "full tier: three service kills, 15 s of running each; `cargo test -- --include-ignored` runs it"]
fn a_service_killed_mid_run_ends_it_with_exit_2_naming_the_service() {
    for (process, named) in [("postgres", "PostgreSQL"), ("localstack", "SQS"), ("redis-server", "Redis")] {
        let reports = tempfile::tempdir().unwrap();
        // stderr goes to a file: a pipe nobody reads could fill and stall the run.
        let stderr = tempfile::NamedTempFile::new().unwrap();
        let mut child = Interrupted(
            crashpoint()
                .args(["run", "payout/explore", "--schedules", "100000", "--jobs", "1", "--report-dir"])
                .arg(reports.path())
                .stdout(Stdio::null())
                .stderr(stderr.reopen().unwrap())
                .spawn()
                .unwrap(),
        );
        let child = &mut child.0;
        let seen = services_of(child);
        // Let the services come up and schedules run before the kill.
        std::thread::sleep(Duration::from_secs(15));
        assert!(child.try_wait().unwrap().is_none(), "run ended before {process} was killed");
        // Every instance of it: with `--jobs 1` the run uses one LocalStack of several, and
        // one it never calls may die unnoticed.
        for (pid, _) in seen.iter().filter(|(_, c)| c.contains(process)) {
            nix::sys::signal::kill(nix::unistd::Pid::from_raw(*pid), nix::sys::signal::Signal::SIGKILL).unwrap();
        }
        let killed = Instant::now();
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            if killed.elapsed() >= Duration::from_secs(10) {
                let err = std::fs::read_to_string(stderr.path()).unwrap_or_default();
                let tail: Vec<&str> = err.lines().rev().take(20).collect::<Vec<_>>().into_iter().rev().collect();
                panic!("run still going 10 s after {process} was killed; its stderr ends:\n{}", tail.join("\n"));
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        eprintln!("{process} killed: the run ended {:.1} s later", killed.elapsed().as_secs_f64());
        let err = std::fs::read_to_string(stderr.path()).unwrap();
        assert_eq!(status.code(), Some(2), "{process} killed: exit {status:?}\n{err}");
        let says = format!("{named} at 127.0.0.1");
        assert!(
            err.contains(&says) && err.contains("stopped accepting connections during the run"),
            "{process} killed: stderr does not name {named}:\n{err}"
        );
        assert_cleaned_up_with_reports(&seen, reports.path(), "");
        let json: serde_json::Value =
            serde_json::from_slice(&std::fs::read(reports.path().join("report.json")).unwrap()).unwrap();
        assert!(json["error"].as_str().is_some_and(|e| e.contains(&says)), "{process}: {}", json["error"]);
    }
}

/// A report directory that cannot be created, or exists and cannot be written,
/// ends the run with exit 2 before a service starts or a schedule runs, naming the directory.
/// (`/proc/self/fdinfo` exists and refuses new files even to root, who may write in a
/// directory of mode 0555.)
#[test]
fn an_unwritable_report_directory_is_exit_2_before_any_schedule() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("a-file");
    std::fs::write(&file, "not a directory").unwrap();
    let under_a_file = file.join("reports");
    let cases = [
        (under_a_file.clone(), format!("creating the report directory {}", under_a_file.display())),
        ("/proc/self/fdinfo".into(), "the report directory /proc/self/fdinfo is not writable".to_string()),
    ];
    for (dir, says) in cases {
        let started = Instant::now();
        let o = crashpoint().args(["run", "windows/crash-after-commit", "--report-dir"]).arg(&dir).output().unwrap();
        let (out, err) = text(&o);
        assert_eq!(o.status.code(), Some(2), "stdout:\n{out}\nstderr:\n{err}");
        assert!(err.contains(&says), "{err}");
        assert!(!out.contains("== windows/crash-after-commit"), "a schedule ran:\n{out}");
        assert!(started.elapsed() < Duration::from_secs(5), "took {:?}: services were started", started.elapsed());
    }
}

/// Every command that creates or destroys something on the services (the
/// operations `crashpoint::services::safety::DESTRUCTIVE` lists) refuses endpoints that are not
/// on loopback, before it connects to them, and says how to allow it.
#[test]
fn every_destructive_command_refuses_a_remote_host_before_connecting() {
    let tmp = tempfile::tempdir().unwrap();
    let reports = tmp.path().join("reports");
    let reports = reports.to_str().unwrap();
    let commands: [&[&str]; 5] = [
        &["run", "windows/crash-after-commit", "--report-dir", reports],
        &["repro", "windows/crash-after-commit", "--report-dir", reports],
        &["catalogue", "counter", "--budget", "1", "--report-dir", reports],
        &["bench", "--schedules", "1"],
        &["doctor", "--calibrate"],
    ];
    for args in commands {
        let started = Instant::now();
        let o = Command::new(BIN)
            .args(args)
            .env("DATABASE_URL", "postgres://app:pw@db.example.invalid:5432/app")
            .env("SQS_ENDPOINT_URL", "http://127.0.0.1:4566")
            .env("REDIS_URL", "redis://127.0.0.1:6379")
            .env_remove("DOCKER_HOST")
            .output()
            .unwrap();
        let (out, err) = text(&o);
        let cmd = args.join(" ");
        assert_eq!(o.status.code(), Some(2), "{cmd}: stdout:\n{out}\nstderr:\n{err}");
        assert!(
            err.contains("refusing") && err.contains("db.example.invalid") && err.contains("--allow-remote"),
            "{cmd}: {err}"
        );
        assert!(!out.contains("=="), "{cmd}: a scenario ran:\n{out}");
        assert!(started.elapsed() < Duration::from_secs(10), "{cmd} took {:?}", started.elapsed());
    }
}

/// Passwords in the service URLs and the AWS secret key appear in no output of a
/// run: stdout, stderr with debug logs, the reports and the timeline of a failure, and the
/// error of a run whose PostgreSQL cannot be reached.
#[test]
fn passwords_in_service_urls_appear_in_no_output() {
    const PG_PASSWORD: &str = "pg-s3cr3t-pw";
    const AWS_SECRET: &str = "aws-s3cr3t-key";
    let state = tempfile::tempdir().unwrap();
    let state_file = state.path().join("up.json");
    let up = crashpoint().arg("up").env("CRASHPOINT_STATE_FILE", &state_file).output().unwrap();
    let (out, err) = text(&up);
    assert_eq!(up.status.code(), Some(0), "stdout:\n{out}\nstderr:\n{err}");
    let var = |k: &str| out.lines().find_map(|l| l.strip_prefix(&format!("export {k}="))).unwrap().to_string();
    // The native PostgreSQL trusts local connections, so the password is sent and ignored.
    let database_url =
        var("DATABASE_URL").replacen("postgres://postgres@", &format!("postgres://postgres:{PG_PASSWORD}@"), 1);
    assert!(database_url.contains(PG_PASSWORD), "{database_url}");
    let with_secrets = |c: &mut Command, db: &str| {
        c.env("DATABASE_URL", db)
            .env("SQS_ENDPOINT_URL", var("SQS_ENDPOINT_URL"))
            .env("REDIS_URL", var("REDIS_URL"))
            .env("AWS_SECRET_ACCESS_KEY", AWS_SECRET)
            .env("RUST_LOG", "debug");
    };
    let reports = tempfile::tempdir().unwrap();
    let mut failing = crashpoint();
    failing.args(["repro", "windows/crash-after-commit", "--system", "no-dedup", "--report-dir"]).arg(reports.path());
    failing.args(["--schedule", "p:lock p:send c1:recv c1:crash@after_commit tick:31s"]);
    with_secrets(&mut failing, &database_url);
    let failed = failing.output().unwrap();
    let unreachable_db = format!("postgres://postgres:{PG_PASSWORD}@127.0.0.1:1/postgres");
    let mut erring = crashpoint();
    erring.args(["run", "windows/crash-after-commit", "--report-dir"]).arg(reports.path().join("error"));
    with_secrets(&mut erring, &unreachable_db);
    let errored = erring.output().unwrap();
    let down = crashpoint().arg("down").env("CRASHPOINT_STATE_FILE", &state_file).output().unwrap();
    assert_eq!(down.status.code(), Some(0), "{:?}", text(&down));
    assert_eq!(failed.status.code(), Some(1), "{:?}", text(&failed));
    assert_eq!(errored.status.code(), Some(2), "{:?}", text(&errored));
    let mut outputs: Vec<(String, String)> = Vec::new();
    for (name, o) in [("repro", &failed), ("unreachable run", &errored)] {
        let (out, err) = text(o);
        outputs.push((format!("{name} stdout"), out));
        outputs.push((format!("{name} stderr"), err));
    }
    let mut files = vec![reports.path().to_path_buf()];
    while let Some(f) = files.pop() {
        if f.is_dir() {
            files.extend(std::fs::read_dir(&f).unwrap().map(|e| e.unwrap().path()));
        } else {
            outputs.push((f.display().to_string(), String::from_utf8_lossy(&std::fs::read(&f).unwrap()).into_owned()));
        }
    }
    let names: Vec<&str> = outputs.iter().map(|(n, _)| n.as_str()).collect();
    for kind in ["junit.xml", "report.json", "summary.md", "timeline-"] {
        assert!(names.iter().any(|n| n.contains(kind)), "no {kind} among {names:?}");
    }
    assert!(outputs.iter().any(|(_, t)| t.contains("DEBUG")), "no debug log line in any output");
    for (name, t) in &outputs {
        for secret in [PG_PASSWORD, AWS_SECRET] {
            assert!(!t.contains(secret), "{name} shows {secret}:\n{t}");
        }
    }
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
