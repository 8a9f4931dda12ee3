//! The SQS batch calls at the proxy: DeleteMessageBatch, SendMessageBatch and
//! ChangeMessageVisibilityBatch, each entry's fate decided as its single call's would be.

use bytes::Bytes;
use http_body_util::Full;
use hyper::Response;

use super::protocol::*;
use super::*;

/// (entry id, a field of the entry), one per entry of a batch reply.
pub(super) type EntryFields = Vec<(String, String)>;

/// DeleteMessageBatch, as the in-process [`crate::sim::cx::Cx::delete_batch`] makes it: the
/// entries are planned under the armed faults ([`crate::nemesis::sqs::SqsNemesis::plan_batch_delete`]),
/// those to send are deleted by the harness's own client, and the worker gets SQS's answer in
/// its wire form, with an injected `InternalError` entry under `sqs:batch-delete-partial`
/// (HTTP 200 all the same: "check for batch errors even when the call returns an HTTP status
/// code of 200", DeleteMessageBatch API reference). Each entry's fate is a fact: `Deleted` or
/// `DeleteFailed`. A request SQS refuses as a whole (no entries, more than 10, repeated or
/// malformed ids) is forwarded as it is and its error returned.
pub(super) async fn delete_batch(
    p: &SqsProxy,
    call: &Call,
    queue: &'static str,
    parts: &hyper::http::request::Parts,
    body: Bytes,
) -> Response<Full<Bytes>> {
    let entries = call.entries("DeleteMessageBatchRequestEntry", "ReceiptHandle");
    if !(1..=10).contains(&entries.len()) || model::batch_ids_refused(entries.iter().map(|(id, _)| id.as_str())) {
        return refused_as_a_whole(p, parts, body).await;
    }
    // Each entry's message, as this worker received it (a handle it never received keeps its id).
    let msgs: Vec<String> = entries
        .iter()
        .map(|(id, r)| {
            p.worker
                .message_of(r)
                .map(|(_, m)| m)
                .unwrap_or_else(|| format!("?{id}"))
        })
        .collect();
    let keyed: Vec<(String, String)> = msgs.iter().cloned().zip(entries.iter().map(|(_, r)| r.clone())).collect();
    let keys: Vec<(&str, &str)> = keyed.iter().map(|(m, r)| (m.as_str(), r.as_str())).collect();
    let plan = p.worker.world.borrow_mut().sqs.plan_batch_delete(&keys, false);
    let (mut ok, mut refused) = (Vec::new(), Vec::new());
    if !plan.send.is_empty() {
        let request = plan.send.iter().map(|i| {
            aws_sdk_sqs::types::DeleteMessageBatchRequestEntry::builder()
                .id(&entries[*i].0)
                .receipt_handle(&entries[*i].1)
                .build()
        });
        let sent = own_batch(p, call, "DeleteMessageBatch", request.collect(), |r| {
            p.sqs
                .delete_message_batch()
                .queue_url(p.worker.queues.url(queue))
                .set_entries(Some(r))
                .send()
        });
        let out = match sent.await {
            Ok(out) => out,
            Err(resp) => return resp,
        };
        let index = |id: &str| entries.iter().position(|(i, _)| i == id);
        ok.extend(out.successful.iter().filter_map(|e| index(&e.id)));
        refused.extend(out.failed.iter().filter_map(|f| Some((index(&f.id)?, f.code.clone()))));
    }
    // A handle this worker never received deletes what SQS says, and records nothing.
    let (known, unknown): (Vec<usize>, Vec<usize>) = ok.into_iter().partition(|i| p.worker.message_of(&entries[*i].1).is_some());
    let done = model::batch_deleted(&mut p.worker.world.borrow_mut(), queue, &keyed, &plan, known, refused);
    p.worker.complete(
        if plan.send.is_empty() {
            Service::None
        } else {
            Service::Sqs
        },
        done.outcome,
        done.facts,
    );
    let mut successful = done.successful;
    successful.extend(unknown);
    successful.sort_unstable();
    let ids = |v: &[usize]| v.iter().map(|i| entries[*i].0.clone()).collect::<Vec<_>>();
    let failed_ids: Vec<(String, String)> = done
        .failed
        .iter()
        .map(|(i, code)| (entries[*i].0.clone(), code.clone()))
        .collect();
    call.batch_reply(&ids(&successful), &failed_ids)
}

/// A batch request SQS refuses as a whole (no entries, more than 10, repeated or malformed
/// ids): forwarded as it is, completed as SQS's error, and its reply relayed.
pub(super) async fn refused_as_a_whole(p: &SqsProxy, parts: &hyper::http::request::Parts, body: Bytes) -> Response<Full<Bytes>> {
    let (status, headers, rbody) = match forward_call(p, parts, body).await {
        Ok(r) => r,
        Err(resp) => return resp,
    };
    let message = format!("HTTP {} {}", status.as_u16(), error_code(&rbody).unwrap_or_default());
    p.worker.complete(Service::Sqs, Outcome::Error { message }, vec![]);
    passthrough(status, headers, rbody)
}

/// A batch call the harness's own client makes for a worker's request (`what`, e.g.
/// `DeleteMessageBatch`): `send` with the built entries. Errors: an entry that does not build
/// or SQS's error, the call then completed as an error and the worker's error reply returned.
pub(super) async fn own_batch<R, T, E, Fut>(
    p: &SqsProxy,
    call: &Call,
    what: &str,
    request: Result<Vec<R>, aws_sdk_sqs::error::BuildError>,
    send: impl FnOnce(Vec<R>) -> Fut,
) -> std::result::Result<T, Response<Full<Bytes>>>
where
    Fut: std::future::Future<Output = std::result::Result<T, E>>,
    E: std::error::Error,
{
    let r = match request {
        Ok(request) => send(request).await.map_err(|e| {
            crate::sim::cx::sqs::redact_handles(&format!(
                "{what}: {}",
                aws_sdk_sqs::error::DisplayErrorContext(&e)
            ))
        }),
        Err(e) => Err(format!("{what}: {e}")),
    };
    r.map_err(|e| {
        p.worker
            .complete(Service::Sqs, Outcome::Error { message: e.clone() }, vec![]);
        call.error_reply(&e)
    })
}

/// The entries of a batch reply: (`Id`, `field`) of each `Successful` entry and (`Id`, `Code`)
/// of each `Failed` one, from JSON or from the query protocol's XML (`<op>ResultEntry`,
/// `BatchResultErrorEntry`).
pub(super) fn batch_result(call: &Call, body: &[u8], field: &str) -> (EntryFields, EntryFields) {
    match call.proto {
        Proto::Json => {
            let v: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
            let list = |k: &str, f: &str| -> Vec<(String, String)> {
                v.get(k)
                    .and_then(|a| a.as_array())
                    .into_iter()
                    .flatten()
                    .map(|e| (str_of(e, "Id"), str_of(e, f)))
                    .collect()
            };
            (list("Successful", field), list("Failed", "Code"))
        }
        Proto::Query => {
            let xml = String::from_utf8_lossy(body);
            let list = |tag: &str, f: &str| -> Vec<(String, String)> {
                xml.split(&format!("<{tag}>"))
                    .skip(1)
                    .filter_map(|e| {
                        let e = e.split(&format!("</{tag}>")).next()?;
                        Some((xml_tag(e, "Id")?, xml_tag(e, f).unwrap_or_default()))
                    })
                    .collect()
            };
            (
                list(&format!("{}ResultEntry", call.op), field),
                list("BatchResultErrorEntry", "Code"),
            )
        }
    }
}

/// SendMessageBatch, forwarded as it is: each entry SQS accepted is a message sent (its
/// identity read from its body, as for SendMessage), recorded as a `Sent` fact, or as
/// `Suppressed` when a FIFO queue accepted it as a duplicate; failed entries are named by id.
pub(super) async fn send_batch(
    p: &SqsProxy,
    call: &Call,
    queue: &'static str,
    parts: &hyper::http::request::Parts,
    body: Bytes,
) -> Response<Full<Bytes>> {
    let bodies = call.entries("SendMessageBatchRequestEntry", "MessageBody");
    let (status, headers, rbody) = match forward_call(p, parts, body).await {
        Ok(r) => r,
        Err(resp) => return resp,
    };
    let (ok, failed) = batch_result(call, &rbody, "MessageId");
    let (fifo, prefix) = (p.worker.queues.is_fifo(queue), p.worker.queues.prefix(queue));
    let (mut sent, mut suppressed, mut facts) = (Vec::new(), Vec::new(), Vec::new());
    for (id, message_id) in &ok {
        let identity = bodies
            .iter()
            .find(|(i, _)| i == id)
            .and_then(|(_, b)| serde_json::from_str::<serde_json::Value>(b).ok())
            .and_then(|v| (*p.worker.identity)(&v))
            .map(|(_, u)| u)
            .unwrap_or_default();
        let one = model::sent(&mut p.worker.world.borrow_mut(), queue, prefix, message_id, fifo, None, identity);
        match one.suppressed_since {
            None => sent.push((one.msg, one.who)),
            Some(_) => suppressed.push((one.msg, one.who)),
        }
        facts.push(one.fact);
    }
    p.worker.complete(
        Service::Sqs,
        Outcome::BatchSent {
            sent,
            suppressed,
            failed,
        },
        facts,
    );
    passthrough(status, headers, rbody)
}

/// ChangeMessageVisibilityBatch, made by the harness's own client as ChangeMessageVisibility
/// is: an entry with `n > 0` s is hidden for the real hour and becomes visible after `n`
/// logical seconds, one with 0 is visible at once. Each entry SQS accepted is a
/// `VisibilityChanged` fact; the worker gets the answer in its wire form.
pub(super) async fn change_visibility_batch(
    p: &SqsProxy,
    call: &Call,
    queue: &'static str,
    parts: &hyper::http::request::Parts,
    body: Bytes,
) -> Response<Full<Bytes>> {
    let handles = call.entries("ChangeMessageVisibilityBatchRequestEntry", "ReceiptHandle");
    let secs = call.entries(
        "ChangeMessageVisibilityBatchRequestEntry",
        "VisibilityTimeout",
    );
    if !(1..=10).contains(&handles.len()) {
        return refused_as_a_whole(p, parts, body).await;
    }
    let secs_of = |i: usize| -> u64 { secs.get(i).and_then(|(_, s)| s.parse().ok()).unwrap_or(0) };
    let request = handles.iter().enumerate().map(|(i, (id, receipt))| {
        let real = if secs_of(i) == 0 {
            0
        } else {
            REAL_VISIBILITY_S
        };
        aws_sdk_sqs::types::ChangeMessageVisibilityBatchRequestEntry::builder()
            .id(id)
            .receipt_handle(receipt)
            .visibility_timeout(real)
            .build()
    });
    let sent = own_batch(
        p,
        call,
        "ChangeMessageVisibilityBatch",
        request.collect(),
        |r| {
            p.sqs
                .change_message_visibility_batch()
                .queue_url(p.worker.queues.url(queue))
                .set_entries(Some(r))
                .send()
        },
    );
    let out = match sent.await {
        Ok(out) => out,
        Err(resp) => return resp,
    };
    let index = |id: &str| handles.iter().position(|(i, _)| i == id);
    let msg_of = |i: usize| {
        p.worker
            .message_of(&handles[i].1)
            .map(|(_, m)| m)
            .unwrap_or_else(|| format!("?{}", handles[i].0))
    };
    let mut ok: Vec<usize> = out.successful.iter().filter_map(|e| index(&e.id)).collect();
    ok.sort_unstable();
    let mut bad: Vec<(usize, String)> = out
        .failed
        .iter()
        .filter_map(|f| Some((index(&f.id)?, f.code.clone())))
        .collect();
    bad.sort_unstable();
    let facts = ok.iter().flat_map(|i| model::hidden(queue, &msg_of(*i), secs_of(*i)).1).collect();
    let outcome = Outcome::BatchHidden {
        hidden: ok.iter().map(|i| (msg_of(*i), secs_of(*i))).collect(),
        failed: bad
            .iter()
            .map(|(i, code)| (msg_of(*i), code.clone()))
            .collect(),
    };
    p.worker.complete(Service::Sqs, outcome, facts);
    let ids: Vec<String> = ok.iter().map(|i| handles[*i].0.clone()).collect();
    let failed: Vec<(String, String)> = bad
        .iter()
        .map(|(i, code)| (handles[*i].0.clone(), code.clone()))
        .collect();
    call.batch_reply(&ids, &failed)
}
