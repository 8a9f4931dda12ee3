//! Reports a CI page shows: a run against a failing mutant writes junit.xml (read back with
//! `junit-parser`), report.json, summary.md (snapshotted) and a timeline that headless
//! Chromium renders; sharded explorations cover exactly one unsharded run; the structured
//! logs carry crashes and blocked steps. Services are started through the harness.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use crashpoint::explore::for_shard;
use crashpoint::explore::{explore, Options, Shard};
use crashpoint::scenario::run_scenario;
use crashpoint::testkit;
mod common;

const BIN: &str = env!("CARGO_BIN_EXE_crashpoint");

fn crashpoint() -> Command {
    let mut c = Command::new(BIN);
    for k in [
        "DATABASE_URL",
        "SQS_ENDPOINT_URL",
        "REDIS_URL",
        "DOCKER_HOST",
        "CI",
        crashpoint::services::external::SQS_SHARDS_VAR,
    ] {
        c.env_remove(k);
    }
    c.env("CI", "true");
    c
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;").replace('\'', "&apos;")
}

/// Counts pixels of exactly `rgb` in the PNG.
fn pixels_of(png: &Path, rgb: [u8; 3]) -> usize {
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(png).unwrap()));
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).unwrap();
    let channels = info.color_type.samples();
    buf[..info.buffer_size()].chunks(channels).filter(|p| p.len() >= 3 && p[..3] == rgb).count()
}

#[test]
fn a_failing_mutant_writes_every_report_kind() {
    let dir = tempfile::tempdir().unwrap();
    let reports = dir.path().join("reports");
    let o = crashpoint()
        .args(["run", "--mutant", "no-dedup", "payout/catalogue", "--budget", "40", "--seed", "1", "--report-dir"])
        .arg(&reports)
        .output()
        .unwrap();
    let (out, err) = (String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert_eq!(o.status.code(), Some(1), "stdout:\n{out}\nstderr:\n{err}");
    for f in ["junit.xml", "report.json", "summary.md", "timeline-payout-catalogue.html"] {
        assert!(reports.join(f).is_file(), "{f} missing; stdout:\n{out}");
    }

    // junit.xml, read back by a JUnit reader.
    let suites =
        junit_parser::from_reader(std::io::BufReader::new(std::fs::File::open(reports.join("junit.xml")).unwrap()))
            .expect("junit.xml parses");
    assert_eq!(suites.suites.len(), 1);
    let cases = &suites.suites[0].cases;
    assert_eq!(cases.len(), 1, "one test case per scenario: {cases:?}");
    let case = &cases[0];
    assert_eq!(case.original_name, "payout/catalogue (no-dedup)");
    assert_eq!(case.classname.as_deref(), Some("payout"));
    let junit_parser::TestStatus::Failure(failure) = &case.status else { panic!("not a failure: {:?}", case.status) };
    assert!(failure.message.contains("exactly one payout per payment"), "{}", failure.message);
    assert!(
        failure.message.contains("crashpoint repro payout/catalogue --system no-dedup --schedule"),
        "{}",
        failure.message
    );

    // report.json
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(reports.join("report.json")).unwrap()).unwrap();
    assert_eq!(json["seed"], 1);
    assert_eq!(json["budget"]["schedules"], 40);
    assert_eq!(json["verdict"], "fail");
    let sc = &json["scenarios"][0];
    assert_eq!(sc["name"], "payout/catalogue");
    assert_eq!(sc["verdict"], "fail");
    assert_eq!(sc["coverage"].as_object().unwrap().len(), 10, "{sc}");
    assert!(
        sc["coverage"].as_object().unwrap().contains_key("c after_claim"),
        "coverage is keyed by role and point: {sc}"
    );
    assert!(sc.get("determinism").is_none(), "no determinism check was asked for: {sc}");
    assert!(sc["calls"]["pg"].as_u64().unwrap() > 0 && sc["calls"]["sqs"].as_u64().unwrap() > 0);
    assert!(sc["invariants"].as_array().unwrap().iter().any(|i| i["holds"] == false));
    let failure = &sc["failure"];
    let schedule = failure["schedule"].as_str().unwrap();
    assert!(failure["repro"][0].as_str().unwrap().ends_with(&format!("--schedule '{schedule}'")));
    assert_eq!(failure["timeline"], "timeline-payout-catalogue.html");
    let breaking = failure["breaking_step"].as_str().expect("a breaking step").to_string();
    assert!(failure["trace"].as_str().unwrap().contains(&breaking));

    // The timeline: self-contained, every lane named, the violating step highlighted.
    let html = std::fs::read_to_string(reports.join("timeline-payout-catalogue.html")).unwrap();
    for forbidden in ["<script", "<link", "src=\"http", "href=\"http", "url(http"] {
        assert!(!html.contains(forbidden), "the timeline must open offline; found {forbidden}");
    }
    let trace = failure["trace"].as_str().unwrap();
    let workers: BTreeSet<&str> = trace
        .lines()
        .filter(|l| {
            l.split_whitespace().next().is_some_and(|t| t.strip_suffix('s').is_some_and(|n| n.parse::<f64>().is_ok()))
        })
        .filter_map(|l| l.split_whitespace().nth(1))
        .filter(|w| *w != "~")
        .collect();
    assert!(workers.contains("c1") && workers.contains("p"), "{workers:?}");
    for lane in workers.iter().copied().chain(["nemesis", "postgres", "sqs", "redis"]) {
        assert!(html.contains(&format!("data-lane=\"{lane}\"")), "lane {lane} missing");
    }
    assert!(html.contains("id=\"breaking\""), "no highlighted step");
    let highlighted = html.lines().find(|l| l.contains("id=\"breaking-line\"")).expect("a highlighted trace line");
    assert!(highlighted.contains(&escape(&breaking)), "{highlighted} is not {breaking}");

    // summary.md: table, minimal schedule, repro; wall-clock figures filtered.
    let summary = std::fs::read_to_string(reports.join("summary.md")).unwrap();
    assert!(summary.contains(schedule) && summary.contains("crashpoint repro"));
    // The run-wide calibration caveat is asserted here, and filtered from the snapshot: its
    // wording depends on what the endpoint did.
    assert!(summary.contains("differs from AWS on `stale-receipt-handle`"), "{summary}");
    assert!(json["calibration"]["probes"].as_array().is_some_and(|p| p.len() == 7), "{}", json["calibration"]);
    let filters = vec![
        (r"\| \d+\.\d \|", "| [rate] |"),
        (r"(?m)^> ⚠️ (the SQS endpoint|calibration probe).*$", "> ⚠️ [calibration caveat]"),
    ];
    insta::with_settings!({filters => filters}, {
        insta::assert_snapshot!("summary_no_dedup", summary);
    });

    // Headless Chromium renders the lanes: worker lanes, PostgreSQL and SQS step colours.
    let png = dir.path().join("timeline.png");
    let shot =
        crashpoint().arg("screenshot").arg(reports.join("timeline-payout-catalogue.html")).arg(&png).output().unwrap();
    assert_eq!(shot.status.code(), Some(0), "{}", String::from_utf8_lossy(&shot.stderr));
    assert!(pixels_of(&png, [0xbc, 0xd7, 0xf5]) > 100, "no PostgreSQL step drawn");
    assert!(pixels_of(&png, [0xff, 0xd8, 0xa8]) > 100, "no SQS step drawn");
    assert!(pixels_of(&png, [0xee, 0xf2, 0xf7]) > 1000, "no service lane drawn");
}

#[test]
fn a_verdict_resting_on_an_emulator_behaviour_carries_the_caveat() {
    let dir = tempfile::tempdir().unwrap();
    let o = crashpoint().args(["run", "aws/stale-delete-emulated", "--report-dir"]).arg(dir.path()).output().unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{out}\n{}", String::from_utf8_lossy(&o.stderr));
    assert!(out.contains("SQS calibration against"), "{out}");
    assert!(
        out.contains("caveat (aws/stale-delete-emulated): this verdict depends on `stale-receipt-handle`"),
        "{out}"
    );
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("report.json")).unwrap()).unwrap();
    let sc = &json["scenarios"][0];
    assert_eq!(sc["depends_on"][0], "stale-receipt-handle");
    assert!(sc["caveats"][0].as_str().unwrap().contains("stale-receipt-handle"), "{sc}");
    let summary = std::fs::read_to_string(dir.path().join("summary.md")).unwrap();
    assert!(summary.contains("aws/stale-delete-emulated (reference): this verdict depends on"), "{summary}");
    let junit = std::fs::read_to_string(dir.path().join("junit.xml")).unwrap();
    assert!(junit.contains("name=\"caveat\""), "{junit}");
}

#[test]
fn two_shards_cover_exactly_one_unsharded_run() {
    // Uniform: a guided run guides each shard by its own cases, so its mutations differ.
    let mut s = common::scenario("payout/explore");
    s.explore.as_mut().unwrap().strategy = crashpoint::scenario::Strategy::Uniform;
    let endpoints = testkit::endpoints();
    let cases = |shard: Shard| {
        let opts = Options { schedules: Some(8), time: None, seed: 99, check_determinism: false, shard, jobs: 1 };
        let r = explore(&endpoints, common::payout("reference"), &s, &opts, |_| {}).expect("explores");
        assert!(r.failure.is_none(), "the reference failed");
        r.stats.cases
    };
    let all = cases(Shard::default());
    let one = cases(Shard { index: 1, count: 2 });
    let two = cases(Shard { index: 2, count: 2 });
    assert_eq!(all.len(), 8);
    assert_eq!(one.len() + two.len(), 8, "overlap or gap: {one:?} {two:?}");
    let mut union: Vec<_> = one.iter().chain(&two).copied().collect();
    union.sort();
    assert_eq!(union, all, "the shards together must run exactly the unsharded cases");

    // Scripted scenarios are dealt the same way.
    let scenarios =
        crashpoint::scenario::discover(&crashpoint::scenario::scenarios_dir(), &common::registry()).unwrap();
    let names = |shard| {
        for_shard(scenarios.clone(), shard)
            .into_iter()
            .filter(|s| s.explore.is_none())
            .map(|s| s.name)
            .collect::<Vec<_>>()
    };
    let (a, b, whole) =
        (names(Shard { index: 1, count: 2 }), names(Shard { index: 2, count: 2 }), names(Shard::default()));
    assert!(!a.is_empty() && !b.is_empty());
    let mut both: Vec<_> = a.iter().chain(&b).cloned().collect();
    both.sort();
    let mut whole_sorted = whole.clone();
    whole_sorted.sort();
    assert_eq!(both, whole_sorted);
}

#[test]
#[tracing_test::traced_test]
fn logs_carry_injected_crashes_and_blocked_steps() {
    let endpoints = testkit::endpoints();
    for name in ["windows/crash-after-commit", "windows/concurrent-same-event"] {
        let o = run_scenario(&endpoints, common::payout("reference"), &common::scenario(name), None).unwrap();
        assert!(o.passed(), "{name}\n{}", o.trace);
    }
    assert!(logs_contain("crash injected"));
    assert!(logs_contain("worker=\"c1\"") || logs_contain("worker=c1"));
    assert!(logs_contain("blocked step detected"));
    assert!(logs_contain("schedule checked"));
}

/// The parts of a run's output that do not depend on wall time: stdout without the rate line's
/// timings and the report path, report.json without its wall-clock fields, junit.xml without
/// `time` attributes, summary.md without the rate column, and the timelines as they are.
fn timeless(dir: &Path, stdout: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let lines: Vec<String> = stdout
        .lines()
        .filter(|l| !l.starts_with("reports: "))
        .map(|l| match l.split_once(" schedules in ") {
            Some((n, rest)) if l.contains("schedules/s") => {
                format!("{n} schedules …{}", rest.split_once(';').map_or("", |r| r.1))
            }
            _ => l.to_string(),
        })
        .collect();
    out.push(("stdout".into(), lines.join("\n")));
    fn strip(v: &mut serde_json::Value) {
        match v {
            serde_json::Value::Object(m) => {
                for k in ["wall_s", "schedules_per_s", "started_at"] {
                    m.remove(k);
                }
                m.values_mut().for_each(strip);
            }
            serde_json::Value::Array(a) => a.iter_mut().for_each(strip),
            _ => {}
        }
    }
    let mut json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("report.json")).unwrap()).unwrap();
    strip(&mut json);
    out.push(("report.json".into(), json.to_string()));
    let junit = std::fs::read_to_string(dir.join("junit.xml")).unwrap();
    let junit: Vec<String> = junit
        .lines()
        .map(|l| match l.find(" time=\"") {
            Some(i) => {
                let end = l[i + 7..].find('"').map_or(l.len(), |j| i + 8 + j);
                format!("{}{}", &l[..i], &l[end..])
            }
            None => l.to_string(),
        })
        .collect();
    out.push(("junit.xml".into(), junit.join("\n")));
    let summary: Vec<String> = std::fs::read_to_string(dir.join("summary.md"))
        .unwrap()
        .lines()
        .map(|l| {
            let mut cells: Vec<&str> = l.split('|').collect();
            if cells.len() > 8 && l.contains("explored") {
                cells[7] = " rate ";
            }
            cells.join("|")
        })
        .collect();
    out.push(("summary.md".into(), summary.join("\n")));
    let mut timelines: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "html"))
        .collect();
    timelines.sort();
    for t in timelines {
        out.push((t.file_name().unwrap().to_string_lossy().into_owned(), std::fs::read_to_string(&t).unwrap()));
    }
    out
}

/// Runs `crashpoint <args> --jobs J --report-dir …` for J = 1 and then 4, each on services
/// of its own and with the slots' debug log on, expecting exit `code`; asserts that the two
/// stdouts (each line through `mask`, which blanks what is wall time there) and every report
/// file are the same, apart from wall-clock fields. Returns the stdout and stderr of each run,
/// `--jobs 1` first.
fn same_for_1_and_4_jobs(args: &[&str], code: i32, mask: impl Fn(&str) -> String) -> Vec<(String, String)> {
    let dir = tempfile::tempdir().unwrap();
    let (mut runs, mut outputs) = (Vec::new(), Vec::new());
    for jobs in ["1", "4"] {
        let reports = dir.path().join(format!("jobs-{jobs}"));
        let mut c = crashpoint();
        c.env("RUST_LOG", "warn,crashpoint::explore::slots=debug");
        let o = c.args(args).args(["--jobs", jobs, "--report-dir"]).arg(&reports).output().unwrap();
        let (out, err) =
            (String::from_utf8_lossy(&o.stdout).into_owned(), String::from_utf8_lossy(&o.stderr).into_owned());
        assert_eq!(o.status.code(), Some(code), "--jobs {jobs}: exit code\n{out}\n{err}");
        let masked: Vec<String> = out.lines().map(&mask).collect();
        runs.push(timeless(&reports, &masked.join("\n")));
        outputs.push((out, err));
    }
    assert_eq!(runs[0].len(), runs[1].len(), "the two runs wrote different report files");
    for ((name, one), (_, four)) in runs[0].iter().zip(&runs[1]) {
        assert!(one == four, "{name} differs between --jobs 1 and --jobs 4:\n--- jobs 1\n{one}\n--- jobs 4\n{four}");
    }
    outputs
}

#[test]
fn outputs_and_reports_do_not_depend_on_jobs() {
    let args =
        ["run", "payout/explore", "--system", "check-then-insert", "--budget", "40", "--seed", "7", "--no-calibrate"];
    let out = &same_for_1_and_4_jobs(&args, 1, str::to_string)[0].0;
    assert!(out.contains("minimal schedule"), "no shrunk schedule printed:\n{out}");
}

/// The catalogue's table with its wall times blanked: a row's "s to first failure" and "wall
/// s" cells, the verdict line's slot count and median time to a first failure (and the
/// path of `catalogue.md`, in a directory per run).
fn catalogue_wall_free(line: &str) -> String {
    if line.starts_with("written to ") {
        return "written to …".into();
    }
    let mut cells: Vec<&str> = line.split('|').collect();
    if line.starts_with('|') && cells.len() == 9 {
        (cells[4], cells[5]) = (" s ", " s ");
        return cells.join("|");
    }
    match (line.split_once(" slot(s): "), line.split_once("; median time")) {
        (Some((head, _)), Some((verdict, _))) => {
            let before = head.rsplit_once(", ").map_or(head, |h| h.0);
            format!("{before}, … slot(s): {}", verdict.split_once(" slot(s): ").map_or("", |v| v.1))
        }
        _ => line.to_string(),
    }
}

/// The catalogue's explorations share the slots through a job board: with 4, the slots that
/// finish the counter's mutants run cases of its reference search (their debug log says
/// so, for helpers that ran at least one case); with 1, nobody helps. The table and the
/// reports are the same.
#[test]
fn the_catalogue_does_not_depend_on_jobs() {
    let runs =
        same_for_1_and_4_jobs(&["catalogue", "counter", "--budget", "60", "--seed", "1"], 0, catalogue_wall_free);
    let helps = |k: usize| {
        runs[k]
            .1
            .lines()
            .filter(|l| l.contains("an idle slot helped an exploration") && l.contains("system=reference"))
            .count()
    };
    assert_eq!(helps(0), 0, "a slot helped with --jobs 1:\n{}", runs[0].1);
    assert!(helps(1) > 0, "no slot ran a case of the reference with --jobs 4:\n{}", runs[1].1);
    let out = &runs[0].0;
    assert!(out.contains("every mutant caught, the reference passes"), "{out}");
    assert_eq!(
        out.lines().filter(|l| l.starts_with("| ") && l.contains(" | yes | ")).count(),
        4,
        "four mutants caught:\n{out}"
    );
    assert!(out.contains("| lookup-before-claim (must not be caught) | no |"), "{out}");
}

/// `catalogue --seeds` gives a detection rate: per mutant the seeds that caught
/// it and the median schedules to its first failure, the reference explored on every seed;
/// the table (written as `detection.md`) is the same for one slot and four.
#[test]
fn the_catalogue_over_several_seeds_gives_each_mutants_detection_rate() {
    let runs = same_for_1_and_4_jobs(&["catalogue", "counter", "--budget", "20", "--seeds", "1..3"], 0, |l| {
        if l.starts_with("written to ") {
            "written to …".to_string()
        } else {
            l.to_string()
        }
    });
    let out = &runs[0].0;
    assert!(out.contains("## counter: detection over seeds 1-3 (budget 20 schedules per system and seed)"), "{out}");
    for m in ["increment-without-dedup", "dedup-by-event-only", "dedup-separate-tx"] {
        assert!(out.contains(&format!("| {m} | counter/explore | 1-3 | 3/3 |")), "{m} not caught on seeds 1-3:\n{out}");
    }
    assert!(out.contains("| reference (must not be caught) | counter/explore | none | 0/3 | – |"), "{out}");
    assert!(out.contains("every mutant caught on every seed, the reference passes on every seed"), "{out}");
}
