//! Malformed schedule text: [`parse`] never panics, and each error points at its
//! token by line and column.
//!
//! proptest feeds it arbitrary strings, soups of near-miss tokens, and valid schedules (the
//! repository's scenarios' own, and random ones built from their tokens) after random edits:
//! deletions, duplications, truncations, inserted characters, swapped lines. `cargo test` runs
//! 256 cases per property (proptest's default); a longer run:
//! `PROPTEST_CASES=100000 cargo test -p crashpoint --lib fuzz`.
//!
//! The edge cases are tests of their own: a tick past the logical clock's limit, a million
//! decisions, an empty schedule, columns counted in characters. The mutation and corpus helpers
//! are shared with the scenario loader's fuzz tests (`crate::scenario::fuzz`).

use std::fmt::Debug;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use proptest::prelude::*;
use proptest::sample::{select, Index};

use super::text::DECISIONS_MAX;
use super::text::ParseError;
use super::{parse, Decision, Vocabulary};
use crate::duration::LOGICAL_TIME_MAX_MS;
use crate::spec::{RoleKind, RoleSpec};

/// The roles of the repository's workloads (payout, counter, orders) in one list, every crash
/// point of a prefix together: any of their scenarios parses against it.
pub(crate) const ROLES: &[RoleSpec] = &[
    RoleSpec { prefix: "p", kind: RoleKind::Producer, points: &["after_lock", "after_send"], about: "producer" },
    RoleSpec {
        prefix: "c",
        kind: RoleKind::Handler { queue: "q" },
        points: &[
            "after_receive",
            "after_claim",
            "after_business_insert",
            "between_handlers",
            "after_commit",
            "after_call",
            "after_delete",
        ],
        about: "consumer",
    },
    RoleSpec { prefix: "r", kind: RoleKind::Poller, points: &["relay_after_select", "relay_after_send", "relay_after_mark"], about: "relay" },
    RoleSpec { prefix: "d", kind: RoleKind::Handler { queue: "q2" }, points: &[], about: "downstream" },
    RoleSpec { prefix: "ret", kind: RoleKind::Periodic, points: &[], about: "retention job" },
    RoleSpec { prefix: "o", kind: RoleKind::Poller, points: &["after_lease", "after_call"], about: "operation processor" },
    RoleSpec { prefix: "rec", kind: RoleKind::Poller, points: &["after_lookup"], about: "reconciliation job" },
];

/// The repository's workloads' own faults.
pub(crate) const FAULTS: &[&str] = &["replay", "manual-replay"];

/// The repository's workloads' external providers.
pub(crate) const PROVIDERS: &[&str] = &["gateway", "accounting", "mail"];

/// [`ROLES`], [`FAULTS`] and [`PROVIDERS`] as a vocabulary.
pub(crate) fn vocabulary() -> Vocabulary {
    Vocabulary { roles: ROLES.to_vec(), faults: FAULTS.to_vec(), providers: PROVIDERS.to_vec(), webhooks: Vec::new(), routes: Vec::new() }
}

/// Every scenario file of the repository (`scenarios/**.toml`) with its text, sorted by path.
pub(crate) fn repository_scenarios() -> Vec<(PathBuf, String)> {
    fn walk(dir: &Path, out: &mut Vec<(PathBuf, String)>) {
        for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("reading {}: {e}", dir.display())) {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|x| x == "toml") {
                let text = std::fs::read_to_string(&path).unwrap();
                out.push((path, text));
            }
        }
    }
    let mut out = Vec::new();
    walk(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios"), &mut out);
    out.sort();
    assert!(out.len() >= 20, "the repository's scenarios are the fuzz corpus; found {}", out.len());
    out
}

/// The scripted schedules of the repository's scenarios.
fn repository_schedules() -> Vec<String> {
    repository_scenarios()
        .iter()
        .filter_map(|(_, text)| text.parse::<toml::Table>().ok()?.get("schedule")?.as_str().map(str::to_string))
        .collect()
}

/// Valid decisions the repository's schedules do not use, so that every form is in the corpus.
const MORE_TOKENS: &[&str] = &[
    "c1:crash",
    "c2:crash@after_commit",
    "c1:crash@commit:applied",
    "c1:fail@after_claim",
    "c1:restart",
    "r1:crash@relay_after_send",
    "ret",
    "ret:purge",
    "replay",
    "manual-replay",
    "dispatch:e1",
    "redis:restart",
    "redis:lose-lock",
    "sqs:stale-delete-noop",
    "sqs:redeliver-after-delete",
    "sqs:receive-lost",
    "net:drop-request@gateway",
    "net:delay@mail:40s",
    "net:partition@accounting",
    "provider:5xx-after@gateway",
    "tick:400d",
    "tick:1500ms",
    "tick:0s",
];

/// Tokens that are almost decisions: each stops the parser somewhere else.
const NEAR_MISSES: &[&str] = &[
    "", ":", "@", "::", "c", "c1:", "c1:@", "c1@", "1c", "c1x", "cc1", "p0", "ret1:", "c1:crash@", "c1:crash@:applied",
    "c1:crash@Commit:applied", "c1:crash@after_lunch", "c1:fail", "c1:fail@", "c1:restart@after_claim", "c1:bogus@x",
    "c1:Recv", "c1:recv:now", "tick", "tick:", "tick:s", "tick:5", "tick:-5s", "tick:+5s", "tick:5y", "tick:1.5s",
    "tick:36501d", "tick:18446744073709551615ms", "tick:99999999999999999999999d", "tick:９s", "dispatch", "dispatch:",
    "sqs", "sqs:", "sqs:nope", "pg", "pg:", "pg:nope", "redis", "redis:", "redis:lose", "net", "net:", "net:drop-request", "net:drop-request@", "net:delay@gateway",
    "net:delay@gateway:", "net:delay@gateway:99999999999d", "net:nope@gateway", "net:heal@nowhere", "provider:delay@gateway:1s",
    "é", "c1:é", "\u{0}", "#", "c1#x", "replay:", "Replay",
];

/// Token separators, comments included.
const SEPARATORS: &[&str] = &[" ", "  ", "\t", "\n", "\r\n", " # a comment\n", "\n\n", "\u{a0}", "\u{2003}"];

/// One random edit of a text held as a list of units (characters or bytes).
#[derive(Debug, Clone)]
pub(crate) enum Mutation<T> {
    /// Remove up to `n` units at a place.
    Delete(Index, usize),
    /// Repeat up to `n` units at a place right after themselves.
    Duplicate(Index, usize),
    /// Cut the text at a place.
    Truncate(Index),
    /// Insert units at a place.
    Insert(Index, Vec<T>),
    /// Swap two lines.
    SwapLines(Index, Index),
}

impl<T: Clone + PartialEq> Mutation<T> {
    /// Applies the edit to `text`, whose lines `newline` ends.
    pub(crate) fn apply(&self, text: &mut Vec<T>, newline: &T) {
        let len = text.len();
        let place = |i: &Index| i.index(len + 1);
        match self {
            Mutation::Delete(i, n) => {
                let a = place(i);
                text.drain(a..(a + n).min(len));
            }
            Mutation::Duplicate(i, n) => {
                let a = place(i);
                let b = (a + n).min(len);
                let copy = text[a..b].to_vec();
                text.splice(b..b, copy);
            }
            Mutation::Truncate(i) => text.truncate(place(i)),
            Mutation::Insert(i, units) => {
                let a = place(i);
                text.splice(a..a, units.iter().cloned());
            }
            Mutation::SwapLines(a, b) => {
                let mut lines: Vec<Vec<T>> = text.split(|u| u == newline).map(<[T]>::to_vec).collect();
                let (a, b) = (a.index(lines.len()), b.index(lines.len()));
                lines.swap(a, b);
                *text = lines.join(newline);
            }
        }
    }
}

/// Random edits whose inserted units come from `unit`.
pub(crate) fn mutation<T: Clone + Debug + 'static>(unit: impl Strategy<Value = T> + 'static) -> BoxedStrategy<Mutation<T>> {
    prop_oneof![
        (any::<Index>(), 1..24usize).prop_map(|(i, n)| Mutation::Delete(i, n)),
        (any::<Index>(), 1..24usize).prop_map(|(i, n)| Mutation::Duplicate(i, n)),
        any::<Index>().prop_map(Mutation::Truncate),
        (any::<Index>(), proptest::collection::vec(unit, 1..8)).prop_map(|(i, u)| Mutation::Insert(i, u)),
        (any::<Index>(), any::<Index>()).prop_map(|(a, b)| Mutation::SwapLines(a, b)),
    ]
    .boxed()
}

/// Characters that matter to schedules and TOML, or to counting columns, half the time; any
/// character the other half.
fn interesting_char() -> impl Strategy<Value = char> {
    let special: Vec<char> = " \t\n\r#:@\"'[]{}=,.\\0123456789abcdlpstxz_-é→\u{0}\u{a0}\u{feff}".chars().collect();
    prop_oneof![select(special), any::<char>()]
}

/// `text` after `mutations`, edited character by character.
fn mutate(text: &str, mutations: &[Mutation<char>]) -> String {
    let mut chars: Vec<char> = text.chars().collect();
    for m in mutations {
        m.apply(&mut chars, &'\n');
    }
    chars.into_iter().collect()
}

/// A schedule text of `tokens` separated by `separators` (taken in turn).
fn join(tokens: &[String], separators: &[&str]) -> String {
    let mut out = String::new();
    for (i, t) in tokens.iter().enumerate() {
        if i > 0 {
            out.push_str(separators[i % separators.len()]);
        }
        out.push_str(t);
    }
    out
}

/// Valid schedule texts: the repository's, and random ones made of their tokens and every
/// other decision form.
fn valid_schedule() -> BoxedStrategy<String> {
    let schedules = repository_schedules();
    let mut tokens: Vec<String> = schedules.iter().flat_map(|s| super::text::tokens(s).map(|t| t.text.to_string())).collect();
    tokens.extend(MORE_TOKENS.iter().map(|t| t.to_string()));
    tokens.sort();
    tokens.dedup();
    let random = (proptest::collection::vec(select(tokens), 0..40), proptest::collection::vec(select(SEPARATORS), 1..4))
        .prop_map(|(tokens, separators)| join(&tokens, &separators));
    prop_oneof![select(schedules), random].boxed()
}

/// Checks that `e`, an error of parsing `text`, points at its token: line `e.line`, from
/// character `e.column` on, holds `e.token`, and it says what is wrong.
fn assert_points_at_its_token(text: &str, e: &ParseError) -> Result<(), TestCaseError> {
    let line = text.lines().nth(e.line.wrapping_sub(1));
    prop_assert!(line.is_some(), "line {} of a text of {} lines: {e}", e.line, text.lines().count());
    prop_assert!(e.column >= 1, "{e}");
    let at: String = line.unwrap_or_default().chars().skip(e.column - 1).collect();
    prop_assert!(!e.token.is_empty() && at.starts_with(&e.token), "line {} from column {} is {at:?}, not `{}`", e.line, e.column, e.token);
    prop_assert!(!e.message.trim().is_empty(), "{e}");
    Ok(())
}

/// Checks what parsing `text` gives: a schedule that prints and parses back to itself, or an
/// error that points at its token.
fn check(text: &str) -> Result<(), TestCaseError> {
    let vocabulary = vocabulary();
    match parse(text, &vocabulary) {
        Ok(s) => prop_assert_eq!(parse(&s.to_string(), &vocabulary).map_err(|e| e.to_string()), Ok(s)),
        Err(e) => assert_points_at_its_token(text, &e)?,
    }
    Ok(())
}

proptest! {
    #[test]
    fn arbitrary_text_never_panics_and_errors_have_a_position(text in prop_oneof![any::<String>(), "[ -~\t\n]{0,200}"]) {
        check(&text)?;
    }

    #[test]
    fn near_miss_tokens_never_panic_and_errors_point_at_their_token(
        tokens in proptest::collection::vec(prop_oneof![select(NEAR_MISSES), select(MORE_TOKENS)], 0..24),
        separators in proptest::collection::vec(select(SEPARATORS), 1..4),
    ) {
        let tokens: Vec<String> = tokens.iter().map(|t| t.to_string()).collect();
        check(&join(&tokens, &separators))?;
    }

    #[test]
    fn mutated_valid_schedules_never_panic_and_errors_point_at_their_token(
        text in valid_schedule(),
        mutations in proptest::collection::vec(mutation(interesting_char()), 1..5),
    ) {
        prop_assert!(parse(&text, &vocabulary()).is_ok(), "the corpus is valid: {}", text);
        check(&mutate(&text, &mutations))?;
    }
}

#[test]
fn the_repository_schedules_parse_against_the_fuzz_vocabulary() {
    let schedules = repository_schedules();
    assert!(schedules.len() >= 20, "{} schedules", schedules.len());
    for s in &schedules {
        parse(s, &vocabulary()).unwrap_or_else(|e| panic!("{e} in\n{s}"));
    }
    for t in MORE_TOKENS {
        parse(t, &vocabulary()).unwrap_or_else(|e| panic!("{e}"));
    }
}

#[test]
fn a_tick_past_the_logical_clock_limit_is_refused_where_it_stands() {
    let vocabulary = vocabulary();
    let ok = parse("tick:36500d", &vocabulary).unwrap();
    assert_eq!(ok.decisions, vec![Decision::Tick { ms: LOGICAL_TIME_MAX_MS }]);
    for (text, column) in [("c1 tick:36501d", 4), ("c1 tick:18446744073709551615ms", 4), ("c1 tick:99999999999999999999999d", 4)] {
        let e = parse(text, &vocabulary).unwrap_err();
        assert_eq!((e.line, e.column), (1, column), "{e}");
        assert!(e.message.contains("is longer than 36500d, the logical clock's limit"), "{e}");
    }
    // Ticks that each fit but add up past the limit: the one that passes it is named.
    let e = parse("tick:20000d c1\n  tick:10000d tick:10000d", &vocabulary).unwrap_err();
    assert_eq!((e.line, e.column, e.token.as_str()), (2, 15, "tick:10000d"), "{e}");
    assert!(e.message.contains("add up to more than 36500d"), "{e}");
    // The same through a network delay.
    let e = parse("net:delay@gateway:99999999999d", &vocabulary).unwrap_err();
    assert!(e.message.contains("is longer than 36500d"), "{e}");
}

#[test]
fn a_million_decisions_are_refused_at_the_limit_quickly() {
    let vocabulary = vocabulary();
    let at_limit = vec!["c1"; DECISIONS_MAX].join(" ");
    assert_eq!(parse(&at_limit, &vocabulary).unwrap().decisions.len(), DECISIONS_MAX);
    // A million on one line, and a million over 10,000 lines.
    let one_line = vec!["c1"; 1_000_000].join(" ");
    let many_lines = vec![vec!["c1:recv"; 100].join(" "); 10_000].join("\n");
    for (text, line, column) in [(one_line, 1, 3 * DECISIONS_MAX + 1), (many_lines, DECISIONS_MAX / 100 + 1, 1)] {
        let t0 = Instant::now();
        let e = parse(&text, &vocabulary).unwrap_err();
        assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
        assert_eq!((e.line, e.column), (line, column), "{e}");
        assert!(e.message.contains("a schedule has at most 10000 decisions"), "{e}");
    }
}

#[test]
fn an_empty_schedule_is_no_decisions() {
    for text in ["", "   ", "\n\n\t\r\n", "# nothing yet\n  # still nothing", "\u{a0}\u{2003}"] {
        assert_eq!(parse(text, &vocabulary()).unwrap().decisions, vec![], "{text:?}");
    }
}

#[test]
fn unknown_worker_prefixes_are_refused_and_the_known_forms_listed() {
    for (text, token) in [("p x1", "x1"), ("p c1 1c", "1c"), ("p cc1", "cc1"), ("c1x", "c1x"), ("é", "é")] {
        let e = parse(text, &vocabulary()).unwrap_err();
        assert_eq!(e.token, token);
        assert!(e.message.contains("expected a worker or a fault (p, c1, r1, d1, ret, o1, rec1, `replay`, `manual-replay`)"), "{e}");
    }
}

#[test]
fn columns_count_characters_not_bytes() {
    let e = parse("c1\u{2003}\u{2003}zz", &vocabulary()).unwrap_err();
    assert_eq!((e.line, e.column, e.token.as_str()), (1, 5, "zz"), "{e}");
    let e = parse("c1 # é → comment\n  c1\u{a0}zz", &vocabulary()).unwrap_err();
    assert_eq!((e.line, e.column, e.token.as_str()), (2, 6, "zz"), "{e}");
}
