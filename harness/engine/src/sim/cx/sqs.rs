//! The SQS calls of [`Cx`]: ReceiveMessage (one message or a batch), SendMessage,
//! DeleteMessage, DeleteMessageBatch and ChangeMessageVisibility. Visibility runs in logical
//! time: SQS is given [`REAL_VISIBILITY_S`] and the logical clock expires messages.

use aws_sdk_sqs::types::MessageSystemAttributeName;
use uuid::Uuid;

use super::{CallError, Cx, Delivery};
use crate::namespace::queues::REAL_VISIBILITY_S;
use crate::sim::io::on_io;

/// An entry of a DeleteMessageBatch that failed while the call succeeded.
#[derive(Debug, Clone)]
pub struct FailedEntry {
    /// The delivery it was to delete (still in the queue).
    pub delivery: Delivery,
    /// SQS's error code, e.g. `ReceiptHandleIsInvalid`, or `InternalError` from
    /// `sqs:batch-delete-partial`.
    pub code: String,
}
use crate::record::history::{Outcome, Service};
use crate::sim::model::sqs as model;

impl Cx {

    /// ReceiveMessage of at most one message, no long polling: [`Cx::receive_many`] with 1.
    pub async fn receive(&mut self, queue: &str) -> Result<Option<Delivery>, CallError> {
        Ok(self.receive_many(queue, 1).await?.pop())
    }

    /// ReceiveMessage of up to `max` messages (`MaxNumberOfMessages`, 1 to 10: ReceiveMessage
    /// API reference), no long polling. A yield point named `recv`; the trace shows each
    /// message's label and receive count, or `empty`. The history records every message the
    /// call returned, so a crash before they are deleted strands them all until their
    /// visibility expires. Errors: `max` outside 1..=10, or SQS's error.
    pub async fn receive_many(&mut self, queue: &str, max: u32) -> Result<Vec<Delivery>, CallError> {
        if !(1..=10).contains(&max) {
            return Err(CallError::Service(format!("ReceiveMessage: MaxNumberOfMessages must be 1 to 10, got {max}")));
        }
        let (queue, prefix) = (self.queues.name(queue), self.queues.prefix(queue));
        self.gate("recv").await?;
        self.count(0, 1, 0);
        let r = on_io(
            self.sqs
                .receive_message()
                .queue_url(self.queues.url(queue))
                .max_number_of_messages(max as i32)
                .wait_time_seconds(0)
                .visibility_timeout(REAL_VISIBILITY_S)
                .message_system_attribute_names(MessageSystemAttributeName::ApproximateReceiveCount)
                .send(),
        )
        .await;
        let messages = match r {
            Ok(out) => out.messages.unwrap_or_default(),
            Err(e) => {
                let e = CallError::Service(format!("ReceiveMessage: {}", aws_err(&e)));
                self.complete("recv", Service::Sqs, Outcome::Error { message: e.to_string() }, vec![]);
                self.set_idle(false);
                return Err(e);
            }
        };
        let got = messages
            .into_iter()
            .map(|m| model::Got {
                id: m.message_id.unwrap_or_default(),
                receive_count: m
                    .attributes
                    .as_ref()
                    .and_then(|a| a.get(&MessageSystemAttributeName::ApproximateReceiveCount))
                    .and_then(|v| v.parse().ok()),
                receipt: m.receipt_handle.unwrap_or_default(),
                body: m.body.unwrap_or_default(),
            })
            .collect();
        let model::Received { delivered, lost, outcome, facts } = model::receive(&mut self.world.borrow_mut(), queue, prefix, got, None);
        // A lost receive: SQS counted it and the messages are in flight, the consumer gets nothing.
        let out: Vec<Delivery> = match lost {
            true => Vec::new(),
            false => delivered
                .into_iter()
                .map(|d| Delivery { queue, msg: d.msg, body: d.body, receipt: d.receipt, receive_count: d.receive_count })
                .collect(),
        };
        self.complete("recv", Service::Sqs, outcome, facts);
        self.set_idle(out.is_empty());
        Ok(out)
    }

    /// SendMessage of `body` (JSON) whose message identity is `identity`. A yield point named
    /// `op`; returns the message's trace label. To a FIFO queue it is
    /// [`Cx::send_in_group`] with the identity as the message group.
    pub async fn send(
        &mut self,
        op: &'static str,
        queue: &str,
        body: &impl serde::Serialize,
        identity: Uuid,
    ) -> Result<String, CallError> {
        self.send_in_group(op, queue, body, identity, None).await
    }

    /// [`Cx::send`] in message group `group` (`MessageGroupId`, e.g. an aggregate id: SQS
    /// delivers a group's messages in order, one in flight at a time) when `queue` is FIFO; a
    /// standard queue ignores `group`. The `MessageDeduplicationId` comes from the identity
    /// (`crate::sim::fifo`): inside the 5-minute window (logical) SQS accepts the send and
    /// drops it, the trace says so, and the label returned is the accepted message's.
    /// Errors: SendMessage failing ([`CallError::Service`] with SQS's code and message).
    pub async fn send_in_group(
        &mut self,
        op: &'static str,
        queue: &str,
        body: &impl serde::Serialize,
        identity: Uuid,
        group: Option<&str>,
    ) -> Result<String, CallError> {
        self.gate(op).await?;
        self.count(0, 1, 0);
        let body = serde_json::to_string(body).map_err(|e| CallError::Service(e.to_string()))?;
        let (queue, prefix) = (self.queues.name(queue), self.queues.prefix(queue));
        let fifo = {
            let w = self.world.borrow();
            self.queues.is_fifo(queue).then(|| w.fifo.prepare(queue, identity, group, w.now_ms))
        };
        let mut req = self.sqs.send_message().queue_url(self.queues.url(queue)).message_body(body);
        if let Some(f) = &fifo {
            req = req.message_group_id(&f.group).message_deduplication_id(&f.dedup);
        }
        match on_io(req.send()).await {
            Ok(out) => {
                let id = out.message_id.unwrap_or_default();
                let sent = model::sent(&mut self.world.borrow_mut(), queue, prefix, &id, fifo.is_some(), fifo.as_ref(), identity);
                if let (None, Some(first)) = (sent.suppressed_since, fifo.as_ref().and_then(|f| f.inside.as_ref())) {
                    self.note(format!("SQS accepted {} as a new message, though {} had its deduplication id less than 5 min before", sent.msg, first.msg));
                }
                self.complete(op, Service::Sqs, sent.outcome(), vec![sent.fact]);
                Ok(sent.msg)
            }
            Err(e) => {
                let e = format!("SendMessage: {}", aws_err(&e));
                self.complete(op, Service::Sqs, Outcome::Error { message: e.to_string() }, vec![]);
                Err(CallError::Service(e))
            }
        }
    }

    /// DeleteMessage with the delivery's receipt handle. A yield point named `delete`.
    ///
    /// With a stale handle (the message was received again since), AWS may return OK without
    /// deleting (DeleteMessage API reference). Under `sqs:stale-delete-noop` that is what
    /// happens, and no call is made; otherwise the endpoint decides (LocalStack deletes), and
    /// the step records that its outcome depends on the `stale-receipt-handle` behaviour. A
    /// handle of a message that a redelivery replaced (`sqs:redeliver-after-delete`) deletes
    /// nothing: the call is made, and the copy stays.
    pub async fn delete(&mut self, d: &Delivery) -> Result<(), CallError> {
        self.gate("delete").await?;
        let plan = model::plan_delete(&self.world.borrow(), &d.msg, &d.receipt);
        let r = match plan.noop {
            true => Ok(()),
            false => {
                self.count(0, 1, 0);
                let call = self.sqs.delete_message().queue_url(self.queues.url(d.queue)).receipt_handle(&d.receipt).send();
                on_io(call).await.map(|_| ())
            }
        };
        match r {
            Ok(()) => {
                let (outcome, facts) = model::deleted(&mut self.world.borrow_mut(), d.queue, &d.msg, plan);
                self.complete("delete", Service::Sqs, outcome, facts);
                Ok(())
            }
            Err(e) => {
                let e = format!("DeleteMessage: {}", aws_err(&e));
                self.complete("delete", Service::Sqs, Outcome::Error { message: e.to_string() }, vec![]);
                Err(CallError::Service(e))
            }
        }
    }

    /// DeleteMessageBatch of `entries` (each a batch entry id and the delivery to delete; at
    /// most 10, all of one queue). A yield point named `delete_batch`. Returns the entries that
    /// failed while the call returned HTTP 200, each with its delivery and SQS's code: the
    /// caller must check them ("check for batch errors even when the call returns an HTTP
    /// status code of 200", DeleteMessageBatch API reference).
    ///
    /// Entry ids must be distinct within the call; duplicates make SQS reject the whole batch
    /// (`BatchEntryIdsNotDistinct`), returned as an error with nothing deleted. Under
    /// `sqs:stale-delete-noop` an entry with a stale receipt handle succeeds and deletes nothing
    /// (it is not sent); under `sqs:batch-delete-partial` the last entry sent is not sent and
    /// fails with `InternalError`. Errors: no entries, more than 10, several queues, or SQS's.
    pub async fn delete_batch(&mut self, entries: &[(String, &Delivery)]) -> Result<Vec<FailedEntry>, CallError> {
        let queue = match entries {
            [] => return Err(CallError::Service("DeleteMessageBatch: no entries".into())),
            [(_, first), ..] if entries.len() <= 10 && entries.iter().all(|(_, d)| d.queue == first.queue) => first.queue,
            _ => return Err(CallError::Service("DeleteMessageBatch: 1 to 10 entries of one queue".into())),
        };
        self.gate("delete_batch").await?;
        // SQS checks the request as a whole: entry ids that repeat or are malformed get the
        // batch rejected whatever the entries hold, so such a request goes as it is, with no
        // fault applied to its entries.
        let rejected = model::batch_ids_refused(entries.iter().map(|(id, _)| id.as_str()));
        let keyed: Vec<(String, String)> = entries.iter().map(|(_, d)| (d.msg.clone(), d.receipt.clone())).collect();
        let keys: Vec<(&str, &str)> = keyed.iter().map(|(m, r)| (m.as_str(), r.as_str())).collect();
        let plan = self.world.borrow_mut().sqs.plan_batch_delete(&keys, rejected);
        let (mut ok, mut refused) = (Vec::new(), Vec::new());
        if !plan.send.is_empty() {
            self.count(0, 1, 0);
            let request = plan.send.iter().map(|i| {
                aws_sdk_sqs::types::DeleteMessageBatchRequestEntry::builder().id(&entries[*i].0).receipt_handle(&entries[*i].1.receipt).build()
            });
            let request: Result<Vec<_>, _> = request.collect();
            let r = match request {
                Ok(request) => {
                    on_io(self.sqs.delete_message_batch().queue_url(self.queues.url(queue)).set_entries(Some(request)).send()).await.map_err(|e| aws_err(&e))
                }
                Err(e) => Err(e.to_string()),
            };
            let out = match r {
                Ok(out) => out,
                Err(e) => {
                    let e = format!("DeleteMessageBatch: {e}");
                    self.complete("delete_batch", Service::Sqs, Outcome::Error { message: e.clone() }, vec![]);
                    return Err(CallError::Service(e));
                }
            };
            let index = |id: &str| plan.send.iter().copied().find(|i| entries[*i].0 == id);
            ok.extend(out.successful.iter().filter_map(|e| index(&e.id)));
            refused.extend(out.failed.iter().filter_map(|f| Some((index(&f.id)?, f.code.clone()))));
        }
        let done = model::batch_deleted(&mut self.world.borrow_mut(), queue, &keyed, &plan, ok, refused);
        let failed = done.failed.iter().map(|(i, code)| FailedEntry { delivery: entries[*i].1.clone(), code: code.clone() }).collect();
        let service = if plan.send.is_empty() { Service::None } else { Service::Sqs };
        self.complete("delete_batch", service, done.outcome, done.facts);
        Ok(failed)
    }

    /// ChangeMessageVisibility: the message becomes visible again `secs` logical seconds from
    /// now (the real timeout stays long; the logical clock expires it). With `secs` 0 the real
    /// timeout is 0 too: the message is visible at once (a consumer handing back a message it
    /// will not process, SQS Developer Guide "Amazon SQS visibility timeout"). A yield point
    /// named `op`.
    pub async fn change_visibility(&mut self, op: &'static str, d: &Delivery, secs: u64) -> Result<(), CallError> {
        self.gate(op).await?;
        self.count(0, 1, 0);
        let r = on_io(
            self.sqs
                .change_message_visibility()
                .queue_url(self.queues.url(d.queue))
                .receipt_handle(&d.receipt)
                .visibility_timeout(if secs == 0 { 0 } else { REAL_VISIBILITY_S })
                .send(),
        )
        .await;
        match r {
            Ok(_) => {
                let (outcome, facts) = model::hidden(d.queue, &d.msg, secs);
                self.complete(op, Service::Sqs, outcome, facts);
                Ok(())
            }
            Err(e) => {
                let e = format!("ChangeMessageVisibility: {}", aws_err(&e));
                self.complete(op, Service::Sqs, Outcome::Error { message: e.to_string() }, vec![]);
                Err(CallError::Service(e))
            }
        }
    }
}

/// An SQS error for the trace: `<code>: <message>` of a service error (no request id, date or
/// raw response, and receipt handles replaced, so that traces stay the same from run to run),
/// else the error and its causes.
fn aws_err<E, R>(e: &aws_sdk_sqs::error::SdkError<E, R>) -> String
where
    E: std::error::Error + aws_sdk_sqs::error::ProvideErrorMetadata + 'static,
    R: std::fmt::Debug,
{
    use aws_sdk_sqs::error::{DisplayErrorContext, ProvideErrorMetadata};
    match (e.as_service_error(), e.code()) {
        (Some(_), Some(code)) => match e.message() {
            Some(m) => format!("{code}: {}", redact_handles(m)),
            None => code.to_string(),
        },
        _ => DisplayErrorContext(e).to_string(),
    }
}

/// `m` with every word that looks like a receipt handle (40 or more base64 characters; a
/// handle encodes the queue URL, the message id and a timestamp, so it differs from run to
/// run) replaced by `<receipt handle>`. LocalStack quotes the handle in, for example,
/// `InvalidParameterValue: Value <handle> for parameter ReceiptHandle is invalid.`
pub(crate) fn redact_handles(m: &str) -> String {
    let base64 = |c: char| c.is_ascii_alphanumeric() || "+/=_-".contains(c);
    let (mut out, mut word) = (String::with_capacity(m.len()), String::new());
    for c in m.chars().chain(std::iter::once('\0')) {
        if base64(c) {
            word.push(c);
            continue;
        }
        out.push_str(if word.len() >= 40 { "<receipt handle>" } else { &word });
        word.clear();
        if c != '\0' {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod redact_tests {
    #[test]
    fn receipt_handles_in_error_messages_are_replaced() {
        let m = "Value ZTU4ZGY0MjMtYjQ1Zi00ZmQ1LWE2YjItNjQ1ZDEwNjg4ZTM0IGFybjphd3M6c3Fz for parameter ReceiptHandle is invalid.";
        assert_eq!(super::redact_handles(m), "Value <receipt handle> for parameter ReceiptHandle is invalid.");
        assert_eq!(super::redact_handles("The specified queue does not exist."), "The specified queue does not exist.");
        let quoted = "Value \"ZTU4ZGY0MjMtYjQ1Zi00ZmQ1LWE2YjItNjQ1ZDEwNjg4ZTM0IGFybjphd3M6c3Fz\".";
        assert_eq!(super::redact_handles(quoted), "Value \"<receipt handle>\".");
    }
}
