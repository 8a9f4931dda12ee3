//! Parsing the text form of a schedule.

use std::fmt;

use super::{Decision, Schedule};
use crate::duration::LOGICAL_TIME_MAX_MS;
pub use crate::duration::{format_duration_ms, parse_duration_ms};
use crate::spec::{role_of, CrashPoint, RoleKind, RoleSpec};

/// The names a schedule may use: the workload's roles (worker name prefixes and their crash
/// points) and its own faults.
#[derive(Debug, Clone, Default)]
pub struct Vocabulary {
    /// The roles.
    pub roles: Vec<RoleSpec>,
    /// The workload's own fault names (e.g. `replay`).
    pub faults: Vec<&'static str>,
    /// The workload's external providers (targets of `net:…@<p>` and `provider:…@<p>`).
    pub providers: Vec<&'static str>,
    /// Those of them that send webhooks (targets of `webhook:…@<p>`).
    pub webhooks: Vec<&'static str>,
    /// Their routes (provider, label, whether it applies effects): targets of the request
    /// faults aimed at a route (`net:drop-response@<p>/<route>`).
    pub routes: Vec<(&'static str, &'static str, bool)>,
}

/// Whether `label` can be a call's label: lower-case letters, digits and `_`, starting with a
/// letter (`commit`, `insert_outbox`, `delete_batch`).
fn is_call_label(label: &str) -> bool {
    label.starts_with(|c: char| c.is_ascii_lowercase()) && label.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

impl Vocabulary {
    /// Every crash point, in role order, without repeats.
    pub fn points(&self) -> Vec<CrashPoint> {
        let mut out: Vec<CrashPoint> = Vec::new();
        for p in self.roles.iter().flat_map(|r| r.points.iter()) {
            if !out.contains(p) {
                out.push(p);
            }
        }
        out
    }

    /// The crash point named `name`: a declared one, or the boundary after a call,
    /// `after_<call label>` ([`crate::spec::after_call`]), which every call has. A call label
    /// is only known when a worker makes the call: a boundary no worker reaches is reported
    /// when the schedule runs. Errors: any other name, listing the declared ones.
    pub fn point(&self, name: &str) -> Result<CrashPoint, String> {
        let all = self.points();
        if let Some(p) = all.iter().copied().find(|p| *p == name) {
            return Ok(p);
        }
        match name.strip_prefix(crate::spec::AFTER_CALL_PREFIX) {
            Some(label) if is_call_label(label) => Ok(crate::spec::after_call(label)),
            _ => Err(format!(
                "unknown crash point `{name}`; expected one of {}, or `after_<call>` for the boundary after any call (`after_commit`)",
                all.join(", ")
            )),
        }
    }

    fn worker_forms(&self) -> String {
        let mut forms: Vec<String> = self
            .roles
            .iter()
            .map(|r| match r.kind {
                RoleKind::Producer | RoleKind::Periodic => r.prefix.to_string(),
                _ => format!("{}1", r.prefix),
            })
            .collect();
        forms.extend(self.faults.iter().map(|f| format!("`{f}`")));
        forms.join(", ")
    }
}

/// The most decisions a schedule may have. A scripted schedule is written by hand and a
/// generated one has at most `[explore] decisions_max`, which the scenario loader keeps under
/// this too; the limit stops a runaway file early, with a position.
pub const DECISIONS_MAX: usize = 10_000;

/// A token that is not a decision, with its position (1-based line and column within the
/// schedule text) and what was expected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    /// Line within the schedule text, 1-based.
    pub line: usize,
    /// Column within that line, 1-based, in characters.
    pub column: usize,
    /// The offending token.
    pub token: String,
    /// What is wrong and what was expected.
    pub message: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "line {}, column {}: `{}`: {}",
            self.line, self.column, self.token, self.message
        )
    }
}

impl std::error::Error for ParseError {}

/// Parses a schedule's text form (see the module docs of [`crate::schedule`]).
/// Errors: the first token that is not a decision, the decision past [`DECISIONS_MAX`], or the
/// tick that carries the sum of ticks past [`LOGICAL_TIME_MAX_MS`] (`36500d`), each with its
/// line and column.
pub fn parse(text: &str, vocabulary: &Vocabulary) -> Result<Schedule, ParseError> {
    let mut decisions = Vec::new();
    let mut clock_ms: u64 = 0;
    for token in tokens(text) {
        let at = |message: String| ParseError {
            line: token.line,
            column: token.column(),
            token: token.text.to_string(),
            message,
        };
        if decisions.len() == DECISIONS_MAX {
            return Err(at(format!(
                "a schedule has at most {DECISIONS_MAX} decisions; this is decision {}",
                DECISIONS_MAX + 1
            )));
        }
        let d = parse_token(token.text, vocabulary).map_err(at)?;
        if let Decision::Tick { ms } = d {
            // Each tick is at most LOGICAL_TIME_MAX_MS, and so is the sum so far: no overflow.
            clock_ms += ms;
            if clock_ms > LOGICAL_TIME_MAX_MS {
                return Err(at(format!(
                    "the ticks up to here add up to more than {}, the logical clock's limit",
                    format_duration_ms(LOGICAL_TIME_MAX_MS)
                )));
            }
        }
        decisions.push(d);
    }
    Ok(Schedule { decisions })
}

/// One whitespace-separated token of a schedule's text, outside comments, with its place.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Token<'t> {
    /// Line within the schedule text, 1-based.
    pub line: usize,
    /// The token.
    pub text: &'t str,
    /// Its line without the comment.
    code: &'t str,
    /// Its byte offset within `code`.
    start: usize,
}

impl Token<'_> {
    /// Column within its line, 1-based, in characters (counted only when asked: an error).
    pub fn column(&self) -> usize {
        self.code[..self.start].chars().count() + 1
    }
}

/// The tokens of a schedule's text, in order: what [`parse`] reads, one decision each.
pub(crate) fn tokens(text: &str) -> impl Iterator<Item = Token<'_>> {
    text.lines().enumerate().flat_map(|(i, line)| {
        let code = line.split('#').next().unwrap_or("");
        let mut start = 0;
        std::iter::from_fn(move || {
            let rest = &code[start..];
            start += rest.len() - rest.trim_start().len();
            let rest = &code[start..];
            if rest.is_empty() {
                return None;
            }
            let len = rest.find(char::is_whitespace).unwrap_or(rest.len());
            let token = Token {
                line: i + 1,
                text: &rest[..len],
                code,
                start,
            };
            start += len;
            Some(token)
        })
    })
}

/// The longest `pause:` (real time), ms.
pub const PAUSE_MAX_MS: u64 = 60_000;

fn parse_token(token: &str, vocabulary: &Vocabulary) -> Result<Decision, String> {
    if token == "redis:restart" {
        return Ok(Decision::RedisRestart);
    }
    if let Some(f) = vocabulary.faults.iter().find(|f| **f == token) {
        return Ok(Decision::Fault(f));
    }
    let (head, rest) = match token.split_once(':') {
        Some((h, r)) => (h, Some(r)),
        None => (token, None),
    };
    match (head, rest) {
        ("tick", Some(d)) => return parse_duration_ms(d).map(|ms| Decision::Tick { ms }),
        ("pause", Some(d)) => {
            return match parse_duration_ms(d)? {
                ms if ms > PAUSE_MAX_MS => Err(format!("a pause is real time: at most {}", format_duration_ms(PAUSE_MAX_MS))),
                ms => Ok(Decision::Pause { ms }),
            }
        }
        ("pause", None) => return Err("expected `pause:<duration>` of real time, e.g. `pause:1500ms`".into()),
        ("tick", None) => return Err("expected `tick:<duration>`, e.g. `tick:31s`".into()),
        ("dispatch", Some(e)) if !e.is_empty() => {
            return Ok(Decision::Dispatch {
                event: e.to_string(),
            })
        }
        ("dispatch", _) => return Err("expected `dispatch:<event>`, e.g. `dispatch:e1`".into()),
        ("sqs", Some(f)) => return crate::nemesis::sqs::SqsFault::parse(f).map(Decision::Sqs),
        ("pg", Some(f)) => return crate::nemesis::pg::PgFault::parse(f).map(Decision::Pg),
        ("redis", Some(f)) => return crate::nemesis::redis::RedisFault::parse(f).map(Decision::Redis),
        ("sqs", None) => return Err("expected `sqs:<fault>`, e.g. `sqs:stale-delete-noop`".into()),
        (family @ ("net" | "provider" | "webhook"), Some(f)) => {
            return crate::nemesis::net::NetFault::parse(family, f, &vocabulary.providers, &vocabulary.webhooks, &vocabulary.routes)
                .map(Decision::Net)
        }
        _ => {}
    }
    if let Some((worker, k)) = head.split_once('/') {
        if role_of(&vocabulary.roles, worker).is_some() && rest.is_none() {
            return match k.parse::<u32>() {
                Ok(k) if k >= 1 => Ok(Decision::Step { worker: worker.to_string(), op: Some(format!("#{k}")) }),
                _ => Err(format!("expected `{worker}/<k>` with k = 1, 2, …: the k-th call {worker} holds; found `/{k}`")),
            };
        }
    }
    if role_of(&vocabulary.roles, head).is_none() {
        return Err(format!(
            "expected a worker or a fault ({}), `tick:<duration>`, `dispatch:<event>`, `redis:restart`, `redis:lose-lock` or `sqs:<fault>`",
            vocabulary.worker_forms()
        ));
    }
    let worker = head.to_string();
    let Some(rest) = rest else {
        return Ok(Decision::Step { worker, op: None });
    };
    if let Some(op) = rest
        .strip_prefix("crash@")
        .and_then(|p| p.strip_suffix(":applied"))
    {
        if op.is_empty() || !op.chars().all(|c| c.is_ascii_lowercase() || c == '_') {
            return Err(format!("expected `crash@<call>:applied`, e.g. `c1:crash@commit:applied`; `{op}` is not a call name"));
        }
        return Ok(Decision::CrashApplied {
            worker,
            op: op.to_string(),
        });
    }
    if let Some(before) = rest.strip_prefix("lag@") {
        if before.is_empty() || !before.chars().all(|c| c.is_ascii_lowercase() || c == '_') {
            return Err(format!("expected `lag@<call>`, e.g. `c1:lag@recv`; `{before}` is not a call name"));
        }
        return Ok(Decision::Lag { worker, before: before.to_string() });
    }
    let (action, at) =
        match rest.split_once('@') {
            Some((a, _)) if a != "crash" && a != "fail" => return Err(format!(
                "`{a}@…` is not a fault: expected `crash@<crash point>`, `fail@<crash point>` or `lag@<call>`"
            )),
            Some((a, p)) => (a, Some(vocabulary.point(p)?)),
            None => (rest, None),
        };
    match (action, at) {
        ("crash", at) => Ok(Decision::Crash { worker, at }),
        ("fail", Some(at)) => Ok(Decision::Fail { worker, at }),
        ("fail", None) => Err("expected `fail@<crash point>`, e.g. `c1:fail@after_claim`".into()),
        ("restart", None) => Ok(Decision::Restart { worker }),
        ("stop", None) => Ok(Decision::Stop { worker }),
        ("lag", None) => Ok(Decision::Lag { worker, before: super::LAG_BEFORE.into() }),
        (op, None) if !op.is_empty() && op.chars().all(|c| c.is_ascii_lowercase() || c == '_') => {
            Ok(Decision::Step {
                worker,
                op: Some(op.to_string()),
            })
        }
        (op, _) => Err(format!(
            "`{op}` is not a call name, `crash`, `fail@…`, `restart`, `stop` or `lag`"
        )),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A small vocabulary of its own: the engine's tests name no workload.
    pub(crate) fn vocabulary() -> Vocabulary {
        let role = |prefix, kind, points| RoleSpec {
            prefix,
            kind,
            points,
            about: "",
        };
        Vocabulary {
            roles: vec![
                role("p", RoleKind::Producer, &["after_lock", "after_send"]),
                role(
                    "c",
                    RoleKind::Handler { queue: "q" },
                    &["after_claim", "after_commit"],
                ),
                role("r", RoleKind::Poller, &["after_select"]),
                role("d", RoleKind::Handler { queue: "q2" }, &[]),
                role("ret", RoleKind::Periodic, &[]),
            ],
            faults: vec!["replay"],
            providers: vec!["gateway"],
            webhooks: Vec::new(),
            routes: vec![("gateway", "apply", true)],
        }
    }

    fn parse(text: &str) -> Result<Schedule, ParseError> {
        super::parse(text, &vocabulary())
    }

    #[test]
    fn parses_every_form_and_prints_it_back() {
        let text = "p:lock c1 c2:recv c1:crash@after_commit c1:crash c1:restart \
                    c2:fail@after_claim c2:lag tick:31s tick:1500ms replay dispatch:e1 ret:purge redis:restart \
                    net:drop-response@gateway net:delay@gateway:40s provider:5xx-after@gateway c1:lag@recv";
        let s = parse(text).unwrap();
        assert_eq!(
            s.decisions[3],
            Decision::Crash {
                worker: "c1".into(),
                at: Some("after_commit")
            }
        );
        assert_eq!(s.decisions[7], Decision::Lag { worker: "c2".into(), before: "commit".into() });
        assert_eq!(s.decisions.last(), Some(&Decision::Lag { worker: "c1".into(), before: "recv".into() }));
        // `lag@commit` is the plain lag, and prints as one.
        assert_eq!(parse("c2:lag@commit").unwrap().to_string(), "c2:lag");
        assert!(parse("c2:lag@").unwrap_err().message.contains("`lag@<call>`"));
        // A role's prefix names every worker of the role, in a lag only.
        let workers = ["p".to_string(), "c1".into(), "c2".into()];
        let role_lag = parse("c:lag@recv").unwrap();
        assert_eq!(role_lag.to_string(), "c:lag@recv");
        assert!(role_lag.unknown_names(&workers, &[]).is_empty());
        assert!(role_lag.decisions[0].names("c2") && !role_lag.decisions[0].names("p"));
        assert_eq!(parse("c:crash").unwrap().unknown_names(&workers, &[]).len(), 1, "only a lag names a role");
        assert_eq!(parse("d:lag@recv").unwrap().unknown_names(&workers, &[]).len(), 1, "a role with no worker here");
        assert_eq!(s.decisions[8], Decision::Tick { ms: 31_000 });
        assert_eq!(
            s.to_string(),
            text.split_whitespace().collect::<Vec<_>>().join(" ")
        );
        assert_eq!(parse(&s.to_string()).unwrap(), s);
    }

    #[test]
    fn errors_name_line_column_and_expectation() {
        let e = parse("c1:recv\n  c2:crash@lunch").unwrap_err();
        assert_eq!((e.line, e.column), (2, 3));
        assert!(
            e.message.contains("unknown crash point `lunch`") && e.message.contains("`after_<call>`"),
            "{e}"
        );
        // The boundary after any call is a crash point, declared or not: a call label no
        // worker makes is reported when the schedule runs.
        let s = parse("c2:crash@after_lunch c2:fail@after_insert_outbox").unwrap();
        assert_eq!(s.decisions[0], Decision::Crash { worker: "c2".into(), at: Some("after_lunch") });
        assert_eq!(s.to_string(), "c2:crash@after_lunch c2:fail@after_insert_outbox");
        assert!(parse("c2:crash@after_Lunch").is_err() && parse("c2:crash@after_").is_err());
        let e = parse("tick:5 x9").unwrap_err();
        assert!(e.message.contains("unit must be"), "{e}");
        let e = parse("c1 zz").unwrap_err();
        assert_eq!(e.column, 4);
        assert!(e.message.contains("expected a worker"), "{e}");
        let e = parse("c1:bogus@x").unwrap_err();
        assert!(e.message.contains("`bogus@…` is not a fault"), "{e}");
        let e = parse("c1:crash@Commit:applied").unwrap_err();
        assert!(e.message.contains("expected `crash@<call>:applied`"), "{e}");
    }

    #[test]
    fn an_applied_crash_names_its_call_and_prints_back() {
        let s = parse("c1:crash@commit:applied").unwrap();
        assert_eq!(
            s.decisions,
            vec![Decision::CrashApplied {
                worker: "c1".into(),
                op: "commit".into()
            }]
        );
        assert_eq!(s.to_string(), "c1:crash@commit:applied");
    }

    /// A pause of real time for the workers' own timers, bounded.
    #[test]
    fn a_pause_is_real_time_and_bounded() {
        let s = parse("pause:1500ms tick:1s").unwrap();
        assert_eq!(s.decisions[0], Decision::Pause { ms: 1500 });
        assert_eq!(s.to_string(), "pause:1500ms tick:1s");
        assert!(parse("pause:2m").unwrap_err().message.contains("at most"));
        assert!(parse("pause").unwrap_err().message.contains("pause:<duration>"));
    }

    /// A concurrent worker's k-th held call is named in text that round-trips.
    #[test]
    fn a_pick_among_held_calls_prints_back_and_k_must_be_positive() {
        let s = parse("c1/2 c1 c2/10").unwrap();
        assert_eq!(
            s.decisions[0],
            Decision::Step {
                worker: "c1".into(),
                op: Some("#2".into())
            }
        );
        assert_eq!(s.to_string(), "c1/2 c1 c2/10");
        let e = parse("c1/0").unwrap_err();
        assert!(e.message.contains("k = 1, 2"), "{e}");
        assert!(parse("c1/x").is_err());
    }

    #[test]
    fn unknown_workers_and_events_are_named() {
        let s = parse("p c9:claim dispatch:e7 c1:crash").unwrap();
        let workers: Vec<String> = ["p", "c1"].map(String::from).to_vec();
        let unknown = s.unknown_names(&workers, &["e1".to_string()]);
        assert_eq!(unknown.len(), 2, "{unknown:?}");
        assert!(
            unknown[0].contains("no worker `c9`") && unknown[1].contains("no event `e7`"),
            "{unknown:?}"
        );
    }
}
