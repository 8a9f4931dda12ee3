//! `[config] dead_letter`: gives one of the workload's queues a dead-letter queue, as a team's
//! infrastructure does with a `RedrivePolicy` (AWS SQS Developer Guide, "Using dead-letter
//! queues in Amazon SQS"):
//!
//! ```toml
//! [config]
//! dead_letter = { queue = "payments", max_receive_count = 2 }   # retention_s = 1209600 too
//! ```
//!
//! The engine adds queue `<queue>-dlq` (SQS's defaults: 4-day retention) and moves messages
//! there in logical time ([`crate::spec::DeadLetter`]); `sqs:redrive` and the drain move them
//! back as new messages.

use serde::Deserialize;

use crate::spec::{QueueSpec, DEFAULT_RETENTION_S};

/// SQS's range for `maxReceiveCount`.
const MAX_RECEIVE_COUNT: std::ops::RangeInclusive<u32> = 1..=1000;
/// SQS's range for `MessageRetentionPeriod`, s (60 s to 14 days).
const RETENTION_S: std::ops::RangeInclusive<u64> = 60..=1_209_600;
/// Label prefix of the messages on a dead-letter queue: a moved message gets a new label there
/// (`dlq1`, …), as it is a new SQS message.
const LABEL: &str = "dlq";

/// A scenario's `[config] dead_letter` table.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeadLetterConfig {
    /// The source queue, one of the workload's queue names.
    pub queue: String,
    /// Receives after which SQS moves a message to the dead-letter queue (1 to 1000).
    pub max_receive_count: u32,
    /// The dead-letter queue's message retention, logical s (60 to 1,209,600; SQS's default
    /// 4 days when absent, the same as a source queue left at its default).
    #[serde(default = "default_retention_s")]
    pub retention_s: u64,
    /// The dead-letter queue's name, `<queue>-dlq` (set by [`parse`], leaked once per
    /// scenario file: a `&'static str` like the workload's own names).
    #[serde(skip)]
    pub dlq: &'static str,
}

fn default_retention_s() -> u64 {
    DEFAULT_RETENTION_S
}

/// Parses `[config] dead_letter` against the workload's `queues` and the scenario's
/// `fifo_queues`. Errors (the caller adds file, line and field): not a table of `queue`,
/// `max_receive_count` and `retention_s`; a value out of SQS's range; a queue the workload does
/// not declare (the message lists them); a FIFO source queue (a FIFO dead-letter queue resets
/// the enqueue time and replaces deduplication ids: not emulated).
pub fn parse(v: Option<toml::Value>, queues: &[QueueSpec], fifo_queues: &[&str]) -> Result<Option<DeadLetterConfig>, String> {
    let Some(v) = v else { return Ok(None) };
    let known = || queues.iter().map(|q| q.name).collect::<Vec<_>>().join(", ");
    let expected = || format!("expected a table {{ queue = \"<one of: {}>\", max_receive_count = <1 to 1000> }}", known());
    if !v.is_table() {
        return Err(format!("{}, found {} {v}", expected(), v.type_str()));
    }
    let c: DeadLetterConfig =
        v.clone().try_into().map_err(|e: toml::de::Error| format!("{}: {}, found {v}", expected(), e.message()))?;
    if !queues.iter().any(|q| q.name == c.queue) {
        return Err(format!("expected `queue` to be one of the workload's queues ({}), found \"{}\"", known(), c.queue));
    }
    if fifo_queues.contains(&c.queue.as_str()) {
        return Err(format!("a dead-letter queue for FIFO queue `{}` is not emulated; use a standard queue", c.queue));
    }
    if !MAX_RECEIVE_COUNT.contains(&c.max_receive_count) {
        return Err(format!("expected `max_receive_count` from 1 to 1000 (SQS's range), found {}", c.max_receive_count));
    }
    if !RETENTION_S.contains(&c.retention_s) {
        return Err(format!("expected `retention_s` from 60 to 1209600 (SQS's range, 14 days), found {}", c.retention_s));
    }
    Ok(Some(DeadLetterConfig { dlq: Box::leak(format!("{}-dlq", c.queue).into_boxed_str()), ..c }))
}

/// Adds the dead-letter queue `<queue>-dlq` of `c` to `queues` and sets the source queue's
/// [`QueueSpec::dead_letter`].
pub fn apply(c: &DeadLetterConfig, queues: &mut Vec<QueueSpec>) {
    let name = c.dlq;
    for q in queues.iter_mut().filter(|q| q.name == c.queue) {
        *q = q.clone().dead_letter(name, c.max_receive_count);
    }
    queues.push(QueueSpec::new(name, LABEL).retention_s(c.retention_s));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queues() -> Vec<QueueSpec> {
        vec![QueueSpec::new("payments", "m"), QueueSpec::new("payouts", "n")]
    }

    fn parse_str(s: &str, fifo: &[&str]) -> Result<Option<DeadLetterConfig>, String> {
        let t: toml::Table = toml::from_str(&format!("dead_letter = {s}")).unwrap();
        parse(t.get("dead_letter").cloned(), &queues(), fifo)
    }

    #[test]
    fn a_dead_letter_queue_is_added_with_the_source_queues_policy() {
        let c = parse_str("{ queue = \"payments\", max_receive_count = 2 }", &[]).unwrap().unwrap();
        assert_eq!(c.retention_s, DEFAULT_RETENTION_S);
        let mut q = queues();
        apply(&c, &mut q);
        assert_eq!(q.len(), 3);
        assert_eq!(q[0].dead_letter, Some(crate::spec::DeadLetter { queue: "payments-dlq", max_receive_count: 2 }));
        assert_eq!((q[2].name, q[2].retention_s, q[2].dead_letter), ("payments-dlq", DEFAULT_RETENTION_S, None));
        assert_eq!(q[1].dead_letter, None);
    }

    #[test]
    fn bad_tables_say_what_was_expected() {
        for (s, fifo, want) in [
            ("3", &[][..], "expected a table { queue = \"<one of: payments, payouts>\""),
            ("{ queue = \"payments\" }", &[], "missing field `max_receive_count`"),
            ("{ queue = \"payments\", max_receive_count = 2, colour = 1 }", &[], "unknown field `colour`"),
            ("{ queue = \"nope\", max_receive_count = 2 }", &[], "one of the workload's queues (payments, payouts), found \"nope\""),
            ("{ queue = \"payments\", max_receive_count = 0 }", &[], "`max_receive_count` from 1 to 1000"),
            ("{ queue = \"payments\", max_receive_count = 2, retention_s = 30 }", &[], "`retention_s` from 60 to 1209600"),
            ("{ queue = \"payments\", max_receive_count = 2 }", &["payments"], "FIFO queue `payments` is not emulated"),
        ] {
            let e = parse_str(s, fifo).unwrap_err();
            assert!(e.contains(want), "{s}: {e}");
        }
    }
}
