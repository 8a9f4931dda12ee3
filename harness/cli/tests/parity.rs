//! One SQS model, two front-ends: the same schedule run with the payout consumer in-process
//! (`Cx`, the AWS SDK for Rust) and as the Python worker behind the SQS proxy (boto3 at the
//! wire) records the same SQS steps: each one's worker, outcome and facts, in order, up to the
//! drain. Both front-ends hand what SQS answered to `sim/model/sqs.rs`, which decides the
//! outcome and facts under the armed faults; a front-end that decided anything on its own (a
//! lost receive, a stale-handle delete, a replaced copy's handle) would differ here.
//!
//! The schedules are generated from a fixed seed over the consumer's SQS windows: sends,
//! receives, the visibility timeout passing, crashes after the receive and after the COMMIT,
//! and the AWS-only SQS faults.

use crashpoint::{Entry, Fact, FaultEvent, History, Outcome, Service};
mod common;

/// The SQS steps of `history` before its drain: (worker, outcome, facts), with each receipt
/// handle blanked (SQS makes a new one at every receive) and each identity too (the outcome
/// names its label).
fn sqs_steps(history: &History) -> Vec<(String, Outcome, Vec<Fact>)> {
    let mut out = Vec::new();
    for e in &history.entries {
        match e {
            Entry::Fault { fault: FaultEvent::DrainStart, .. } => break,
            Entry::Step(s) if s.service == Service::Sqs => {
                let facts = s
                    .facts
                    .iter()
                    .cloned()
                    .map(|f| match f {
                        Fact::Received { queue, msg, receive_count, .. } => {
                            Fact::Received { queue, msg, receive_count, receipt: String::new() }
                        }
                        // Each run draws its events' identities afresh; the outcome names their labels.
                        Fact::Sent { queue, msg, .. } => Fact::Sent { queue, msg, identity: Default::default() },
                        Fact::Suppressed { queue, msg, replay, .. } => {
                            Fact::Suppressed { queue, msg, identity: Default::default(), replay }
                        }
                        f => f,
                    })
                    .collect();
                out.push((s.worker.clone(), s.outcome.clone(), facts));
            }
            _ => {}
        }
    }
    out
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
fn the_same_schedule_records_the_same_sqs_steps_in_process_and_at_the_wire() {
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
    ];
    let mut schedules = vec![
        // Each fault in a window of its own.
        "sqs:receive-lost p p c1 tick:31s c2".to_string(),
        "sqs:stale-delete-noop p p c1 tick:31s c2 c1 c1 c1 c1 c1 c1 c1".to_string(),
        "sqs:redeliver-after-delete p p c1 c1 c1 c1 c1 c1 c1 c1 c1".to_string(),
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
                let (a, b) = (sqs_steps(&a.history), sqs_steps(&b.history));
                assert!(!a.is_empty(), "`{text}` made no SQS call\n{traces}");
                assert_eq!(a, b, "`{text}`: the in-process steps (left) and the wire's (right) differ\n{traces}");
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
