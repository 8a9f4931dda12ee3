//! The PostgreSQL side of an external worker's gate ([`WireWorker`] as the [`PgGate`] of its
//! PostgreSQL proxy): which statements are calls and which pass ungated, a call's label (a
//! `/* crashpoint:<label> */` comment, a `labels` entry, else its keyword) and its outcome from
//! the command tags.

use async_trait::async_trait;

use crate::sim::model::pg as model;
use crate::record::history::{Outcome, Service};
use crate::sim::wire::admit::{Admit, PgCall, PgGate, PgReply};
use crate::sim::wire::worker::{injected_error, Granted, Held, WireWorker};
use crate::spec::intern;

/// Statements that pass the PostgreSQL proxy ungated: pools' health checks and session setup
/// (upper case, compared as prefixes of the trimmed statement).
const PG_PASS: &[&str] = &["SELECT 1", "SET ", "SHOW ", "DISCARD ALL", "RESET ALL"];

/// The statements of a simple Query's text: split at `;` outside quotes, dollar quotes and
/// comments (a `SET …; INSERT …` must not pass as a `SET`).
pub fn statements(sql: &str) -> Vec<String> {
    let (mut out, mut cur) = (Vec::new(), String::new());
    let mut chars = sql.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\'' | '"' => {
                cur.push(c);
                for d in chars.by_ref() {
                    cur.push(d);
                    if d == c {
                        break;
                    }
                }
            }
            '$' if chars.peek() == Some(&'$') => {
                cur.push_str("$$");
                chars.next();
                while let Some(d) = chars.next() {
                    cur.push(d);
                    if d == '$' && chars.peek() == Some(&'$') {
                        cur.push('$');
                        chars.next();
                        break;
                    }
                }
            }
            '-' if chars.peek() == Some(&'-') => {
                for d in chars.by_ref() {
                    if d == '\n' {
                        break;
                    }
                }
            }
            ';' => out.push(std::mem::take(&mut cur)),
            _ => cur.push(c),
        }
    }
    out.push(cur);
    out.into_iter()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

/// The label of a PostgreSQL call: a `/* crashpoint:NAME */` comment in its SQL, else
/// `begin`, `commit` or `rollback` for those statements, else `sql`.
pub fn pg_label(call: &PgCall) -> &'static str {
    if let Some(label) = comment_label(call) {
        return label;
    }
    keyword_label(call)
}

/// The label of `call` from its first keyword alone: `begin`, `commit`, `rollback` or `sql`.
pub(crate) fn keyword_label(call: &PgCall) -> &'static str {
    let first = call
        .sql
        .iter()
        .map(|s| s.trim_start().to_ascii_uppercase())
        .find(|s| !s.is_empty())
        .unwrap_or_default();
    let word = first
        .split(|c: char| !c.is_ascii_alphabetic())
        .next()
        .unwrap_or("");
    match word {
        "BEGIN" | "START" => "begin",
        "COMMIT" | "END" => "commit",
        "ROLLBACK" | "ABORT" => "rollback",
        _ => "sql",
    }
}

/// The label a `/* crashpoint:NAME */` comment in the call's SQL gives it.
fn comment_label(call: &PgCall) -> Option<&'static str> {
    call.sql.iter().find_map(|sql| {
        let i = sql.find("crashpoint:")?;
        let name: String = sql[i + 11..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '-')
            .collect();
        (!name.is_empty()).then(|| intern(&name))
    })
}

/// What a PostgreSQL reply says, as an [`Outcome`].
pub fn pg_outcome(call: &PgCall, reply: &PgReply) -> Outcome {
    if let Some((_, message)) = &reply.error {
        return Outcome::Error {
            message: message.clone(),
        };
    }
    let Some(tag) = reply.tags.last() else {
        return Outcome::Done;
    };
    let mut words = tag.split(' ');
    let n: u64 = tag
        .rsplit(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    let returning = call
        .sql
        .iter()
        .any(|s| s.to_ascii_uppercase().contains("RETURNING"));
    match words.next().unwrap_or("") {
        "INSERT" | "UPDATE" | "DELETE" | "MERGE" if returning => Outcome::Returned {
            row: reply.rows > 0,
        },
        "INSERT" | "UPDATE" | "DELETE" | "MERGE" => Outcome::Affected { n },
        "SELECT" => Outcome::Fetched { n },
        _ => Outcome::Done,
    }
}

#[async_trait(?Send)]
impl PgGate for WireWorker {
    fn refused(&self, why: String) {
        self.fatal(format!("{}: {why}", self.me));
    }

    fn watch(&self, socket: &tokio::net::TcpStream) -> Option<crate::sim::world::Watched> {
        Some(WireWorker::watch(self, socket))
    }

    fn backend(&self, pid: i32) {
        let mut w = self.world.borrow_mut();
        let slot = w.mailbox(&self.me);
        slot.backend_pid = Some(pid);
        if !slot.backend_pids.contains(&pid) {
            slot.backend_pids.push(pid);
        }
    }

    fn gated(&self, call: &PgCall) -> bool {
        if call.terminate || !call.executes {
            return false;
        }
        // A concurrent worker's BEGIN passes: which of its connections a handler took from its
        // pool depends on real time, so the first call that says what the transaction is about
        // (its statement and parameters) is the first held.
        if self.ext.concurrent
            && call.sql.iter().flat_map(|sql| statements(sql)).all(|st| {
                keyword_label(&PgCall {
                    sql: vec![st],
                    ..Default::default()
                }) == "begin"
            })
        {
            return false;
        }
        let passes = |s: &str| {
            let s = s.trim().to_ascii_uppercase();
            s.is_empty()
                || PG_PASS.iter().any(|p| {
                    s.starts_with(p.trim_end())
                        && (s.len() == p.trim_end().len() || p.ends_with(' '))
                })
                || self.ext.pass.iter().any(|p| s.starts_with(p.as_str()))
        };
        !call
            .sql
            .iter()
            .flat_map(|sql| statements(sql))
            .all(|st| passes(&st))
    }

    async fn hold(&self, pid: i32, call: &PgCall) -> Admit {
        self.backend(pid);
        let label = comment_label(call)
            .or_else(|| call.sql.iter().find_map(|sql| self.ext.label_of(sql, true)))
            .unwrap_or_else(|| pg_label(call));
        let about = self.ext.concurrent.then(|| call.about.clone()).flatten();
        let held = Held {
            op: label,
            service: Service::Postgres,
            cycle_start: self.ext.poll == Some(label),
            key: call.key.clone(),
            pid: Some(pid),
            about,
            tie: call.opened,
        };
        match WireWorker::hold(self, held).await {
            Granted::Fail(cp) => Admit::Fail(injected_error(label, cp)),
            Granted::Withhold => Admit::Withhold,
            Granted::Go => {
                // As in-process: a reset takes the next statement; a lost reply takes the next
                // COMMIT that commits (not one in a failed transaction, which rolls back).
                let commits = keyword_label(call) == "commit" && call.status == Some(b'T');
                match model::fate(&mut self.world.borrow_mut().pg, commits) {
                    model::Fate::Reset => Admit::Reset,
                    model::Fate::LoseReply => Admit::LoseReply,
                    model::Fate::Forward => Admit::Forward,
                }
            }
        }
    }

    fn replied(&self, _pid: i32, call: &PgCall, reply: PgReply) {
        let outcome = pg_outcome(call, &reply);
        let polled = self.ext.poll.is_some_and(|p| self.current_op() == Some(p));
        let idle = outcome.no_rows();
        // The command tag names the statement; ReadyForQuery's status `I` says no transaction
        // block is open after it.
        let keyword = reply.tags.last().and_then(|t| t.split(' ').next()).unwrap_or("");
        let facts = model::autocommit_write(keyword, &outcome, reply.status != Some(b'I')).into_iter().collect();
        self.complete(Service::Postgres, outcome, facts);
        if polled {
            self.set_idle(idle);
        }
    }

    fn dropped(&self, _pid: i32, _call: &PgCall, message: &str) {
        self.complete(
            Service::Postgres,
            Outcome::Error {
                message: message.to_string(),
            },
            vec![],
        );
    }

    fn pending(&self, on: bool) {
        WireWorker::pending(self, on);
    }

    fn touch(&self) {
        WireWorker::touch(self);
    }

    fn ended(&self) {
        self.task_ended();
    }

    fn client(&self, application_name: String) {
        self.saw_client(format!("PostgreSQL application_name={application_name}"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(sql: &str) -> PgCall {
        PgCall {
            sql: vec![sql.to_string()],
            terminate: false,
            executes: true,
            status: Some(b'T'),
            ..Default::default()
        }
    }

    #[test]
    fn labels_come_from_comments_then_keywords() {
        assert_eq!(
            pg_label(&call("/* crashpoint:claim */ INSERT INTO t VALUES (1)")),
            "claim"
        );
        assert_eq!(pg_label(&call("begin")), "begin");
        assert_eq!(pg_label(&call("COMMIT")), "commit");
        assert_eq!(pg_label(&call("UPDATE t SET x = 1")), "sql");
    }

    #[test]
    fn statements_split_outside_quotes_and_comments() {
        assert_eq!(
            statements("SET x = 1; INSERT INTO t VALUES (';')"),
            vec!["SET x = 1", "INSERT INTO t VALUES (';')"]
        );
        assert_eq!(
            statements("SELECT $$a;b$$ -- c;d\n; "),
            vec!["SELECT $$a;b$$"]
        );
        assert_eq!(statements(""), Vec::<String>::new());
    }

    #[test]
    fn outcomes_follow_the_command_tags() {
        let r = |tag: &str, rows| PgReply {
            tags: vec![tag.into()],
            rows,
            error: None,
            status: Some(b'T'),
        };
        assert_eq!(
            pg_outcome(
                &call("INSERT INTO t VALUES (1) RETURNING id"),
                &r("INSERT 0 0", 0)
            ),
            Outcome::Returned { row: false }
        );
        assert_eq!(
            pg_outcome(
                &call("INSERT INTO t VALUES (1) RETURNING id"),
                &r("INSERT 0 1", 1)
            ),
            Outcome::Returned { row: true }
        );
        assert_eq!(
            pg_outcome(&call("UPDATE t SET x = 1"), &r("UPDATE 3", 0)),
            Outcome::Affected { n: 3 }
        );
        assert_eq!(
            pg_outcome(&call("SELECT 2"), &r("SELECT 1", 1)),
            Outcome::Fetched { n: 1 }
        );
        let e = PgReply {
            error: Some(("23505".into(), "duplicate key".into())),
            ..Default::default()
        };
        assert_eq!(
            pg_outcome(&call("INSERT"), &e),
            Outcome::Error {
                message: "duplicate key".into()
            }
        );
    }
}
