//! Malformed scenario files: [`load`] never panics, and each error names the
//! file and a line, and the field whenever the file is TOML.
//!
//! proptest feeds it the repository's scenario files after random byte edits (deletions,
//! duplications, truncations, inserted bytes, swapped lines), arbitrary bytes, and TOML made
//! of scenario keys with values of every type. `cargo test` runs 256 cases per property
//! (proptest's default); a longer run: `PROPTEST_CASES=100000 cargo test -p crashpoint --lib fuzz`.
//!
//! The files load against stand-in workloads named `payout`, `counter` and `orders` that
//! share the repository's workloads' vocabulary ([`crate::schedule::parse_fuzz::ROLES`]); the real
//! workloads' own checks of `[[events]]` and `[config]` live in their crates.

use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use proptest::prelude::*;
use proptest::sample::select;

use super::load;
use crate::schedule::parse_fuzz::{mutation, repository_scenarios, FAULTS, PROVIDERS, ROLES};
use crate::record::labels::Labels;
use crate::workload::{Registry, Workload};
use crate::spec::{Event, QueueSpec, Resend, RoleSpec, SystemInfo, WorkloadFault};

/// A stand-in for one of the repository's workloads: its name, the shared vocabulary, and
/// `[[events]]` and `[config]` that accept any field but `bad`.
struct Stub(&'static str);

/// A stand-in for a workload fault or provider: only its name is read when loading.
struct Named(&'static str);

#[async_trait::async_trait(?Send)]
impl WorkloadFault for Named {
    fn name(&self) -> &'static str {
        self.0
    }
    fn about(&self) -> &'static str {
        "a stand-in"
    }
    async fn apply(&self, _pg: &sqlx::PgPool) -> anyhow::Result<Vec<Resend>> {
        anyhow::bail!("a stand-in fault is never applied")
    }
}

impl crate::provider::Provider for Named {
    fn name(&self) -> &'static str {
        self.0
    }
    fn about(&self) -> &'static str {
        "a stand-in"
    }
    fn handle(&self, _request: &crate::provider::Request, _now_ms: u64) -> crate::provider::Handled {
        unreachable!("loading a scenario calls no provider")
    }
    fn effects(&self) -> Vec<crate::provider::Effect> {
        Vec::new()
    }
}

impl Workload for Stub {
    fn name(&self) -> &'static str {
        self.0
    }
    fn about(&self) -> &'static str {
        "a stand-in for the scenario loader's fuzz tests"
    }
    fn queues(&self) -> Vec<QueueSpec> {
        vec![QueueSpec::new("payments", "m"), QueueSpec::new("payouts", "o")]
    }
    fn roles(&self) -> Vec<RoleSpec> {
        ROLES.to_vec()
    }
    fn config(&self, table: toml::Table) -> Result<Rc<dyn std::any::Any>, String> {
        if table.contains_key("bad") {
            return Err("unknown field `bad`".into());
        }
        Ok(Rc::new(()))
    }
    fn events(&self, specs: &[toml::Table], _namespace: uuid::Uuid, _names: &mut Labels) -> Result<Vec<Event>, String> {
        match specs.iter().position(|t| t.contains_key("bad")) {
            Some(i) => Err(format!("events[{i}] ({}): unknown field `bad`", specs[i].get("name").and_then(|n| n.as_str()).unwrap_or("?"))),
            None => Ok(Vec::new()),
        }
    }
    fn identity(&self, _body: &serde_json::Value) -> Option<(&'static str, uuid::Uuid)> {
        None
    }
    fn invariants(&self) -> Vec<Box<dyn crate::checker::Invariant>> {
        Vec::new()
    }
    fn faults(&self) -> Vec<Box<dyn WorkloadFault>> {
        FAULTS.iter().map(|f| Box::new(Named(f)) as Box<dyn WorkloadFault>).collect()
    }
    fn providers(&self) -> Vec<Rc<dyn crate::provider::Provider>> {
        PROVIDERS.iter().map(|p| Rc::new(Named(p)) as Rc<dyn crate::provider::Provider>).collect()
    }
    fn systems(&self) -> Vec<SystemInfo> {
        Vec::new()
    }
    fn system(&self, _name: &str) -> Option<Rc<dyn crate::sim::cx::System>> {
        None
    }
}

fn registry() -> Registry {
    Registry::new(["payout", "counter", "orders"].into_iter().map(|n| Arc::new(Stub(n)) as Arc<dyn Workload>).collect())
}

/// A scenario file that loads: lines 3 to 6 are the schedule, line 8 the `[[events]]` table.
const GOOD: &str = "description = \"d\"\nworkers = \"p c1 c2\"\nschedule = \"\"\"\np:lock p:send\nc1:recv\n\"\"\"\n\n[[events]]\nname = \"e1\"\npayment = \"p1\"\n";

/// A scratch scenarios directory with one file, `payout/fuzz.toml`, rewritten for each case.
struct Scratch {
    _dir: tempfile::TempDir,
    root: PathBuf,
    path: PathBuf,
}

impl Scratch {
    fn new() -> Scratch {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("scenarios");
        std::fs::create_dir_all(root.join("payout")).unwrap();
        let path = root.join("payout/fuzz.toml");
        Scratch { _dir: dir, root, path }
    }

    /// Loads `bytes` as the file: the scenario, or the error as `{:#}` shows it.
    fn load(&self, bytes: impl AsRef<[u8]>) -> Result<super::Scenario, String> {
        std::fs::write(&self.path, bytes).unwrap();
        match load(&self.root, &self.path, &registry()) {
            Ok(s) => Ok(s.expect("no file is skipped")),
            Err(e) => Err(format!("{e:#}")),
        }
    }

    /// The error of loading `text`, which must not load.
    fn error(&self, text: &str) -> String {
        self.load(text).err().unwrap_or_else(|| panic!("loads:\n{text}"))
    }
}

/// The line numbers an error names: after `<path>:`, and toml's `line N`.
fn named_lines(e: &str, path: &str) -> Vec<usize> {
    let number = |rest: &str| rest.split(|c: char| !c.is_ascii_digit()).next().and_then(|n| n.parse().ok());
    let after_path = e.match_indices(path).filter_map(|(i, _)| number(e[i + path.len()..].strip_prefix(':')?));
    let after_line = e.match_indices("line ").filter_map(|(i, _)| number(&e[i + 5..]));
    after_path.chain(after_line).collect()
}

/// Checks what loading `bytes` gives: a scenario, or an error that names the file and a line
/// of it, and a field when the file is TOML.
fn check(scratch: &Scratch, bytes: &[u8]) -> Result<(), TestCaseError> {
    let Err(e) = scratch.load(bytes) else { return Ok(()) };
    let shown = scratch.path.display().to_string();
    prop_assert!(e.contains(&shown), "the file is not named: {}", e);
    let lines = named_lines(&e, &shown);
    let last = bytes.split(|b| *b == b'\n').count();
    prop_assert!(!lines.is_empty(), "no line is named: {}", e);
    prop_assert!(lines.iter().all(|l| (1..=last).contains(l)), "a line outside 1..={}: {}", last, e);
    let is_toml = std::str::from_utf8(bytes).is_ok_and(|t| t.parse::<toml::Table>().is_ok());
    if is_toml {
        prop_assert!(e.contains("field `") || e.contains("[external."), "no field is named: {}", e);
    }
    Ok(())
}

/// The repository's scenario files, as bytes.
fn corpus() -> Vec<Vec<u8>> {
    repository_scenarios().into_iter().map(|(_, text)| text.into_bytes()).collect()
}

/// Bytes that matter to TOML, UTF-8 and lines half the time; any byte the other half.
fn interesting_byte() -> impl Strategy<Value = u8> {
    let special: Vec<u8> = b" \t\n\r#=[]{}\"',.\\:@0123456789-_abcepstxz\x00\x7f\x80\xbf\xc3\xe2\xf0\xfe\xff".to_vec();
    prop_oneof![select(special), any::<u8>()]
}

/// Lines of TOML made of the scenario files' keys and tables, with values of every type, after
/// a valid file or alone.
fn scenario_like_toml() -> impl Strategy<Value = String> {
    const HEADERS: &[&str] = &[
        "[explore]", "[exhaustive]", "[config]", "[[events]]", "[[invariants]]", "[external.c]", "[external.zz]", "[events]",
        "[workers]", "[[external]]", "[explore.worker_weights]",
    ];
    const KEYS: &[&str] = &[
        "workload", "description", "workers", "schedule", "explore", "exhaustive", "expect_trace", "config", "events",
        "invariants", "external", "name", "payment", "decisions_max", "sqs_faults", "pg_faults", "redis_faults", "stops", "applied", "crash", "visibility_timeout_s",
        "sql", "kind", "command", "points", "labels", "step_timeout_s", "systems", "colour", "bad", "explore.decisions_max",
        "config.visibility_timeout_s", "config.fifo_queues", "config.dead_letter", "\"workers\"", "worker_weights",
        "explore.worker_weights", "p", "c1", "ret",
    ];
    const VALUES: &[&str] = &[
        "\"p c1\"", "\"p c1 c1\"", "\"x1\"", "\"c1 c3\"", "\"\"", "\"payout\"", "\"ledger\"", "5", "-1", "0", "43201", "1000000",
        "9223372036854775807", "true", "1.5", "[]", "[\"commit\"]", "[\"Commit\"]", "[1, \"a\"]", "{ a = 1 }", "{}", "{ p = 4 }", "{ c1 = 0 }",
        "\"\"\"\np:lock c1:zz\n\"\"\"", "\"\"\"\np c9:recv\n\"\"\"", "'p dispatch:e7'", "\"c1\\nzz\"", "\"e1\"", "\"excess\"",
        "\"sometimes\"", "\"SELECT 1\"", "\"  \"", "[\"python3\"]", "{ recv = \"after_nowhere\" }", "1979-05-27",
        "[\n  \"a\",\n  1,\n]", "\"tick:36501d\"",
    ];
    let line = prop_oneof![
        1 => select(HEADERS).prop_map(str::to_string),
        4 => (select(KEYS), select(VALUES)).prop_map(|(k, v)| format!("{k} = {v}")),
    ];
    (any::<bool>(), proptest::collection::vec(line, 0..12))
        .prop_map(|(after_good, lines)| format!("{}{}\n", if after_good { GOOD } else { "" }, lines.join("\n")))
}

proptest! {
    #[test]
    fn mutated_scenario_files_never_panic_and_errors_name_file_line_and_field(
        file in select(corpus()),
        mutations in proptest::collection::vec(mutation(interesting_byte()), 1..5),
    ) {
        let scratch = Scratch::new();
        let mut bytes = file;
        for m in &mutations {
            m.apply(&mut bytes, &b'\n');
        }
        check(&scratch, &bytes)?;
    }

    #[test]
    fn arbitrary_bytes_never_panic_and_errors_name_file_and_line(
        bytes in prop_oneof![proptest::collection::vec(any::<u8>(), 0..300), any::<String>().prop_map(String::into_bytes)],
    ) {
        check(&Scratch::new(), &bytes)?;
    }

    #[test]
    fn scenario_like_toml_never_panics_and_errors_name_file_line_and_field(text in scenario_like_toml()) {
        check(&Scratch::new(), text.as_bytes())?;
    }
}

#[test]
fn every_repository_scenario_loads_with_the_stand_in_workloads() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios");
    for (path, _) in repository_scenarios() {
        if let Err(e) = load(&root, &path, &registry()) {
            panic!("{e:#}");
        }
    }
    assert!(Scratch::new().load(GOOD).is_ok());
}

#[test]
fn non_utf8_bytes_are_refused_with_file_line_and_column() {
    let s = Scratch::new();
    let path = s.path.display().to_string();
    let mut bytes = GOOD.as_bytes().to_vec();
    bytes.insert(16, 0xff);
    let e = s.load(&bytes).unwrap_err();
    assert!(e.starts_with(&format!("{path}:1:17: field `description`: byte 0xff is not UTF-8; expected a UTF-8 text file")), "{e}");
    let mut bytes = GOOD.replace("c1:recv", "c1:recv é").into_bytes();
    let at = bytes.windows(2).position(|w| w == "é".as_bytes()).unwrap();
    bytes[at + 1] = b'x';
    let e = s.load(&bytes).unwrap_err();
    assert!(e.starts_with(&format!("{path}:5:9: field `schedule`: byte 0xc3 is not UTF-8")), "{e}");
    let e = s.load([0xff, 0xfe, b'd', 0]).unwrap_err();
    assert!(e.starts_with(&format!("{path}:1:1: byte 0xff is not UTF-8")), "a UTF-16 file: {e}");
}

#[test]
fn duplicate_and_unknown_worker_names_are_refused_with_their_line() {
    let s = Scratch::new();
    let path = s.path.display().to_string();
    let e = s.error(&GOOD.replace("p c1 c2", "p c1 c2 c1"));
    assert!(e.contains(&format!("{path}:2: field `workers`: `c1` is named twice; expected each worker once")), "{e}");
    let e = s.error(&GOOD.replace("p c1 c2", "p c1 x1"));
    assert!(e.contains(&format!("{path}:2: field `workers`: `x1` is not a worker name of workload `payout`")), "{e}");
    let e = s.error(&GOOD.replace("c1:recv", "c1:recv c3:recv"));
    assert!(e.contains(&format!("{path}:5: field `schedule`: `c3:recv`: no worker `c3` (workers: p c1 c2)")), "{e}");
    let e = s.error(&GOOD.replace("c1:recv", "c1:recv\n  dispatch:e7"));
    assert!(e.contains(&format!("{path}:6: field `schedule`: `dispatch:e7`: no event `e7` (events: e1)")), "{e}");
    let e = s.error(&format!("{GOOD}[exhaustive]\nworkers = \"c1 c3\"\n"));
    assert!(e.contains(&format!("{path}:12: field `exhaustive.workers`: `c3` is not one of the scenario's workers (p c1 c2)")), "{e}");
    assert!(s.load(format!("{GOOD}[exhaustive]\nworkers = \"c1 c2\"\n")).is_ok());
}

#[test]
fn an_empty_schedule_loads_as_no_decisions() {
    let s = Scratch::new();
    for schedule in ["\"\"", "''", "\"\"\"\n# the drain alone\n\"\"\""] {
        let text = GOOD.replace("\"\"\"\np:lock p:send\nc1:recv\n\"\"\"", schedule);
        assert_eq!(s.load(&text).unwrap().schedule.decisions, vec![], "{text}");
    }
}

#[test]
fn a_million_decisions_in_a_file_are_refused_quickly_with_their_line() {
    let s = Scratch::new();
    let path = s.path.display().to_string();
    let million = vec![vec!["c1"; 100].join(" "); 10_000].join("\n");
    let text = GOOD.replace("p:lock p:send\nc1:recv", &million);
    let t0 = Instant::now();
    let e = s.error(&text);
    assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
    // Decision 10,001 opens the schedule's line 101, the file's line 104.
    assert!(e.starts_with(&format!("{path}:104: field `schedule`: `c1`: a schedule has at most 10000 decisions")), "{}", e.chars().take(300).collect::<String>());
    let explore = "description = \"d\"\nworkers = \"p c1\"\n[explore]\ndecisions_max = 1000000\n[[events]]\nname = \"e1\"\n";
    let e = s.error(explore);
    assert!(e.contains(&format!("{path}:4: field `explore.decisions_max`: expected at most 10000 decisions per schedule, found 1000000")), "{e}");
    assert_eq!(s.load(explore.replace("1000000", "10000")).unwrap().explore.unwrap().decisions_max, 10_000);
}

#[test]
fn a_tick_past_the_logical_clock_limit_names_file_and_line() {
    let s = Scratch::new();
    let path = s.path.display().to_string();
    let e = s.error(&GOOD.replace("c1:recv", "c1:recv tick:36501d"));
    assert!(e.contains(&format!("{path}:5: field `schedule`: `tick:36501d`: `36501d` is longer than 36500d")), "{e}");
    let e = s.error(&GOOD.replace("c1:recv", "tick:20000d\ntick:20000d"));
    assert!(e.contains(&format!("{path}:6: field `schedule`: `tick:20000d`: the ticks up to here add up to more than 36500d")), "{e}");
    // With escapes the schedule's lines are not the file's: the error names its first line.
    let e = s.error(&GOOD.replace("\"\"\"\np:lock p:send\nc1:recv\n\"\"\"", "\"p:lock\\nc1:ZZ\""));
    assert!(e.contains(&format!("{path}:3: field `schedule`: `c1:ZZ`")), "{e}");
}

#[test]
fn visibility_timeouts_past_the_sqs_maximum_are_refused() {
    let s = Scratch::new();
    let path = s.path.display().to_string();
    for v in ["43201", "9223372036854775807", "0", "-30", "\"soon\""] {
        let e = s.error(&format!("{GOOD}[config]\nvisibility_timeout_s = {v}\n"));
        let expected = format!(
            "{path}:12: field `config.visibility_timeout_s`: expected a positive number of seconds, at most 43200 (SQS's maximum, 12 h), found {v}"
        );
        assert!(e.contains(&expected), "{e}");
    }
    assert_eq!(s.load(format!("{GOOD}[config]\nvisibility_timeout_s = 43200\n")).unwrap().visibility_timeout_s, Some(43_200));
    let e = s.error(&format!("{GOOD}[config]\nbad = 1\n"));
    assert!(e.contains(&format!("{path}:11: field `config`: unknown field `bad`")), "{e}");
}

#[test]
fn fifo_queues_must_be_the_workloads_queues() {
    let s = Scratch::new();
    let path = s.path.display().to_string();
    let scenario = s.load(format!("{GOOD}[config]\nfifo_queues = [\"payments\"]\n")).unwrap();
    assert_eq!(scenario.fifo_queues, vec!["payments"]);
    let q = crate::scenario::queues(&scenario);
    assert!(q.iter().map(|q| (q.name, q.fifo)).eq([("payments", true), ("payouts", false)]), "{q:?}");
    for (v, found) in [("[\"nope\"]", "\"nope\""), ("[3]", "3"), ("\"payments\"", "\"payments\"")] {
        let e = s.error(&format!("{GOOD}[config]\nfifo_queues = {v}\n"));
        assert!(e.contains(&format!("{path}:12: field `config.fifo_queues`: expected ")), "{e}");
        assert!(e.contains("(payments, payouts)") && e.ends_with(&format!("found {found}")), "{e}");
    }
}

#[test]
fn toml_errors_name_the_field_and_the_line() {
    let s = Scratch::new();
    let path = s.path.display().to_string();
    let cases = [
        (GOOD.replace("\"p c1 c2\"", "5"), "field `workers`", "line 2"),
        (GOOD.replace("workers = \"p c1 c2\"\n", ""), "field `workers`", "missing field `workers`"),
        (format!("colour = 1\n{GOOD}"), "field `colour`", "line 1"),
        (GOOD.replace("description = \"d\"", "description = \"d\"\nexpect_trace = [\n  \"a\",\n  1,\n]"), "field `expect_trace`", "line 4"),
        (format!("{GOOD}[explore]\ndecisions_max = -1\n"), "field `explore.decisions_max`", "line 12"),
        (format!("{GOOD}[exhaustive]\ncrash = true\n"), "field `exhaustive.workers`", "missing field `workers`"),
        (format!("{GOOD}[[invariants]]\nname = \"x\"\nsql = \"SELECT 1\"\nsevere = true\n"), "field `invariants.severe`", "line 14"),
        (GOOD.replace("\"\"\"\np:lock p:send\nc1:recv\n\"\"\"", "\"p:lock\" c1"), "field `schedule`", "line 3"),
        (GOOD.replace("description = \"d\"\n", "description = \"d\"\n\"\n"), "", "line 2"),
    ];
    for (text, field, line) in cases {
        let e = s.error(&text);
        assert!(e.starts_with(&format!("{path}: {field}")) && e.contains(line), "{field}, {line}: {e}");
    }
}

#[test]
fn event_and_invariant_errors_name_their_table_line() {
    let s = Scratch::new();
    let path = s.path.display().to_string();
    let e = s.error(&format!("{GOOD}\n[[events]]\npayment = \"p2\"\n"));
    assert!(e.contains(&format!("{path}:12: field `events[1].name`: expected a label such as \"e1\"")), "{e}");
    let e = s.error(&format!("{GOOD}bad = 1\n"));
    assert!(e.contains(&format!("{path}: field `events`: events[0] (e1): unknown field `bad` (line 8)")), "{e}");
    let e = s.error(&GOOD[..GOOD.find("[[events]]").unwrap()]);
    assert!(e.contains(&format!("{path}:1: field `events`: expected at least one [[events]] table")), "{e}");
    let invariant = "[[invariants]]\nname = \"x\"\nsql = \"SELECT 1\"\n";
    let e = s.error(&format!("{GOOD}{invariant}kind = \"sometimes\"\n"));
    assert!(e.contains(&format!("{path}:11: field `invariants[0].kind` (x): expected `excess` or `missing`, found `sometimes`")), "{e}");
    let e = s.error(&format!("{GOOD}{invariant}{}", invariant.replace("SELECT 1", " ")));
    assert!(e.contains(&format!("{path}:14: field `invariants[1].sql` (x): expected a query")), "{e}");
    let e = s.error(&format!("{GOOD}[explore]\napplied = [\"Commit\"]\n"));
    assert!(e.contains(&format!("{path}:12: field `explore.applied`: `Commit` is not a call name")), "{e}");
}

#[test]
fn worker_weight_errors_name_the_worker_and_its_line() {
    let s = Scratch::new();
    let path = s.path.display().to_string();
    let e = s.error(&format!("{GOOD}[explore]\nworker_weights = {{ c9 = 2 }}\n"));
    assert!(e.contains(&format!("{path}:12: field `explore.worker_weights.c9`: `c9` is not one of the scenario's workers (p c1 c2)")), "{e}");
    let e = s.error(&format!("{}[explore]\nworker_weights = {{ ret = 2 }}\n", GOOD.replace("p c1 c2", "p c1 c2 ret")));
    assert!(e.contains(&format!("{path}:12: field `explore.worker_weights.ret`: `ret` is periodic")), "{e}");
    let e = s.error(&format!("{}[explore]\n", GOOD.replace("p c1 c2", "ret")));
    assert!(e.contains(&format!("{path}:2: field `workers`: every worker is periodic (ret)")), "{e}");
    let e = s.error(&format!("{GOOD}[explore]\ndecisions_max = 4\n\n[explore.worker_weights]\nc1 = 1\np = 0\n"));
    assert!(e.contains(&format!("{path}:16: field `explore.worker_weights.p`: expected a weight from 1 to 1000, found 0")), "{e}");
    let e = s.error(&format!("{GOOD}[explore]\nworker_weights = {{ p = 4294967295, c1 = 4294967295 }}\n"));
    assert!(e.contains(&format!("{path}:12: field `explore.worker_weights.c1`: expected a weight from 1 to 1000, found 4294967295")), "{e}");
}
