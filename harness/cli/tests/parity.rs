//! One model per service, two front-ends: the same schedule run with the payout consumer
//! in-process (`Cx`: sqlx, the AWS SDK for Rust, redis-rs) and as the Python worker behind the
//! proxies (psycopg, boto3 and redis-py at the wire) records the same steps of every service:
//! each one's worker, outcome and facts, in order, up to the drain. Both front-ends hand what
//! the service answered to `sim/model/` (`sqs.rs`, `pg.rs`, `redis.rs`), which decides the
//! outcome and facts under the armed faults; a front-end that decided anything on its own (a
//! lost receive, a stale-handle delete, a replaced copy's handle, a COMMIT whose reply is lost,
//! a reset connection, a lock gone with a Redis restart) would differ here.
//!
//! The schedules are hand-picked (each fault in a window of its own) and generated from a
//! fixed seed over the consumer's windows: sends, receives, the visibility timeout passing,
//! crashes after the receive and after the COMMIT, the AWS-only SQS faults and the PostgreSQL
//! and Redis faults.

use crashpoint::{Entry, Fact, FaultEvent, History, Service};
mod common;

/// The steps of `history` before its drain, each service's: (worker, outcome and facts as
/// text), with each receipt handle blanked (SQS makes a new one at every receive) and each
/// UUID too (each run draws its events' identities afresh; the outcome names their labels).
fn steps(history: &History) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for e in &history.entries {
        match e {
            Entry::Fault { fault: FaultEvent::DrainStart, .. } => break,
            Entry::Step(s) if s.service != Service::None => {
                let facts: Vec<Fact> = s
                    .facts
                    .iter()
                    // What the program API says of itself (`Cx::handle`), which no process at
                    // the wire says: not a service's decision.
                    .filter(|f| !matches!(f, Fact::Handling { .. }))
                    .cloned()
                    .map(|f| match f {
                        Fact::Received { queue, msg, receive_count, .. } => {
                            Fact::Received { queue, msg, receive_count, receipt: String::new() }
                        }
                        f => f,
                    })
                    .collect();
                out.push((s.worker.clone(), blank_uuids(&format!("{:?} {:?} {:?}", s.service, s.outcome, facts))));
            }
            _ => {}
        }
    }
    out
}

/// `text` with every UUID in it ([`crashpoint::record::labels::uuids_in`]) replaced by `<uuid>`.
fn blank_uuids(text: &str) -> String {
    crashpoint::record::labels::uuids_in(text).into_iter().fold(text.to_string(), |t, u| t.replace(u, "<uuid>"))
}

/// `n` schedules of up to 12 decisions over `tokens`, from a fixed seed (a linear congruential
/// generator: the test needs no other randomness, and the same schedules every run).
fn generated(tokens: &[&str], n: usize) -> Vec<String> {
    let mut x: u64 = 20261207;
    let mut next = |m: usize| {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((x >> 33) as usize) % m
    };
    (0..n)
        .map(|_| {
            let len = 4 + next(9);
            // Every schedule sends first (the producer takes its lock, then sends), so that a
            // consumer has something to receive.
            let mut s = vec!["p p"];
            s.extend((0..len).map(|_| tokens[next(tokens.len())]));
            s.join(" ")
        })
        .collect()
}

#[test]
fn the_same_schedule_records_the_same_service_steps_in_process_and_at_the_wire() {
    let wire = common::scenario("python/explore");
    let mut in_process = wire.clone();
    in_process.external.clear();
    let tokens = [
        "p p",
        "c1",
        "c2",
        "c1",
        "c2",
        "tick:31s",
        "sqs:receive-lost",
        "sqs:stale-delete-noop",
        "sqs:redeliver-after-delete",
        "c1:crash@after_receive",
        "c2:crash@after_commit",
        "pg:commit-response-lost",
        "pg:connection-reset",
        "redis:lose-lock",
        "redis:restart",
    ];
    let mut schedules = vec![
        // Each fault in a window of its own.
        "sqs:receive-lost p p c1 tick:31s c2".to_string(),
        "sqs:stale-delete-noop p p c1 tick:31s c2 c1 c1 c1 c1 c1 c1 c1".to_string(),
        "sqs:redeliver-after-delete p p c1 c1 c1 c1 c1 c1 c1 c1 c1".to_string(),
        "p p pg:commit-response-lost c1 c1 c1 c1 c1 c1 c1 c1 tick:31s c2 c2 c2 c2".to_string(),
        "p p pg:connection-reset c1 c1 c1 c1 tick:31s c2 c2 c2".to_string(),
        "p p redis:restart c1 c1 c1 c1 c1 c1 c1 c1".to_string(),
    ];
    schedules.extend(generated(&tokens, 8));
    let e = crashpoint::testkit::endpoints();
    let mut compared = 0;
    for text in &schedules {
        let schedule = common::schedule(&wire, text);
        let run = |s| crashpoint::scenario::run_scenario(&e, common::payout("reference"), s, Some(&schedule));
        match (run(&in_process), run(&wire)) {
            (Ok(a), Ok(b)) => {
                let traces = format!("in-process:\n{}\nat the wire:\n{}", a.trace, b.trace);
                let (a, b) = (steps(&a.history), steps(&b.history));
                assert!(!a.is_empty(), "`{text}` made no service call\n{traces}");
                if let Some(i) = (0..a.len().max(b.len())).find(|&i| a.get(i) != b.get(i)) {
                    panic!(
                        "`{text}`: step {i} differs: in-process {:?}, at the wire {:?}\n{traces}",
                        a.get(i),
                        b.get(i)
                    );
                }
                compared += 1;
            }
            // A decision that does not apply (a worker with nothing to do) does not apply to
            // either: the two consumers make the same calls.
            (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string(), "`{text}`"),
            (a, b) => panic!("`{text}`: in-process {:?}, at the wire {:?}", a.err(), b.err()),
        }
    }
    assert!(compared >= schedules.len() / 2, "only {compared} of {} schedules applied", schedules.len());
}
