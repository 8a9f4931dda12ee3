//! The outbox relay decides which rows are due by the logical clock, not by PostgreSQL's
//! `now()` (wall time): a row whose `next_attempt_at` lies one logical hour ahead (a relay
//! backoff) is not published until the clock passes it. Real services, started once for this
//! test process through the harness.

use std::rc::Rc;

use async_trait::async_trait;
use crashpoint::scenario::run_scenario;
use crashpoint::{testkit, CallError, Cx, Delivery, Handler, Val};
use crashpoint_payout::messages::PaymentCaptured;
use crashpoint_payout::reference::consumer::{claim, insert_payout, CONSUMER};
use crashpoint_payout::reference::{acknowledge, DispatchLock};

mod common;

/// The reference consumer, except that its outbox row is due one logical hour after its insert.
struct DeferredOutbox;

#[async_trait(?Send)]
impl Handler for DeferredOutbox {
    async fn on_delivery(&self, cx: &mut Cx, d: Delivery) -> Result<(), CallError> {
        let ev: PaymentCaptured = serde_json::from_str(&d.body).map_err(|e| CallError::Unrecoverable(e.to_string()))?;
        let handled = async {
            cx.begin().await?;
            claim(cx, CONSUMER, ev.event_id).await?;
            let payout = insert_payout(cx, &ev, true).await?.expect("a first payout");
            let due = cx.now() + chrono::Duration::hours(1);
            cx.execute(
                "insert_outbox",
                "INSERT INTO outbox_event (id, causation_id, event_type, aggregate_id, payload, next_attempt_at) \
                 VALUES (gen_random_uuid(), $1, 'MerchantPayoutCreated', $2, $3, $4)",
                &[
                    Val::Uuid(ev.event_id),
                    Val::Uuid(ev.payment_id),
                    Val::Json(serde_json::json!({ "payoutId": payout })),
                    Val::Time(due),
                ],
            )
            .await?;
            cx.commit().await
        }
        .await;
        acknowledge(cx, CONSUMER, &d, &DispatchLock::of(&ev), handled).await
    }
}

#[test]
fn a_row_due_in_an_hour_waits_for_the_logical_clock() {
    let mut s = common::scenario("windows/relay-death-after-send");
    s.expect_trace.clear();
    let schedule =
        common::schedule(&s, "p:lock p:send c1:crash@after_delete r1:begin r1:select r1 tick:3601s r1:begin r1:select");
    let system = common::payout_with_consumer("deferred-outbox", |_| Rc::new(DeferredOutbox));
    let o = run_scenario(&testkit::endpoints(), system, &s, Some(&schedule)).unwrap();
    assert!(o.passed(), "{:?}\n{}", o.verdicts, o.trace);
    let selects: Vec<&str> = o.trace.lines().filter(|l| l.contains("r1   select")).collect();
    assert!(selects[0].trim_start().starts_with("0.000s") && selects[0].ends_with("→ 0 rows"), "{}", o.trace);
    assert!(selects[1].trim_start().starts_with("3601.000s") && selects[1].ends_with("→ 1 row"), "{}", o.trace);
}
