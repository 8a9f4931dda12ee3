//! Redis faults armed for later. `redis:restart` ([`crate::schedule::Decision::RedisRestart`])
//! acts at once; the faults here wait for the moment they describe.
//!
//! | fault | text | what happens |
//! |---|---|---|
//! | [`RedisFault::LoseLock`] | `redis:lose-lock` | the next lock asked for while another holds it (a `SET … NX` that Redis refuses) is found free: the holder's lock is lost first, and the asker takes it |
//!
//! A lock can be lost while its holder still works: its TTL passes during a pause of the
//! holder (a GC pause, a descheduled pod), or Redis fails over to a replica the lock's `SET`
//! had not reached, replication being asynchronous (Redis documentation, "Distributed Locks
//! with Redis", safety: "Client A acquires the lock in the master. The master crashes before
//! the write to the key is transmitted to the replica. The replica gets promoted to master.
//! Client B acquires the lock to the same resource A already holds a lock for"). A loss
//! matters only when another worker asks for the lock before its holder is done; this fault
//! waits for that asker, so that exploration does not have to time a `redis:restart` or a
//! clock jump into the holder's critical section and the asker's arrival at once.
//!
//! Which command takes a lock, and what a refused one looks like, is the Redis model's
//! ([`crate::sim::model::redis::refused_lock`]); both front-ends ([`crate::sim::cx::Cx`] and
//! the wire proxy) ask it, delete the key at the real server and send the command again.

use std::fmt;

/// A Redis fault armed by the nemesis.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RedisFault {
    /// The next lock refused because another holds it is lost, and the asker takes it.
    LoseLock,
}

impl RedisFault {
    /// Every fault, in text order.
    pub const ALL: [RedisFault; 1] = [RedisFault::LoseLock];

    /// The name after `redis:` in schedules, e.g. `lose-lock`.
    pub fn as_str(self) -> &'static str {
        match self {
            RedisFault::LoseLock => "lose-lock",
        }
    }

    /// Parses the name after `redis:` (`restart` is not one of these: it acts at once).
    /// Errors list the names, `redis:restart` among them.
    pub fn parse(s: &str) -> Result<RedisFault, String> {
        super::parse_named(&RedisFault::ALL, RedisFault::as_str, "redis", "a Redis fault", s)
            .map_err(|e| format!("{e}, or `redis:restart`"))
    }

    /// What the nemesis says in the trace when the schedule arms it.
    pub fn announcement(self) -> &'static str {
        match self {
            RedisFault::LoseLock => {
                "redis:lose-lock armed: the next lock asked for while another worker holds it is lost first (a failover to a replica its SET had not reached), and the asker takes it"
            }
        }
    }
}

impl fmt::Display for RedisFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "redis:{}", self.as_str())
    }
}

/// The Redis nemesis' state within one schedule: how many times each fault is armed.
pub type RedisNemesis = super::Armed<RedisFault>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_names_list_the_known_ones() {
        for f in RedisFault::ALL {
            assert_eq!(RedisFault::parse(f.as_str()), Ok(f));
            assert_eq!(f.to_string(), format!("redis:{}", f.as_str()));
        }
        let e = RedisFault::parse("lose").unwrap_err();
        assert!(e.contains("`redis:lose-lock`") && e.contains("`redis:restart`"), "{e}");
    }

    #[test]
    fn each_arming_is_taken_once() {
        let mut n = RedisNemesis::default();
        assert!(!n.take(RedisFault::LoseLock));
        n.apply(RedisFault::LoseLock);
        n.apply(RedisFault::LoseLock);
        assert!(n.take(RedisFault::LoseLock));
        assert!(n.take(RedisFault::LoseLock));
        assert!(!n.take(RedisFault::LoseLock));
    }
}
