//! PostgreSQL outcome faults: what a client sees when its connection breaks around
//! a statement. PostgreSQL rolls back the open transaction of a connection that drops (its docs,
//! "Client Connection Defaults" and the frontend/backend protocol: a lost connection aborts
//! the session), and a COMMIT whose reply is lost may have committed: the client cannot tell.
//!
//! | fault | text | what happens |
//! |---|---|---|
//! | [`PgFault::CommitResponseLost`] | `pg:commit-response-lost` | the next COMMIT a worker sends is applied, and the worker gets a connection error instead of the reply |
//! | [`PgFault::ConnectionReset`] | `pg:connection-reset` | the next statement a worker sends is not applied: its connection resets first, the server rolls back the worker's open transaction, and the worker gets a connection error |
//!
//! Both are one-shot. In-process workers ([`crate::sim::cx::Cx`]) get the error and find a
//! working connection for their next statement, as from a pool that reconnects. An external
//! worker's PostgreSQL proxy closes the worker's connection (after forwarding the COMMIT, or
//! after rolling back its transaction without forwarding the statement), so the worker sees
//! what its driver says of a dropped connection, and must connect again.

use std::fmt;

/// A PostgreSQL outcome fault injected by the nemesis.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PgFault {
    /// The next COMMIT is applied and its reply lost.
    CommitResponseLost,
    /// The next statement finds its connection reset.
    ConnectionReset,
}

impl PgFault {
    /// Every fault, in text order.
    pub const ALL: [PgFault; 2] = [PgFault::CommitResponseLost, PgFault::ConnectionReset];

    /// The name after `pg:` in schedules, e.g. `commit-response-lost`.
    pub fn as_str(self) -> &'static str {
        match self {
            PgFault::CommitResponseLost => "commit-response-lost",
            PgFault::ConnectionReset => "connection-reset",
        }
    }

    /// Parses the name after `pg:`. Errors list the names.
    pub fn parse(s: &str) -> Result<PgFault, String> {
        super::parse_named(&PgFault::ALL, PgFault::as_str, "pg", "a PostgreSQL fault", s)
    }

    /// What the nemesis says in the trace when the schedule arms it.
    pub fn announcement(self) -> &'static str {
        match self {
            PgFault::CommitResponseLost => {
                "pg:commit-response-lost armed: the next COMMIT is applied and its worker gets a connection error instead of the reply"
            }
            PgFault::ConnectionReset => {
                "pg:connection-reset armed: the next statement finds its connection reset: not applied, the open transaction rolled back"
            }
        }
    }
}

impl fmt::Display for PgFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "pg:{}", self.as_str())
    }
}

/// The error text a worker gets from an armed `pg:commit-response-lost`.
pub const COMMIT_REPLY_LOST: &str =
    "connection reset by peer after COMMIT was sent (pg:commit-response-lost): the transaction committed, its reply was lost";

/// The error text a worker gets from an armed `pg:connection-reset`.
pub const CONNECTION_RESET: &str =
    "connection reset by peer (pg:connection-reset): the statement was not sent and the server rolled back the open transaction";

/// The PostgreSQL nemesis' state within one schedule: how many times each fault is armed.
pub type PgNemesis = super::Armed<PgFault>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_names_list_the_known_ones() {
        for f in PgFault::ALL {
            assert_eq!(PgFault::parse(f.as_str()), Ok(f));
            assert_eq!(f.to_string(), format!("pg:{}", f.as_str()));
        }
        let e = PgFault::parse("commit-lost").unwrap_err();
        assert!(e.contains("`pg:commit-response-lost`") && e.contains("`pg:connection-reset`"), "{e}");
    }

    #[test]
    fn each_arming_is_taken_once() {
        let mut n = PgNemesis::default();
        n.apply(PgFault::CommitResponseLost);
        assert!(n.armed(PgFault::CommitResponseLost) && !n.armed(PgFault::ConnectionReset));
        assert!(!n.take(PgFault::ConnectionReset));
        assert!(n.take(PgFault::CommitResponseLost));
        assert!(!n.take(PgFault::CommitResponseLost));
        assert!(!n.armed(PgFault::CommitResponseLost));
    }
}
