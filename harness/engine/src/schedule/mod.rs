//! Schedules as data: the scheduler's decisions, and their text form.
//!
//! The text form is a whitespace-separated list of decisions, in the spirit of PostgreSQL's
//! isolationtester permutations; `#` starts a comment. For example
//! `p:lock p:send c1:recv c2:recv c1:crash@after_commit tick:31s c2:recv`.
//!
//! | text | decision |
//! |---|---|
//! | `c1` or `c1:claim` | worker `c1` makes its next call (and it must be `claim`) |
//! | `c1/2` | a concurrent worker's second held call goes (in the order of [`crate::sim::world::Mailbox::units`]) |
//! | `c1:crash` | kill `c1` where it stands |
//! | `c1:crash@after_commit` | run `c1` until it stands at crash point `after_commit`, then kill it |
//! | `c1:fail@after_claim` | run `c1` until it passes `after_claim`, where an error is thrown |
//! | `c1:restart` | start a killed `c1` again, with fresh software |
//! | `c1:stop` | stop `c1` gracefully: it finishes its current message and exits before its next receive |
//! | `c1:lag` | in the drain, `c1` waits before its next COMMIT until a drain round in which no worker stepped |
//! | `tick:31s` | advance the logical clock (`ms`, `s`, `m`, `h`); due expiries fire |
//! | `pause:1500ms` | let real time pass for the workers' own timers (a heartbeat); the logical clock does not move |
//! | `replay` (a name the workload declares) | a fault of the workload's own, e.g. replaying its failure transport |
//! | `dispatch:e1` | the producer dispatches event `e1` once more |
//! | `redis:restart` | Redis restarts without persistence: every lock is lost |
//! | `redis:lose-lock` | the next lock asked for while another worker holds it is lost first, and the asker takes it |
//! | `sqs:stale-delete-noop` | from now on a DeleteMessage with a stale receipt handle deletes nothing |
//! | `sqs:redeliver-after-delete` | the next message deleted is delivered once more |
//! | `sqs:receive-lost` | the next message received never reaches its consumer |
//! | `sqs:redrive` | the dead-letter queues' messages go back to their source queues as new messages |
//! | `pg:commit-response-lost` | the next COMMIT is applied and its reply lost: the worker sees a connection error |
//! | `pg:connection-reset` | the next statement finds its connection reset: not applied, the transaction rolled back |
//! | `net:drop-response@gateway`, `provider:5xx-after@gateway`, … | a network or provider fault ([`crate::nemesis::net`]) |

#[cfg(test)]
pub(crate) mod parse_fuzz;
mod mutate;
mod strategy;
pub(crate) mod text;

pub use mutate::{mutate, Parents};
pub use strategy::{clock_max_ms, schedules, Menu, WORKER_WEIGHT_MAX};
pub use text::{format_duration_ms, parse, Vocabulary};

use std::fmt;

use crate::nemesis::net::NetFault;
use crate::nemesis::pg::PgFault;
use crate::nemesis::redis::RedisFault;
use crate::nemesis::sqs::SqsFault;
use crate::spec::CrashPoint;

/// One scheduler decision.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Decision {
    /// `worker` makes its next call; when `op` is given, that call must be `op`. For a
    /// concurrent external worker, `op` = `#k` (text `c1/2`) grants its k-th held call.
    Step { worker: String, op: Option<String> },
    /// Kill `worker`, where it stands (`at: None`) or once it stands at crash point `at`.
    Crash {
        worker: String,
        at: Option<CrashPoint>,
    },
    /// Run `worker` until it is about to make call `op`, let the call apply, and kill the
    /// worker before the reply reaches it (`c1:crash@commit:applied`: COMMIT took effect and
    /// the worker never knew). An external worker's PostgreSQL proxy withholds the reply; an
    /// in-process worker is killed before its next call.
    CrashApplied { worker: String, op: String },
    /// Run `worker` until it passes crash point `at`, where an injected error is thrown.
    Fail { worker: String, at: CrashPoint },
    /// Restart a killed worker with fresh software.
    Restart { worker: String },
    /// Stop a handler gracefully (SIGTERM to a Messenger worker): it finishes the message it
    /// is handling, releases or acknowledges what it holds as its code decides, and exits
    /// before its next receive. `c1:restart` starts it again.
    Stop { worker: String },
    /// `worker` falls behind: in the drain it runs to its next call `before` (a call name as
    /// the trace shows it: `commit` for `c1:lag`, `recv` for `c1:lag@recv`) and waits there
    /// until a round in which no worker stepped (every other one settled, or blocked on its
    /// locks), then it catches up. An ordering, not a fault (a pod descheduled, a GC pause, a
    /// slow node), the priority change of PCT (Burckhardt et al., ASPLOS 2010): before
    /// `commit`, a transaction that began first commits last; before `recv`, a handler takes
    /// its next receive once the others have sent what they will, and receives it together.
    /// Steps of `worker` the schedule names later still run. `worker` may be a role's prefix
    /// (`c:lag@recv`): every worker of the role falls behind ([`Decision::names`]).
    Lag { worker: String, before: String },
    /// Advance the logical clock by `ms`.
    Tick { ms: u64 },
    /// Let `ms` of real time pass with every worker settled in turn, the logical clock
    /// unmoved: the workers' own timers fire (sqs-consumer's `heartbeatInterval`, a poll
    /// delay), and the calls they make are held like any other. Never generated.
    Pause { ms: u64 },
    /// A fault of the workload's own, by name (e.g. `replay`).
    Fault(&'static str),
    /// The producer dispatches scenario event `event` again.
    Dispatch { event: String },
    /// Redis restarts without persistence, losing every lock.
    RedisRestart,
    /// A Redis fault armed for later (see [`crate::nemesis::redis`]).
    Redis(RedisFault),
    /// An AWS behaviour that emulators do not produce (see [`crate::nemesis::sqs`]).
    Sqs(SqsFault),
    /// A PostgreSQL outcome fault (see [`crate::nemesis::pg`]).
    Pg(PgFault),
    /// A network or provider fault aimed at one of the workload's providers.
    Net(NetFault),
}

/// The call a plain `c1:lag` waits before: COMMIT.
pub const LAG_BEFORE: &str = "commit";

/// Whether `worker` is a worker of the role with prefix `prefix`: the prefix followed by a
/// number (`c1` of `c`), as [`crate::spec::role_of`] reads a worker's name.
pub fn member_of(worker: &str, prefix: &str) -> bool {
    worker.strip_prefix(prefix).is_some_and(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()))
}

impl Decision {
    /// The worker the decision names (a step, a crash or failure of it, its restart, stop or
    /// lag), `None` for one that names no worker.
    pub fn worker(&self) -> Option<&str> {
        match self {
            Decision::Step { worker, .. }
            | Decision::Crash { worker, .. }
            | Decision::CrashApplied { worker, .. }
            | Decision::Fail { worker, .. }
            | Decision::Restart { worker }
            | Decision::Stop { worker }
            | Decision::Lag { worker, .. } => Some(worker),
            _ => None,
        }
    }

    /// Whether the decision names `worker`: as its worker, or, for a lag, as a worker of the
    /// role whose prefix it names (`c:lag@recv` names `c1`, `c2`, …).
    pub fn names(&self, worker: &str) -> bool {
        match self {
            Decision::Lag { worker: w, .. } => w == worker || member_of(worker, w),
            d => d.worker() == Some(worker),
        }
    }

    /// The fault kind of a nemesis decision (`crash`, `crash@`, `fail@`, `restart`, `tick`,
    /// `replay`, `dispatch`, `redis:restart`, `sqs:<fault>`), `None` for a worker step.
    pub fn fault_kind(&self) -> Option<String> {
        Some(match self {
            Decision::Step { .. } => return None,
            Decision::Crash { at: None, .. } => "crash".into(),
            Decision::Crash { at: Some(_), .. } => "crash@".into(),
            Decision::CrashApplied { .. } => "crash@applied".into(),
            Decision::Fail { .. } => "fail@".into(),
            Decision::Restart { .. } => "restart".into(),
            Decision::Stop { .. } => "stop".into(),
            Decision::Lag { .. } => "lag".into(),
            Decision::Tick { .. } => "tick".into(),
            Decision::Pause { .. } => "pause".into(),
            Decision::Fault(name) => name.to_string(),
            Decision::Dispatch { .. } => "dispatch".into(),
            Decision::RedisRestart => "redis:restart".into(),
            Decision::Redis(f) => f.to_string(),
            Decision::Sqs(f) => f.to_string(),
            Decision::Pg(f) => f.to_string(),
            Decision::Net(f) => {
                let text = f.to_string();
                let name = text.split('@').next().unwrap_or(&text);
                format!("{name}@")
            }
        })
    }
}

impl fmt::Display for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Decision::Step { worker, op: None } => write!(f, "{worker}"),
            Decision::Step {
                worker,
                op: Some(op),
            } if op.starts_with('#') => write!(f, "{worker}/{}", &op[1..]),
            Decision::Step {
                worker,
                op: Some(op),
            } => write!(f, "{worker}:{op}"),
            Decision::Crash { worker, at: None } => write!(f, "{worker}:crash"),
            Decision::Crash {
                worker,
                at: Some(at),
            } => write!(f, "{worker}:crash@{at}"),
            Decision::CrashApplied { worker, op } => write!(f, "{worker}:crash@{op}:applied"),
            Decision::Fail { worker, at } => write!(f, "{worker}:fail@{at}"),
            Decision::Restart { worker } => write!(f, "{worker}:restart"),
            Decision::Stop { worker } => write!(f, "{worker}:stop"),
            Decision::Lag { worker, before } if before == LAG_BEFORE => write!(f, "{worker}:lag"),
            Decision::Lag { worker, before } => write!(f, "{worker}:lag@{before}"),
            Decision::Tick { ms } => write!(f, "tick:{}", format_duration_ms(*ms)),
            Decision::Pause { ms } => write!(f, "pause:{}", format_duration_ms(*ms)),
            Decision::Fault(name) => write!(f, "{name}"),
            Decision::Dispatch { event } => write!(f, "dispatch:{event}"),
            Decision::RedisRestart => write!(f, "redis:restart"),
            Decision::Redis(fault) => write!(f, "{fault}"),
            Decision::Sqs(fault) => write!(f, "{fault}"),
            Decision::Pg(fault) => write!(f, "{fault}"),
            Decision::Net(fault) => write!(f, "{fault}"),
        }
    }
}

impl Schedule {
    /// Decisions that name a worker not in `workers` or an event not in `events`, each as
    /// "`decision`: why". Empty when every name is known.
    pub fn unknown_names(&self, workers: &[String], events: &[String]) -> Vec<String> {
        let mut out = Vec::new();
        for d in &self.decisions {
            if let Some(w) = d.worker().filter(|_| !workers.iter().any(|k| d.names(k))) {
                out.push(format!(
                    "`{d}`: no worker `{w}` (workers: {})",
                    workers.join(" ")
                ));
            }
            if let Decision::Dispatch { event } = d {
                if !events.contains(event) {
                    out.push(format!(
                        "`{d}`: no event `{event}` (events: {})",
                        events.join(" ")
                    ));
                }
            }
        }
        out
    }
}

/// A schedule: decisions in order. `Display` gives its text form; `parse` reads it.
#[derive(Debug, Clone, PartialEq, Eq, Default, Hash)]
pub struct Schedule {
    /// The decisions.
    pub decisions: Vec<Decision>,
}

impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, d) in self.decisions.iter().enumerate() {
            if i > 0 {
                f.write_str(" ")?;
            }
            write!(f, "{d}")?;
        }
        Ok(())
    }
}
