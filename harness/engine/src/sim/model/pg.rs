//! PostgreSQL as the harness models it, where both front-ends must agree: when a statement's
//! effect is visible to the other workers at once.
//!
//! A statement sent outside a transaction block runs in a transaction of its own and commits
//! when it completes (PostgreSQL documentation, "BEGIN": "By default (without BEGIN),
//! PostgreSQL executes transactions in "autocommit" mode, that is, each statement is executed
//! in its own transaction and a commit is implicitly performed at the end of the statement").
//! A job worker in autocommit (psycopg's `autocommit=True`) and a producer that inserts its
//! events change what a poller finds without any COMMIT the history shows: the drain must poll
//! its idle pollers again after such a write, as after a COMMIT.

use crate::nemesis::pg::{PgFault, PgNemesis};
use crate::record::history::{Fact, Outcome};

/// The fact of a statement whose first keyword is `keyword` (`INSERT`, `update`, …), answered
/// `outcome`, completed with a transaction block open (`in_tx`) or not:
/// [`Fact::AutocommitWrite`] when it wrote rows outside a transaction block (an `INSERT`,
/// `UPDATE`, `DELETE` or `MERGE` that affected or returned a row), else nothing.
pub fn autocommit_write(keyword: &str, outcome: &Outcome, in_tx: bool) -> Option<Fact> {
    let writes = ["INSERT", "UPDATE", "DELETE", "MERGE"].iter().any(|k| k.eq_ignore_ascii_case(keyword));
    let changed = matches!(outcome, Outcome::Affected { n } if *n > 0) || matches!(outcome, Outcome::Returned { row: true });
    (writes && changed && !in_tx).then_some(Fact::AutocommitWrite)
}

/// The first keyword of `sql`, past white space and comments (`/* … */`, `-- …`).
pub fn first_keyword(sql: &str) -> &str {
    let mut s = sql.trim_start();
    loop {
        if let Some(rest) = s.strip_prefix("/*") {
            s = rest.split_once("*/").map_or("", |(_, r)| r).trim_start();
        } else if let Some(rest) = s.strip_prefix("--") {
            s = rest.split_once('\n').map_or("", |(_, r)| r).trim_start();
        } else {
            break;
        }
    }
    s.split(|c: char| !c.is_ascii_alphabetic()).next().unwrap_or("")
}

/// What the armed PostgreSQL faults do to a statement about to go out ([`fate`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    /// It goes out, and its reply comes back.
    Forward,
    /// `pg:connection-reset`: not sent; the connection drops, so the server rolls back the open
    /// transaction, and the worker gets [`crate::nemesis::pg::CONNECTION_RESET`].
    Reset,
    /// `pg:commit-response-lost`: the COMMIT goes out and commits; the connection drops before
    /// its reply, and the worker gets [`crate::nemesis::pg::COMMIT_REPLY_LOST`]. Should the
    /// COMMIT fail after all, its own error is what the worker gets, and the fault is spent.
    LoseReply,
}

/// The fate of the next statement of a worker under the armed faults, taking the one that
/// fires: a reset takes any statement; a lost reply only a COMMIT that commits (`commits`: a
/// COMMIT in a transaction that has not failed; in a failed one, where every statement fails
/// with 25P02, COMMIT rolls back, and the fault waits for the next).
pub fn fate(pg: &mut PgNemesis, commits: bool) -> Fate {
    if pg.take(PgFault::ConnectionReset) {
        Fate::Reset
    } else if commits && pg.take(PgFault::CommitResponseLost) {
        Fate::LoseReply
    } else {
        Fate::Forward
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_outside_a_transaction_block_is_visible_at_once() {
        let affected = |n| Outcome::Affected { n };
        assert_eq!(autocommit_write("INSERT", &affected(1), false), Some(Fact::AutocommitWrite));
        assert_eq!(autocommit_write("update", &Outcome::Returned { row: true }, false), Some(Fact::AutocommitWrite));
        assert_eq!(autocommit_write("INSERT", &affected(1), true), None, "inside a transaction: at its COMMIT");
        assert_eq!(autocommit_write("DELETE", &affected(0), false), None, "nothing changed");
        assert_eq!(autocommit_write("SELECT", &Outcome::Fetched { n: 3 }, false), None, "a read");
        assert_eq!(autocommit_write("UPDATE", &Outcome::Returned { row: false }, false), None);
    }

    #[test]
    fn the_first_keyword_comes_after_comments() {
        assert_eq!(first_keyword("/* crashpoint:claim */ UPDATE jobs SET x = 1"), "UPDATE");
        assert_eq!(first_keyword("-- note\n  insert into t values (1)"), "insert");
        assert_eq!(first_keyword("  SELECT 1"), "SELECT");
        assert_eq!(first_keyword("/* unclosed"), "");
    }

    #[test]
    fn a_reset_takes_any_statement_first_and_a_lost_reply_waits_for_a_committing_commit() {
        let mut pg = PgNemesis::default();
        assert_eq!(fate(&mut pg, true), Fate::Forward);
        pg.apply(PgFault::CommitResponseLost);
        pg.apply(PgFault::ConnectionReset);
        assert_eq!(fate(&mut pg, true), Fate::Reset);
        assert_eq!(fate(&mut pg, false), Fate::Forward, "not a COMMIT that commits: the lost reply waits");
        assert_eq!(fate(&mut pg, true), Fate::LoseReply);
        assert_eq!(fate(&mut pg, true), Fate::Forward, "spent");
    }
}
