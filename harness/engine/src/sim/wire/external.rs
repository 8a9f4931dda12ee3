//! `[external.<role>]` in a scenario file: a role played by a real worker process.
//!
//! ```toml
//! [external.c]
//! command = ["target/python-venv/bin/python", "examples/python-worker/worker.py"]
//! setup = ["bash", "examples/python-worker/setup.sh"]    # run once, before the first schedule
//! systems = ["check-then-insert", "ack-before-commit"]    # variants it accepts as --system
//! points = { recv = "after_receive", insert_payout = "after_business_insert" }
//! labels = { claim = "INSERT INTO inbox", ack = "DeleteMessage" }  # calls by wire predicate
//! pass = ["SELECT version()"]                              # more statements that pass ungated
//! step_timeout_s = 10
//! concurrent = false    # true: several calls in flight (a batch in parallel, heartbeats)
//! reuse = false         # true: a process still running at a schedule's end serves the next
//! ```
//!
//! Paths in `command` and `setup` are relative to the directory that holds `scenarios/` (the
//! process's working directory).

use crate::spec::intern;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Result};
use serde::Deserialize;

use crate::spec::{CrashPoint, RoleSpec};

/// The raw table, as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExternalRaw {
    command: Vec<String>,
    #[serde(default)]
    setup: Option<Vec<String>>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    #[serde(default)]
    systems: Vec<String>,
    #[serde(default)]
    points: BTreeMap<String, String>,
    #[serde(default)]
    pass: Vec<String>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    #[serde(default = "default_step_timeout_s")]
    step_timeout_s: u64,
    #[serde(default)]
    poll: Option<String>,
    #[serde(default)]
    concurrent: bool,
    #[serde(default)]
    reuse: bool,
}

fn default_step_timeout_s() -> u64 {
    10
}

/// A role played by an external worker process, checked against the workload's roles.
#[derive(Debug, Clone)]
pub struct External {
    /// The role's prefix (`c`): its workers `c1`, `c2`, … are processes.
    pub role: &'static str,
    /// The command line (program and arguments).
    pub command: Vec<String>,
    /// A command run once per crashpoint process before the first schedule (makes a venv).
    pub setup: Option<Vec<String>>,
    /// Extra environment for the process.
    pub env: BTreeMap<String, String>,
    /// The working directory: the directory that holds `scenarios/`.
    pub cwd: PathBuf,
    /// The systems (variants) it accepts: `reference` and these; the process reads the one
    /// chosen from `CRASHPOINT_SYSTEM`.
    pub systems: Vec<String>,
    /// The crash point a worker stands at after each call label (`claim` → `after_claim`).
    pub points: BTreeMap<String, CrashPoint>,
    /// Statement prefixes (case-insensitive) that pass the PostgreSQL proxy ungated, besides
    /// the pools' health checks.
    pub pass: Vec<String>,
    /// Call labels by wire predicate, in label order: (label, predicate in upper case). A
    /// PostgreSQL call whose SQL contains the predicate, an SQS call whose operation is it
    /// (`DELETEMESSAGE`), or a Redis command named by it, gets the label; a
    /// `/* crashpoint:<label> */` comment in the SQL wins.
    pub labels: Vec<(&'static str, String)>,
    /// Real time a worker may take between two calls before the run fails (exit 2), s.
    pub step_timeout_s: u64,
    /// For a role that polls PostgreSQL (a poller of a table queue): the call label that
    /// starts each cycle (`claim`). When its statement returns or affects no row, the worker
    /// is idle, as an empty ReceiveMessage makes a handler idle, and stands at no crash point.
    pub poll: Option<&'static str>,
    /// Per system (variant) name: arguments appended to `command` and environment added for
    /// it (a declared workload's `[systems.<name>]`). A system not listed runs `command` as is.
    pub variants: BTreeMap<String, Variant>,
    /// Where it is declared, for errors: `scenarios/x.toml: [external.c]` by default, or a
    /// workload file's `[roles.c]`.
    pub origin: Option<String>,
    /// Whether the process may have several calls in flight at once (`concurrent = true`: a
    /// batch handled in parallel, a heartbeat, a pool's connections). Each held call is then a
    /// choice of its own (`c1`, `c1/2`, …, `crate::sim::world::Mailbox::units`) and the
    /// scheduler waits for the process to settle after each reply; else a second call while
    /// one is held stops the run (exit 2), naming both.
    pub concurrent: bool,
    /// Whether a process that is still running at a schedule's end may serve the next
    /// schedule of the same namespace (`reuse = true`, [`super::keep`]): its connections to the
    /// proxies are closed in between and it must reconnect; it must keep no state of its own
    /// between messages (an in-memory cache, a counter, a timer that outlives a message).
    pub reuse: bool,
}

/// How one system (variant) runs an external worker's command.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Variant {
    /// Arguments appended to the command line.
    pub args: Vec<String>,
    /// Environment added for the process (over [`External::env`]).
    pub env: BTreeMap<String, String>,
}

impl External {
    /// Checks `raw` for role `prefix` of the workload. `root` is the directory that holds
    /// `scenarios/`. Errors: an unknown role, an empty command, a crash point the role does
    /// not declare.
    pub fn resolve(
        prefix: &str,
        raw: ExternalRaw,
        roles: &[RoleSpec],
        root: &Path,
    ) -> Result<External> {
        let role = roles.iter().find(|r| r.prefix == prefix).ok_or_else(|| {
            let known: Vec<&str> = roles.iter().map(|r| r.prefix).collect();
            anyhow!(
                "unknown role `{prefix}`; expected one of {}",
                known.join(", ")
            )
        })?;
        if raw.command.is_empty() {
            bail!("field `command`: expected the worker's command line, e.g. [\"python3\", \"worker.py\"]");
        }
        let mut points = BTreeMap::new();
        for cp in role.points {
            if let Some(op) = cp.strip_prefix("after_") {
                points.insert(op.to_string(), *cp);
            }
        }
        for (op, name) in raw.points {
            let cp = role.points.iter().find(|c| **c == name).ok_or_else(|| {
                anyhow!("field `points.{op}`: role `{prefix}` has no crash point `{name}`; expected one of {}", role.points.join(", "))
            })?;
            points.insert(op, *cp);
        }
        let mut labels = Vec::new();
        for (label, predicate) in raw.labels {
            if label.is_empty()
                || !label
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
            {
                bail!("field `labels.{label}`: a call label is lower case letters, digits and `_`");
            }
            if predicate.trim().is_empty() {
                bail!("field `labels.{label}`: expected a SQL fragment, an SQS operation or a Redis command");
            }
            labels.push((intern(&label), predicate.trim().to_ascii_uppercase()));
        }
        if raw.step_timeout_s == 0 {
            bail!("field `step_timeout_s`: expected a positive number of seconds");
        }
        let poll = match raw.poll {
            None => None,
            Some(p)
                if p.is_empty()
                    || !p
                        .chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_') =>
            {
                bail!("field `poll`: expected a call label (lower case letters, digits and `_`), e.g. \"claim\", found `{p}`")
            }
            Some(p)
                if role.kind != crate::spec::RoleKind::Poller
                    && role.kind != crate::spec::RoleKind::Periodic =>
            {
                bail!("field `poll`: role `{prefix}` is not a poller; only a poller's cycles start with a PostgreSQL call (`{p}`)")
            }
            Some(p) => Some(intern(&p)),
        };
        Ok(External {
            role: role.prefix,
            command: raw.command,
            setup: raw.setup,
            env: raw.env,
            cwd: root.to_path_buf(),
            systems: raw.systems,
            points,
            pass: raw
                .pass
                .into_iter()
                .map(|p| p.to_ascii_uppercase())
                .collect(),
            labels,
            step_timeout_s: raw.step_timeout_s,
            poll,
            variants: BTreeMap::new(),
            origin: None,
            concurrent: raw.concurrent,
            reuse: raw.reuse,
        })
    }

    /// The label the scenario gives a call whose wire text (SQL, SQS operation or Redis
    /// command name) is `text`: for SQL the first predicate it contains, else one equal to it.
    pub fn label_of(&self, text: &str, contains: bool) -> Option<&'static str> {
        let text = text.to_ascii_uppercase();
        self.labels
            .iter()
            .find(|(_, p)| {
                if contains {
                    text.contains(p.as_str())
                } else {
                    text == *p
                }
            })
            .map(|(l, _)| *l)
    }

    /// The crash point a worker stands at after call `op`, if any.
    pub fn point_after(&self, op: &str) -> Option<CrashPoint> {
        self.points.get(op).copied()
    }

    /// The command line and extra environment of the process for system `system`: `command`
    /// with the variant's arguments, `env` with the variant's entries over it.
    pub fn for_system(&self, system: &str) -> (Vec<String>, Vec<(String, String)>) {
        let v = self.variants.get(system);
        let command = self
            .command
            .iter()
            .chain(v.map(|v| &v.args).into_iter().flatten())
            .cloned()
            .collect();
        let mut env = self.env.clone();
        if let Some(v) = v {
            env.extend(v.env.clone());
        }
        (command, env.into_iter().collect())
    }
}

