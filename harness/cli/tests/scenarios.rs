//! The six failure windows of the payout article against real PostgreSQL, LocalStack SQS and Redis,
//! started once for this test process through the harness (`crashpoint::testkit`).
//! Each test asserts the verdict, the key trace facts, and a snapshot of the whole trace.

use crashpoint::scenario::{run_scenario, ScenarioOutcome};
mod common;
use crashpoint::testkit;

fn run(system: &str, name: &str, schedule: Option<&str>) -> ScenarioOutcome {
    let s = common::scenario(name);
    let schedule = schedule.map(|t| common::schedule(&s, t));
    run_scenario(&testkit::endpoints(), common::payout(system), &s, schedule.as_ref())
        .unwrap_or_else(|e| panic!("{e:#}"))
}

/// Runs a seed window on the reference system; asserts it passes, that the trace has every
/// fact in `facts`, and that the trace matches its snapshot.
fn window(name: &str, facts: &[&str]) {
    let o = run("reference", name, None);
    let failed: Vec<_> = o.verdicts.iter().filter(|v| !v.holds).collect();
    assert!(failed.is_empty(), "{name}: invariants violated: {failed:?}\n{}", o.trace);
    assert!(o.missing_trace_facts.is_empty(), "{name}: missing {:?}\n{}", o.missing_trace_facts, o.trace);
    for f in facts {
        assert!(o.trace.contains(f), "{name}: trace lacks {f:?}\n{}", o.trace);
    }
    insta::assert_snapshot!(name.replace('/', "__"), o.trace);
}

#[test]
fn concurrent_same_event_second_blocks_then_does_nothing() {
    window(
        "windows/concurrent-same-event",
        &[
            "c2   claim                                   ⧗ blocked by c1",
            "c2   claim                                   → no row",
        ],
    );
}

#[test]
fn crash_after_commit_redelivery_is_a_no_op() {
    window(
        "windows/crash-after-commit",
        &["c1   ✗ CRASH at after_commit", "e1 already processed: duplicate, no effect"],
    );
}

#[test]
fn fail_after_claim_rolls_back_and_retry_pays() {
    window("windows/fail-after-claim", &["✗ injected failure at after_claim", "c1   rollback", "m1 (receive 2)"]);
}

#[test]
fn lock_expiry_second_dispatch_passes_postgres_allows_one_payout() {
    window("windows/lock-expiry", &["lock payment-captured.e1 expired", "m2 (e1)", "⧗ blocked by c1"]);
}

#[test]
fn relay_death_after_send_published_twice_applied_once() {
    window("windows/relay-death-after-send", &["x1 (ob1)", "x2 (ob1)", "publication ob1 already applied"]);
}

#[test]
fn replay_inside_retention_is_a_no_op() {
    window("windows/replay-retention-edge/inside", &["retention purged 0 dedup rows", "e1 already processed"]);
}

#[test]
fn replay_past_retention_is_caught_by_the_unique_constraint() {
    window(
        "windows/replay-retention-edge/past",
        &["retention purged 1 dedup rows", "parked in the failure transport: Payment p1 already has a merchant payout"],
    );
}

#[test]
fn same_schedule_gives_the_same_trace_byte_for_byte() {
    let a = run("reference", "windows/concurrent-same-event", None);
    let b = run("reference", "windows/concurrent-same-event", None);
    assert_eq!(a.trace, b.trace);
    assert_eq!(a.calls, b.calls);
}

#[test]
fn a_handler_without_dedup_is_caught_paying_twice() {
    // The crash-after-commit window, with the drain doing the redelivery: op names are left
    // out because the mutant's calls differ from the reference's.
    let o = run("no-dedup", "windows/crash-after-commit", Some("p:lock p:send c1:recv c1:crash@after_commit tick:31s"));
    assert!(!o.passed(), "no-dedup passed:\n{}", o.trace);
    let v = o.verdicts.iter().find(|v| v.invariant == "exactly one payout per payment").unwrap();
    assert!(!v.holds, "{v:?}");
    assert_eq!(v.detail, "payment p1 has 2 payouts");
}

// ---- Message retention, in logical time ----

#[test]
fn a_message_processed_inside_its_queues_retention_is_paid_once() {
    window("aws/retention", &["clock +3d", "c1   recv                                    → m1 (receive 1)"]);
}

/// This schedule used to pass, but SQS deletes a message after its queue's
/// retention (4 days by default) whether or not anyone processed it.
#[test]
fn a_message_left_past_its_queues_retention_is_reported_expired_unprocessed() {
    let o = run("reference", "aws/retention", Some("p:lock p:send tick:15d c1:recv"));
    assert!(
        o.trace.contains("m1 outlived the message retention of payments (4d): SQS deleted it unprocessed"),
        "{}",
        o.trace
    );
    assert!(o.trace.contains("c1   recv                                    → empty"), "{}", o.trace);
    let v = o.verdicts.iter().find(|v| v.invariant == crashpoint::checker::NOTHING_EXPIRED).unwrap();
    assert!(!v.holds, "{}", o.trace);
    assert_eq!(v.detail, "m1 (e1) on payments expired unprocessed: the queue's retention is 4d");
    let payout = o.verdicts.iter().find(|v| v.invariant == "exactly one payout per payment").unwrap();
    assert_eq!(payout.detail, "payment p1 has no payout");
}

// ---- Dead-letter queues: the move and the redrive, in logical time ----

/// A message received maxReceiveCount times moves to the dead-letter queue at the
/// next receive from its queue (which finds nothing), and a redrive inside its retention sends
/// it back as a new message.
#[test]
fn a_dead_lettered_message_redriven_inside_its_retention_is_paid_once() {
    window(
        "aws/dead-letter-retention",
        &["clock +3d", "c1   recv                                    → m2 (receive 1)"],
    );
}

/// On a standard queue a dead-letter queue's retention counts from the first
/// enqueue, so a message moved a few seconds after its send and redriven 4 days later is gone,
/// although it spent less than 4 days on the dead-letter queue.
#[test]
fn a_dead_lettered_message_expires_four_days_after_its_first_enqueue_not_after_the_move() {
    let schedule = "p:lock p:send c1:recv c1:fail@after_receive c1:retry tick:1s \
                    c1:recv c1:fail@after_receive c1:retry tick:2s c1:recv tick:4d sqs:redrive";
    let o = run("reference", "aws/dead-letter-retention", Some(schedule));
    assert!(
        o.trace.contains("dlq1 outlived the message retention of payments-dlq (4d): SQS deleted it unprocessed"),
        "{}",
        o.trace
    );
    assert!(
        o.trace.contains("sqs:redrive: the dead-letter queues hold no message"),
        "nothing is left to redrive\n{}",
        o.trace
    );
    let v = o.verdicts.iter().find(|v| v.invariant == crashpoint::checker::NOTHING_EXPIRED).unwrap();
    assert!(!v.holds, "{}", o.trace);
    assert_eq!(
        v.detail,
        "dlq1 (e1) on payments-dlq expired unprocessed: the queue's retention is 4d, counted from m1's enqueue \
         on payments at 0.000s, not from its move to payments-dlq at 3.000s"
    );
    let payout = o.verdicts.iter().find(|v| v.invariant == "exactly one payout per payment").unwrap();
    assert_eq!(payout.detail, "payment p1 has no payout");
}

/// SQS moves a message at a receive, not when its visibility expires: until another
/// receive, the holder whose visibility timeout ran out still deletes it with its handle, and
/// nothing reaches the dead-letter queue.
#[test]
fn a_holder_past_its_visibility_timeout_still_deletes_a_message_at_the_receive_limit() {
    let schedule = "p:lock p:send c1:recv c1:fail@after_receive c1:retry tick:1s c1:recv c1:begin tick:31s \
                    c1:claim c1:insert_payout c1:insert_outbox c1:commit c1:unlock c1:delete";
    let o = run("reference", "aws/dead-letter-retention", Some(schedule));
    assert!(o.verdicts.iter().all(|v| v.holds), "{:?}\n{}", o.verdicts, o.trace);
    assert!(o.trace.contains("visibility timeout of m1 expired"), "{}", o.trace);
    assert!(o.trace.contains("c1   delete                                  → m1 deleted"), "{}", o.trace);
    assert!(!o.trace.contains("payments-dlq"), "nothing moves without a receive\n{}", o.trace);
}

/// Nobody redrives during the schedule; the drain's operator does, and the new
/// message is paid once.
#[test]
fn the_drain_redrives_what_the_schedule_left_on_the_dead_letter_queue() {
    let schedule =
        "p:lock p:send c1:recv c1:fail@after_receive c1:retry tick:1s c1:recv c1:fail@after_receive c1:retry tick:2s";
    let o = run("reference", "aws/dead-letter-retention", Some(schedule));
    assert!(o.verdicts.iter().all(|v| v.holds), "{:?}\n{}", o.verdicts, o.trace);
    assert!(o.trace.contains("redrive: dlq1 moved from payments-dlq back to payments as m2"), "{}", o.trace);
}

// ---- FIFO queues: deduplication in logical time ----

/// A send inside the 5-minute window is accepted and dropped by SQS (LocalStack
/// answers with the first message's id), after the first message was deleted too.
#[test]
fn a_send_inside_the_fifo_window_is_dropped_even_after_the_delete() {
    window(
        "payout/fifo-duplicate-send",
        &["ok, dropped: FIFO deduplication (e1 was accepted as m1 at 0.000s, less than 5 min before)"],
    );
}

#[test]
fn a_replay_past_the_fifo_window_is_a_new_message_and_paid_once() {
    window("payout/fifo-replay", &["replayed e1 from the failure transport as m2", "m2 (receive 1)"]);
}

/// The checker reports a replay that FIFO deduplication dropped, though the
/// operator needed it (the parked event is then never paid).
#[test]
fn a_replay_inside_the_fifo_window_is_reported_suppressed() {
    let schedule = "p:lock p:send c1:recv c1:fail@after_receive c1:park c1:unlock c1:delete tick:4m replay";
    let o = run("reference", "payout/fifo-replay", Some(schedule));
    assert!(o.trace.contains("replay: SQS accepted the replay of e1 and dropped it"), "{}", o.trace);
    let v = o.verdicts.iter().find(|v| v.invariant == crashpoint::checker::NO_REPLAY_SUPPRESSED).unwrap();
    assert!(!v.holds, "{}", o.trace);
    assert_eq!(
        v.detail,
        "the replay of e1 to payments at 240.000s was dropped: FIFO deduplication, m1 had been accepted with the same MessageDeduplicationId less than 5 min before, and no copy of e1 was handled after it"
    );
    let payout = o.verdicts.iter().find(|v| v.invariant == "exactly one payout per payment").unwrap();
    assert_eq!(payout.detail, "payment p1 has no payout");
}

/// A dropped replay is harmless while the message it duplicates is still on its way: here c1
/// parks e1 and crashes before its delete, so m1 comes back after its visibility timeout and is
/// paid; the replay SQS dropped meanwhile is not reported.
#[test]
fn a_replay_dropped_while_its_original_is_in_flight_is_not_reported() {
    let o = run(
        "reference",
        "payout/fifo-replay",
        Some("p:lock p:send c1:recv c1:fail@after_receive c1:park c1:crash replay"),
    );
    assert!(o.trace.contains("replay: SQS accepted the replay of e1 and dropped it"), "{}", o.trace);
    let failed: Vec<_> = o.verdicts.iter().filter(|v| !v.holds).collect();
    assert!(failed.is_empty(), "{failed:?}\n{}", o.trace);
}

// ---- PostgreSQL outcome faults ----

#[test]
fn a_lost_commit_reply_leaves_the_message_and_the_redelivery_finds_the_claim() {
    window("payout/commit-response-lost", &["its reply was lost", "e1 already processed: duplicate, no effect"]);
}

/// The same lost reply pays twice without a dedup claim: the handler took the error for a
/// rollback, and the redelivery pays again.
#[test]
fn a_lost_commit_reply_makes_a_handler_without_dedup_pay_twice() {
    let schedule = "p:lock p:send c1:recv c1:begin c1:insert_payout c1:insert_outbox pg:commit-response-lost c1:commit";
    let o = run("no-dedup", "payout/commit-response-lost", Some(schedule));
    let v = o.verdicts.iter().find(|v| v.invariant == "exactly one payout per payment").unwrap();
    assert_eq!(v.detail, "payment p1 has 2 payouts", "{}", o.trace);
}

#[test]
fn a_connection_reset_rolls_the_claim_back_and_the_redelivery_pays_once() {
    window("payout/connection-reset", &["c1   insert_payout", "the server rolled back the open transaction"]);
}

// ---- AWS behaviours that LocalStack does not produce, injected by the nemesis ----

#[test]
fn stale_delete_noop_leaves_the_message_to_the_latest_handle() {
    window("aws/stale-delete-noop", &["c1   delete                                  → ok, but m1 is not deleted"]);
}

/// A redelivered copy (`sqs:redeliver-after-delete`) is a new SQS message under the deleted
/// one's label: a worker that still holds a handle of the deleted message deletes nothing
/// with it, and the copy, in flight with a crashed worker, comes back when its visibility
/// timeout expires. The harness once took that delete for the copy's, never expired it, and
/// reported a correct handler not quiescent (the harmless `inbox-lookup-first`, catalogue
/// seed 10, schedule 228).
#[test]
fn a_delete_with_a_handle_of_the_deleted_message_leaves_its_redelivered_copy() {
    let schedule =
        "c2:crash@after_commit p:crash@after_send sqs:redeliver-after-delete c2 tick:901s c2 c2:fail@after_receive";
    for system in ["inbox-lookup-first", "reference"] {
        let o = run(system, "payout/catalogue", Some(schedule));
        let failed: Vec<_> = o.verdicts.iter().filter(|v| !v.holds).collect();
        assert!(failed.is_empty(), "{system}: {failed:?}\n{}", o.trace);
        if system == "inbox-lookup-first" {
            assert!(o.trace.contains("m1 delivered once more after its delete"), "{}", o.trace);
            assert!(
                o.trace.contains("c1   delete                                  → ok, but m1 is not deleted"),
                "{}",
                o.trace
            );
        }
    }
}

/// `c1:lag` holds c1 before its COMMIT in the drain until the others settle. With
/// c1's outbox row inserted and not committed, c2 commits a newer row, r1 publishes it, and only
/// then does c1 commit: the reference relay publishes c1's row too, the watermark relay never
/// does (the window of `payout/watermark-relay`, reached from a schedule of steps and one lag).
#[test]
fn a_lagging_consumer_commits_last_and_only_the_watermark_relay_loses_its_row() {
    let schedule = "p p p p c1 c1 c1 c1 c1 c1:lag";
    let o = run("reference", "payout/catalogue", Some(schedule));
    assert!(o.passed(), "{}", o.trace);
    let lag = o.trace.find("c1 falls behind").expect("no lag in the trace");
    let caught_up = o.trace.find("drain: no other worker can step; c1 catches up").expect("c1 never caught up");
    let c1_commit = o.trace[caught_up..].find("c1   commit").map(|i| i + caught_up).expect("c1 never committed");
    let r1_commit = o.trace[lag..].find("r1   commit").map(|i| i + lag).expect("r1 never committed");
    assert!(r1_commit < c1_commit, "the relay did not publish before c1 committed:\n{}", o.trace);
    let o = run("relay-watermark", "payout/catalogue", Some(schedule));
    let failed: Vec<_> = o.verdicts.iter().filter(|v| !v.holds).map(|v| v.invariant.as_str()).collect();
    assert!(failed.contains(&"every outbox event published at least once"), "{failed:?}\n{}", o.trace);
}

/// `c:lag@recv` holds every handler of role `c` before its next receive in the drain
/// until the others settle. With the dispatch lock of e1 lost (`redis:restart`) and e1 dispatched again,
/// the producer sends both copies before any consumer receives, and c1 receives all four
/// messages in one batch: the batch reference numbers its DeleteMessageBatch entries by
/// position and deletes both copies; `batch-entry-id-identity` gives both the event id and
/// SQS rejects the whole batch, every time the two come back together (the window of
/// `payout/batch-duplicate-delivery`, reached without a clock jump).
#[test]
fn handlers_that_lag_before_their_receive_take_two_copies_in_one_batch() {
    let schedule = "dispatch:e1 p redis:restart c:lag@recv";
    let o = run("batch-entry-id-identity", "payout/catalogue", Some(schedule));
    assert!(o.trace.contains("c3 falls behind: in the drain it waits before its next recv"), "{}", o.trace);
    assert!(o.trace.contains("drain: no other worker can step; c1, c2, c3 catch up"), "{}", o.trace);
    let caught_up = o.trace.find("catch up").unwrap();
    assert!(!o.trace[..caught_up].contains("recv  "), "a consumer received before it caught up:\n{}", o.trace);
    assert!(o.trace.contains("c1   recv                                    → m1 (receive 1), m2 (receive 1), m3 (receive 1), m4 (receive 1)"), "{}", o.trace);
    assert!(o.trace.contains("BatchEntryIdsNotDistinct"), "{}", o.trace);
    let failed: Vec<_> = o.verdicts.iter().filter(|v| !v.holds).map(|v| v.invariant.as_str()).collect();
    assert!(failed.iter().any(|f| f.starts_with("quiescence")), "{failed:?}\n{}", o.trace);
    let o = run("reference", "payout/explore-batches", Some(schedule));
    assert!(
        o.trace.contains("c1   recv                                    → m1 (receive 1), m2 (receive 1)"),
        "{}",
        o.trace
    );
    assert!(o.passed(), "{:?}\n{}", o.verdicts.iter().filter(|v| !v.holds).collect::<Vec<_>>(), o.trace);
}

/// `redis:lose-lock` waits for a lock asked for in vain (the in-process front-end): the
/// producer's second dispatch of e1 finds e1's dispatch lock held by the message in flight, the
/// lock is lost first and the producer takes it, so e1 is sent twice while c1 still handles m1.
/// The reference's compare-and-delete then deletes nothing; `lock-without-token`'s plain DEL
/// deletes the lock the producer holds now. Without the fault the second dispatch is suppressed.
#[test]
fn an_armed_lose_lock_hands_a_held_lock_to_the_worker_that_asks_for_it() {
    let schedule = "redis:lose-lock dispatch:e1 p";
    let o = run("reference", "payout/catalogue", Some(schedule));
    let lost = o.trace.find(
        "redis:lose-lock: lock payment-captured.e1 was held when p asked for it: lost (a failover), and p takes it",
    );
    let lost = lost.unwrap_or_else(|| panic!("the lock was not lost:\n{}", o.trace));
    assert!(
        o.trace[lost..].lines().nth(1).is_some_and(|l| l.contains("p    lock") && l.ends_with("→ acquired")),
        "{}",
        o.trace
    );
    assert!(o.trace.contains("→ m4 (e1)"), "e1 was not sent again:\n{}", o.trace);
    assert!(o.trace.contains("c1   unlock         [after_commit]           → not held"), "{}", o.trace);
    assert!(o.passed(), "{:?}\n{}", o.verdicts.iter().filter(|v| !v.holds).collect::<Vec<_>>(), o.trace);
    let o = run("lock-without-token", "payout/catalogue", Some(schedule));
    let failed: Vec<_> = o.verdicts.iter().filter(|v| !v.holds).map(|v| v.invariant.as_str()).collect();
    assert_eq!(failed, ["a lock is released only by its holder"], "{}", o.trace);
    let o = run("reference", "payout/catalogue", Some("dispatch:e1 p"));
    assert!(o.trace.contains("dispatch of e1 suppressed: lock payment-captured.e1 is held"), "{}", o.trace);
    assert!(!o.trace.contains("→ m4 (e1)"), "{}", o.trace);
}

#[test]
fn skip_without_delete_loses_liveness_when_a_stale_delete_keeps_the_message() {
    let o = run("skip-without-delete", "aws/stale-delete-noop", None);
    let v = o.verdicts.iter().find(|v| v.invariant.starts_with("quiescence")).unwrap();
    assert!(!v.holds, "skip-without-delete passed under sqs:stale-delete-noop:\n{}", o.trace);
    // On LocalStack alone (no fault), c1's stale delete removes the message and hides the bug;
    // the run records that its verdict rests on that behaviour.
    let o = run("skip-without-delete", "aws/stale-delete-emulated", None);
    assert!(o.passed(), "expected LocalStack to hide the bug:\n{}", o.trace);
    assert!(o.trace.contains("m1 deleted with a stale receipt handle"), "{}", o.trace);
    assert!(o.history.depends_on().contains("stale-receipt-handle"));
}

#[test]
fn a_stale_delete_on_the_emulator_is_marked_as_depending_on_it() {
    window("aws/stale-delete-emulated", &[]);
    let o = run("reference", "aws/stale-delete-emulated", None);
    assert_eq!(o.history.depends_on().into_iter().collect::<Vec<_>>(), vec!["stale-receipt-handle".to_string()]);
}

#[test]
fn redelivery_after_delete_is_a_no_op() {
    window("aws/redeliver-after-delete", &["c2   claim                                   → no row"]);
}

#[test]
fn a_lost_receive_comes_back_after_the_visibility_timeout() {
    window(
        "aws/receive-lost",
        &["c2   recv                                    → empty", "c2   commit                                  → ok"],
    );
}

/// Outbox rows get their labels in order of creation: c1's row, inserted first and committed
/// last, is `ob1` even though the relay publishes c2's `ob2` first.
#[test]
fn outbox_labels_follow_the_order_of_creation() {
    window("payout/outbox-label-order", &["→ x1 (ob2)", "→ x2 (ob1)"]);
}

/// A producer that dies holding its dispatch lock suppresses its own retries until
/// the lock expires; the upstream dispatches the event again after 900 logical seconds.
#[test]
fn a_dispatch_lock_outliving_its_producer_delays_the_event_and_loses_nothing() {
    window(
        "windows/dispatch-lock-outlives-crash",
        &["900.000s  p    send           [after_lock]             → m1 (e1)"],
    );
}

/// Without an upstream retry the same schedule loses e1 at the producer, and the checker says
/// so (it used to pass every invariant).
#[test]
fn without_upstream_retry_the_suppressed_dispatch_is_reported_lost() {
    let o = run(
        "no-upstream-retry",
        "windows/dispatch-lock-outlives-crash",
        Some("p:lock p:crash p:restart dispatch:e1 p:lock"),
    );
    let lost = o.verdicts.iter().find(|v| v.invariant.starts_with("nothing lost")).unwrap();
    assert!(!lost.holds, "{}", o.trace);
    assert!(
        lost.detail.contains("event e1 was dispatched and never sent: lost at the producer (its dispatch was suppressed by lock payment-captured.e1, taken by p at 0.000s)"),
        "{}",
        lost.detail
    );
    let payout = o.verdicts.iter().find(|v| v.invariant == "exactly one payout per payment").unwrap();
    assert_eq!(payout.detail, "payment p1 has no payout");
}

// ---- A relay with a watermark ----

/// The transaction that began first commits last: the reference relay asks for every
/// unpublished row and publishes c1's late row too.
#[test]
fn a_row_committed_after_a_newer_one_is_published_by_the_reference_relay() {
    window("payout/watermark-relay", &["r1   send           [relay_after_select]     → x1 (ob2)", "→ x2 (ob1)"]);
}

/// The same schedule loses c1's row with a relay that selects only rows created after the
/// last one it published: its watermark passed ob2 before ob1 committed below it.
#[test]
fn a_watermark_relay_never_publishes_a_row_that_commits_below_its_watermark() {
    let o = run("relay-watermark", "payout/watermark-relay", None);
    let v = o.verdicts.iter().find(|v| v.invariant == "every outbox event published at least once").unwrap();
    assert_eq!((v.holds, v.detail.as_str()), (false, "outbox row ob1 (from e1) was never sent"), "{}", o.trace);
    assert!(o.trace.contains("r1   send           [relay_after_select]     → x1 (ob2)"), "{}", o.trace);
}

// ---- Lock ownership ----

/// A consumer whose dispatch lock expired and was taken by a later dispatch releases it: the
/// reference's compare-and-delete of its message's token deletes nothing.
#[test]
fn a_consumer_whose_lock_expired_does_not_release_the_later_dispatchs_lock() {
    window(
        "payout/lock-ownership",
        &[
            "c1   unlock         [after_commit]           → not held",
            "c2   unlock         [after_commit]           → released",
        ],
    );
}

/// The same schedule with a plain DEL deletes the later dispatch's lock, and the engine's
/// history invariant names who released whose lock.
#[test]
fn a_plain_del_of_a_lock_taken_by_a_later_dispatch_is_caught() {
    let o = run("lock-without-token", "payout/lock-ownership", None);
    let v = o.verdicts.iter().find(|v| v.invariant == "a lock is released only by its holder").unwrap();
    assert_eq!(
        (v.holds, v.detail.as_str()),
        (false, "c1, handling m1, released payment-captured.e1 which p took at 21.000s for m2"),
        "{}",
        o.trace
    );
    let others: Vec<&str> = o
        .verdicts
        .iter()
        .filter(|v| !v.holds && v.invariant != "a lock is released only by its holder")
        .map(|v| v.invariant.as_str())
        .collect();
    assert!(others.is_empty(), "only the lock invariant should break: {others:?}");
}

// ---- Batches ----

/// One receive returns three messages; the consumer dies after the first commit, and all three
/// stay in flight until their visibility times out; c2 gets them together and one
/// DeleteMessageBatch acknowledges them.
#[test]
fn a_crash_in_a_batch_strands_every_message_of_it_until_the_visibility_timeout() {
    window(
        "payout/batch-receive",
        &[
            "c1   recv                                    → m1 (receive 1), m2 (receive 1), m3 (receive 1)",
            "c2   recv                                    → m1 (receive 2), m2 (receive 2), m3 (receive 2)",
            "c2   delete_batch                            → m1 deleted, m2 deleted, m3 deleted",
        ],
    );
}

/// A DeleteMessageBatch entry that fails under HTTP 200 is deleted again by the reference.
#[test]
fn a_failed_batch_entry_is_deleted_again() {
    window(
        "payout/batch-delete-partial",
        &["→ m1 deleted, m2 failed (InternalError)", "c1   delete                                  → m2 deleted"],
    );
}

/// The same schedule with a consumer that ignores the failed entry: the engine's
/// acknowledgement invariant names the message and the receive that went on without it.
#[test]
fn an_ignored_failed_batch_entry_is_caught() {
    let o = run("batch-ignores-failed-deletes", "payout/batch-delete-partial", None);
    let v = o.verdicts.iter().find(|v| v.invariant == "no failed acknowledgement is ignored").unwrap();
    assert!(!v.holds, "{}", o.trace);
    assert!(
        v.detail.starts_with("c1 received again at ")
            && v.detail.contains("ignoring the failed delete of m2 (InternalError)"),
        "{}",
        v.detail
    );
    let others: Vec<&str> = o
        .verdicts
        .iter()
        .filter(|v| !v.holds && v.invariant != "no failed acknowledgement is ignored")
        .map(|v| v.invariant.as_str())
        .collect();
    assert!(others.is_empty(), "the redelivered m2 is a harmless duplicate: {others:?}\n{}", o.trace);
}

/// Two deliveries of one event in one receive: the reference's positional entry ids delete both.
#[test]
fn two_deliveries_of_one_event_in_a_batch_are_both_deleted() {
    window(
        "payout/batch-duplicate-delivery",
        &[
            "c1   recv                                    → m1 (receive 1), m2 (receive 1)",
            "c1   delete_batch                            → m1 deleted, m2 deleted",
        ],
    );
}

/// With the event id as entry id SQS rejects the whole batch, every time the two come back
/// together: the run never gets quiet.
#[test]
fn event_ids_as_batch_entry_ids_get_the_batch_rejected_forever() {
    let o = run("batch-entry-id-identity", "payout/batch-duplicate-delivery", None);
    assert!(o.trace.contains("c1   delete_batch                            → error: DeleteMessageBatch: AWS.SimpleQueueService.BatchEntryIdsNotDistinct"), "{}", o.trace);
    let v = o.verdicts.iter().find(|v| v.invariant.starts_with("quiescence")).unwrap();
    assert!(!v.holds, "{}", o.trace);
    assert!(
        o.verdicts
            .iter()
            .filter(|v| !v.holds)
            .all(|v| v.invariant.starts_with("quiescence") || v.invariant.starts_with("expected trace")),
        "{:?}",
        o.verdicts
    );
}

/// A batch size outside SQS's 1 to 10 is refused when the scenario loads, naming the field.
#[test]
fn a_batch_size_outside_1_to_10_is_refused_at_load() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("payout")).unwrap();
    let path = dir.path().join("payout/big-batch.toml");
    let source = crashpoint::scenario::scenarios_dir().join("payout/batch-receive.toml");
    let text = std::fs::read_to_string(source).unwrap().replace("max_messages = 10", "max_messages = 11");
    std::fs::write(&path, text).unwrap();
    let e = crashpoint::scenario::load(dir.path(), &path, &common::registry()).unwrap_err();
    let e = format!("{e:#}");
    assert!(
        e.contains("big-batch.toml:")
            && e.contains("max_messages: expected 1 to 10 (SQS ReceiveMessage MaxNumberOfMessages), got 11"),
        "{e}"
    );
}

// ---- Graceful shutdown ----

/// A stop in the middle of a batch: c1 finishes m1, releases m2 and m3 at once, deletes m1
/// and exits; c2 receives the released two without waiting for a visibility timeout.
#[test]
fn a_graceful_stop_releases_the_messages_not_started_and_acknowledges_the_rest() {
    window(
        "payout/graceful-stop",
        &[
            "c1   release                                 → m3 visible again in 0s",
            "c1   delete_batch                            → m1 deleted",
            "0.000s  c1   ■ STOPPED gracefully, before its next receive",
            "0.000s  c2   recv                                    → m2 (receive 2), m3 (receive 2)",
        ],
    );
}

/// The two mutants of graceful shutdown leave messages in flight under the stopped worker:
/// the engine's invariant names them and the delay their next consumer paid, in logical time.
#[test]
fn a_stopped_worker_that_keeps_or_drops_messages_is_caught_with_the_delay() {
    let cases = [
        ("stop-keeps-prefetched", "c1 stopped at 0.000s holding m2, neither deleted nor released (visibility 0): it stayed invisible until its visibility timeout, received again 30.000s later"),
        ("stop-drops-acks", "c1 stopped at 0.000s holding m1, neither deleted nor released (visibility 0): it stayed invisible until its visibility timeout, received again 30.000s later"),
    ];
    for (mutant, says) in cases {
        let o = run(mutant, "payout/graceful-stop", None);
        let v = o.verdicts.iter().find(|v| v.invariant == "a stopped worker holds no message").unwrap();
        assert!(!v.holds && v.detail.contains(says), "{mutant}: {}\n{}", v.detail, o.trace);
        let business: Vec<&str> = o
            .verdicts
            .iter()
            .filter(|v| !v.holds && !v.invariant.starts_with("a stopped") && !v.invariant.starts_with("expected trace"))
            .map(|v| v.invariant.as_str())
            .collect();
        assert!(business.is_empty(), "{mutant}: the delayed messages are handled once: {business:?}");
    }
}

/// The third: a consumer that sends the messages it has not started back as new copies and
/// releases the originals too. Nothing is held and the effects stay single (the copies are
/// duplicates the dedup absorbs), but each stop doubles the messages of those identities.
#[test]
fn a_stopped_worker_that_resends_its_messages_as_copies_is_caught() {
    let o = run("stop-resends-copies", "payout/graceful-stop", None);
    assert!(o.trace.contains("c1     · m2 not started: sent again as m4"), "{}", o.trace);
    let v = o.verdicts.iter().find(|v| v.invariant == crashpoint::checker::COPIES_BOUNDED).unwrap();
    assert_eq!(
        v.detail,
        "c1 sent m4, a copy of e2 (m2, which it held), back to payments at 0.000s and did not delete m2 before it stopped: both are delivered; \
         c1 sent m5, a copy of e3 (m3, which it held), back to payments at 0.000s and did not delete m3 before it stopped: both are delivered"
    );
    let others: Vec<&str> = o
        .verdicts
        .iter()
        .filter(|v| !v.holds && v.invariant != crashpoint::checker::COPIES_BOUNDED)
        .map(|v| v.invariant.as_str())
        .collect();
    assert!(others.is_empty(), "only the copies are wrong: {others:?}\n{}", o.trace);
    let reference = run("reference", "payout/graceful-stop", None);
    assert!(reference.verdicts.iter().any(|v| v.invariant == crashpoint::checker::COPIES_BOUNDED && v.holds));
}

/// `c1:stop` in a script is refused for what cannot stop gracefully, naming the decision: the
/// producer, a worker not running.
#[test]
fn stop_applies_only_to_a_running_in_process_handler() {
    let s = common::scenario("payout/graceful-stop");
    for (text, says) in [
        ("p:stop", "decision 1 `p:stop`: p is not an in-process handler: only those stop gracefully"),
        ("c1:crash c1:stop", "decision 2 `c1:stop`: c1 is not running"),
    ] {
        let schedule = common::schedule(&s, text);
        let e = run_scenario(&testkit::endpoints(), common::payout("reference"), &s, Some(&schedule))
            .err()
            .map(|e| format!("{e:#}"));
        assert!(e.as_deref().is_some_and(|e| e.contains(says)), "{text}: {e:?}");
    }
}
