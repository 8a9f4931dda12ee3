//! The nemesis: what the harness does to the world, beyond stepping workers.
//!
//! Crashes, restarts and injected failures are applied by the scheduler at yield points;
//! expiries by the logical clock. [`redis`] holds the Redis faults armed for later (a lock
//! lost as another worker asks for it), [`sqs`] the AWS behaviours LocalStack does not
//! produce, [`pg`] the PostgreSQL outcome faults (a lost COMMIT reply, a reset connection). A
//! workload adds faults of its own ([`crate::spec::WorkloadFault`], e.g. the
//! failure-transport replay of the payout article), which the scheduler applies by name.

pub mod net;
pub mod pg;
pub mod redis;
pub mod sqs;

/// The fault of `all` whose name (`name`) is `s`, the text after `<prefix>:` in a schedule.
/// Errors: `` `<prefix>:<s>` is not <what>; expected `` and every name.
pub(crate) fn parse_named<F: Copy>(all: &[F], name: fn(F) -> &'static str, prefix: &str, what: &str, s: &str) -> Result<F, String> {
    all.iter().copied().find(|f| name(*f) == s).ok_or_else(|| {
        let names: Vec<String> = all.iter().map(|f| format!("`{prefix}:{}`", name(*f))).collect();
        format!("`{prefix}:{s}` is not {what}; expected {}", names.join(", "))
    })
}

/// One-shot faults armed for later, counted per kind: each arming fires once, at the first
/// moment its fault describes ([`pg::PgNemesis`], [`redis::RedisNemesis`]).
#[derive(Debug)]
pub struct Armed<F: Ord> {
    armed: std::collections::BTreeMap<F, u32>,
}

impl<F: Ord> Default for Armed<F> {
    fn default() -> Self {
        Armed { armed: Default::default() }
    }
}

impl<F: Ord + Copy> Armed<F> {
    /// Arms `fault` once more.
    pub fn apply(&mut self, fault: F) {
        *self.armed.entry(fault).or_default() += 1;
    }

    /// Faults armed and not yet fired, all kinds together.
    pub fn armed_total(&self) -> u32 {
        self.armed.values().sum()
    }

    /// Whether `fault` is armed.
    pub fn armed(&self, fault: F) -> bool {
        self.armed.get(&fault).is_some_and(|n| *n > 0)
    }

    /// Takes one armed `fault`: true when it was armed.
    pub fn take(&mut self, fault: F) -> bool {
        match self.armed.get_mut(&fault) {
            Some(n) if *n > 0 => {
                *n -= 1;
                true
            }
            _ => false,
        }
    }
}

/// The engine's fault kinds with their text form, for `crashpoint list` (a workload's own
/// faults are listed with it).
pub const KINDS: &[(&str, &str)] = &[
    ("<w>:crash", "kill worker <w> where it stands (a pod kill: sockets close, the transaction rolls back)"),
    ("<w>:crash@<point>", "run <w> to the named crash point, then kill it"),
    ("<w>:fail@<point>", "throw an error in <w>'s handler at the named crash point"),
    ("<w>:restart", "start a killed worker again with fresh software"),
    ("<w>:stop", "stop handler <w> gracefully: it finishes its current message and ends before its next receive"),
    ("tick:<duration>", "advance the logical clock; due visibility timeouts, lock TTLs and message retentions expire; a message received maxReceiveCount times moves to its dead-letter queue at the next receive from its queue"),
    ("pause:<duration>", "let real time pass (at most 60 s) for external workers' own timers, such as a heartbeat; the logical clock does not move"),
    ("dispatch:<event>", "the producer dispatches an event once more"),
    ("redis:restart", "Redis restarts without persistence: every lock is lost"),
    ("redis:lose-lock", "the next lock asked for while another worker holds it is lost first (a failover to a replica its SET had not reached), and the asker takes it"),
    ("sqs:stale-delete-noop", "from now on, DeleteMessage with a stale receipt handle returns OK and deletes nothing (AWS allows it)"),
    ("sqs:redeliver-after-delete", "the next message deleted is delivered once more (AWS at-least-once delivery)"),
    ("sqs:receive-lost", "the next message received is in flight and counted, but never reaches its consumer"),
    ("sqs:batch-delete-partial", "the next DeleteMessageBatch returns HTTP 200 with its last entry failed (InternalError): that message is not deleted"),
    ("sqs:redrive", "an operator redrives the dead-letter queues ([config] dead_letter): each message goes back to its source queue as a new message; the drain does it too"),
    ("pg:commit-response-lost", "the next COMMIT is applied and its worker gets a connection error instead of the reply"),
    ("pg:connection-reset", "the next statement is not applied: its connection resets and the open transaction rolls back"),
    ("net:drop-request@<p>", "the next request to provider <p> is lost on its way (turmoil partition_oneway)"),
    ("net:drop-response@<p>", "the next request to <p> is applied and its response lost"),
    ("net:delay@<p>:<duration>", "the next request to <p> arrives after its caller gave up, <duration> of logical time later"),
    ("net:partition@<p>, net:heal@<p>", "cut <p> off from every worker, and repair it (the drain heals first)"),
    ("provider:5xx-before@<p>", "<p> answers its next request 503 without applying it"),
    ("provider:5xx-after@<p>", "<p> applies its next request, then answers 503"),
    ("provider:restart@<p>", "<p>'s host restarts: open connections and held requests are lost"),
    ("net:<fault>@<p>/<route>", "a request fault (drop-request, drop-response, delay, duplicate, 5xx-before, 5xx-after) aimed at the next request that takes <route>, whatever requests to <p> come first"),
    ("net:duplicate@<p>:<duration>", "the next request to <p> is answered, and a copy of it arrives <duration> of logical time later (a retry by a proxy), answered to nobody"),
    ("webhook:duplicate@<p>", "<p>'s next webhook delivery is made again later, whatever the endpoint answers"),
    ("webhook:reorder@<p>", "<p>'s next webhook delivery carries the event queued behind the oldest pending one"),
];
