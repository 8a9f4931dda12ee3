//! The SQS gating proxy: HTTP/1 between an external worker's SDK and LocalStack.
//!
//! Both wire forms are accepted: JSON (`X-Amz-Target: AmazonSQS.<Op>`, current boto3, JS v3,
//! Go v2, Rust) and query (`Action=<Op>` in a form body: async-aws, which Symfony uses). Signed
//! requests are forwarded unaltered, Host included, so the queue URLs LocalStack returns point
//! at the proxy. ReceiveMessage, SendMessage, DeleteMessage and ChangeMessageVisibility are
//! gated; the rest (GetQueueUrl, GetQueueAttributes, …) passes.
//!
//! A ReceiveMessage that sets `VisibilityTimeout=n` is forwarded with the harness's real hour
//! instead, and the logical clock hides its messages for `n` logical seconds.
//!
//! Three calls are answered by the harness instead of forwarded, so that only the logical
//! clock decides visibility (AWS SQS developer guide, "Visibility timeout"):
//! - a ReceiveMessage on a queue with no visible message gets an empty reply at once (a long
//!   poll must not cost real seconds);
//! - a ChangeMessageVisibility to `n > 0` s keeps the message hidden for the real hour the
//!   harness uses, and the logical clock makes it visible after `n` logical seconds;
//! - the AWS-only faults: `sqs:stale-delete-noop` answers a stale DeleteMessage with success,
//!   `sqs:receive-lost` drops a received message on its way to the worker.

use std::rc::Rc;

use anyhow::{anyhow, Result};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};

use super::worker::WireWorker;

mod batch;
mod protocol;

use batch::*;
use protocol::*;
use crate::namespace::queues::REAL_VISIBILITY_S;
use crate::record::history::{Outcome, Service};
use crate::sim::model::sqs as model;

/// What every request handler of one worker's proxy shares.
pub struct SqsProxy {
    /// The worker's gate.
    pub worker: Rc<WireWorker>,
    /// LocalStack's `host:port`.
    pub upstream: String,
    /// The harness's own client (empty-queue checks, ChangeMessageVisibility).
    pub sqs: aws_sdk_sqs::Client,
    /// The invocation id of the last gated call (an SDK retry repeats it).
    last_invocation: std::cell::RefCell<Option<String>>,
}

impl SqsProxy {
    /// A proxy for `worker` in front of LocalStack at `upstream` (`host:port`).
    pub fn new(worker: Rc<WireWorker>, upstream: String, sqs: aws_sdk_sqs::Client) -> SqsProxy {
        SqsProxy {
            worker,
            upstream,
            sqs,
            last_invocation: Default::default(),
        }
    }
}

/// Serves HTTP/1 on `listener` until dropped; one `spawn_local` task per connection.
pub async fn serve(listener: TcpListener, proxy: Rc<SqsProxy>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let proxy = proxy.clone();
        let stream = super::worker::Touching::new(stream, proxy.worker.clone());
        tokio::task::spawn_local(async move {
            let worker = proxy.worker.clone();
            let svc = hyper::service::service_fn(move |req| {
                let proxy = proxy.clone();
                async move {
                    proxy.worker.touch();
                    let reply = handle(&proxy, req).await;
                    proxy.worker.touch();
                    Ok::<_, std::convert::Infallible>(reply)
                }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), svc)
                .await;
            worker.task_ended();
        });
    }
}

/// The trace label of a gated operation, or `None` for one that passes ungated.
fn label(op: &str) -> Option<&'static str> {
    Some(match op {
        "ReceiveMessage" => "recv",
        "SendMessage" => "send",
        "DeleteMessage" => "delete",
        "ChangeMessageVisibility" => "change_visibility",
        "DeleteMessageBatch" => "delete_batch",
        "SendMessageBatch" => "send_batch",
        "ChangeMessageVisibilityBatch" => "change_visibility_batch",
        "PurgeQueue" => "batch",
        _ => return None,
    })
}

async fn handle(p: &SqsProxy, req: Request<Incoming>) -> Response<Full<Bytes>> {
    let (parts, body) = req.into_parts();
    p.worker.world.borrow_mut().mailbox(&p.worker.me).sqs_requests += 1;
    if let Some(agent) = parts
        .headers
        .get("user-agent")
        .and_then(|v| v.to_str().ok())
    {
        let first = agent.split_whitespace().next().unwrap_or(agent);
        p.worker.saw_client(format!("SQS user agent {first}"));
    }
    // Bytes of the request still coming in, or a call that passes: the process is moving.
    let _reading = p.worker.pending_guard();
    let body = match body.collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => {
            return reply(
                StatusCode::BAD_REQUEST,
                "text/plain",
                format!("crashpoint: reading the request: {e}"),
                None,
            )
        }
    };
    let Some(call) = Call::parse(&parts.headers, &body) else {
        return forward_or_502(p, &parts, body).await;
    };
    let Some(op) = label(&call.op) else {
        tracing::debug!(worker = %p.worker.me, op = %call.op, "sqs proxy: passes ungated");
        return forward_or_502(p, &parts, body).await;
    };
    drop(_reading);
    let kind = op;
    let op = p.worker.ext.label_of(&call.op, false).unwrap_or(op);
    if kind == "batch" {
        p.worker.fatal(format!(
            "{}: {} through the proxy is not modelled yet; use the single-message operations",
            p.worker.me, call.op
        ));
        return call.error_reply("crashpoint does not gate batch operations yet");
    }
    for h in ["amz-sdk-request", "aws-sdk-retry"] {
        if let Some(v) = parts.headers.get(h).and_then(|v| v.to_str().ok()) {
            super::saw_retry_header(&p.worker.ext.command.join(" "), format!("{h}: {v}"));
        }
    }
    let invocation = ["amz-sdk-invocation-id", "aws-sdk-invocation-id"]
        .iter()
        .find_map(|h| {
            parts
                .headers
                .get(*h)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        });
    let queue = call
        .param("QueueUrl")
        .and_then(|u| p.worker.queue_of_url(&u));
    if invocation.is_some() && *p.last_invocation.borrow() == invocation {
        // An SDK retry continues the call the scheduler granted: not a new decision, but its
        // outcome is recorded like any call's.
        p.worker.note(format!(
            "SDK retry of {} (same invocation id): the same call, not a new decision",
            call.op
        ));
        p.worker.ungated(op, Service::Sqs);
    } else {
        let cycle_start = kind == "recv" && queue.is_some() && queue == p.worker.queue;
        let about = p.worker.ext.concurrent.then(|| call_about(p, &call)).flatten();
        let held = super::worker::Held {
            op,
            service: Service::Sqs,
            cycle_start,
            key: call_key(p, &call, queue),
            pid: None,
            about,
            tie: 0,
        };
        if let super::worker::Granted::Fail(cp) = p.worker.hold(held).await {
            p.worker.complete(Service::Sqs, Outcome::Done, vec![]);
            return call.error_reply(&super::worker::injected_error(op, cp));
        }
        *p.last_invocation.borrow_mut() = invocation;
    }
    let Some(queue) = queue else {
        p.worker.complete(
            Service::Sqs,
            Outcome::Error {
                message: "unknown queue".into(),
            },
            vec![],
        );
        return call.error_reply("crashpoint: the QueueUrl names none of the schedule's queues");
    };
    match kind {
        "recv" => receive(p, &call, queue, &parts, body).await,
        "send" => send(p, &call, queue, &parts, body).await,
        "delete" => delete(p, &call, &parts, body).await,
        "delete_batch" => delete_batch(p, &call, queue, &parts, body).await,
        "send_batch" => send_batch(p, &call, queue, &parts, body).await,
        "change_visibility_batch" => change_visibility_batch(p, &call, queue, &parts, body).await,
        _ => change_visibility(p, &call, queue, &parts, body).await,
    }
}

/// What an SQS call of a concurrent worker is about, for the trace: the messages it names
/// (`m2`, or `m1,m3` for a batch), by label.
fn call_about(p: &SqsProxy, call: &Call) -> Option<String> {
    let of = |r: &str| p.worker.message_of(r).map(|(_, m)| m);
    if let Some(r) = call.param("ReceiptHandle") {
        return of(&r);
    }
    let Some((prefix, "ReceiptHandle")) = call.batch_field() else { return None };
    let msgs: Vec<String> = call.entries(prefix, "ReceiptHandle").iter().filter_map(|(_, r)| of(r)).collect();
    (!msgs.is_empty()).then(|| msgs.join(","))
}

/// What tells an SQS call apart from a concurrent worker's other held calls: the operation,
/// the queue, and the messages it names (by label: receipt handles differ from run to run), or
/// the bodies it sends, and a visibility it sets.
fn call_key(p: &SqsProxy, call: &Call, queue: Option<&'static str>) -> String {
    let of = |r: &str| {
        p.worker
            .message_of(r)
            .map(|(_, m)| m)
            .unwrap_or_else(|| "?".into())
    };
    let mut key = vec![call.op.clone(), queue.unwrap_or("?").to_string()];
    key.extend(call.param("ReceiptHandle").map(|r| of(&r)));
    key.extend(call.param("MessageBody"));
    key.extend(call.param("VisibilityTimeout"));
    if let Some((prefix, field)) = call.batch_field() {
        let entries = call.entries(prefix, field).into_iter();
        key.extend(entries.map(|(_, v)| if field == "ReceiptHandle" { of(&v) } else { v }));
    }
    key.join(" ")
}

async fn forward_or_502(
    p: &SqsProxy,
    parts: &hyper::http::request::Parts,
    body: Bytes,
) -> Response<Full<Bytes>> {
    let _pending = p.worker.pending_guard();
    match forward(&p.upstream, parts, body).await {
        Ok((status, headers, body)) => passthrough(status, headers, body),
        Err(e) => reply(
            StatusCode::BAD_GATEWAY,
            "text/plain",
            format!("crashpoint: LocalStack: {e:#}"),
            None,
        ),
    }
}

/// Sends the request unaltered to LocalStack on a fresh connection and returns its reply.
async fn forward(
    upstream: &str,
    parts: &hyper::http::request::Parts,
    body: Bytes,
) -> Result<(StatusCode, hyper::HeaderMap, Bytes)> {
    let stream = TcpStream::connect(upstream).await?;
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake::<_, Full<Bytes>>(TokioIo::new(stream)).await?;
    tokio::task::spawn_local(async move {
        let _ = conn.await;
    });
    let mut req = Request::builder()
        .method(parts.method.clone())
        .uri(parts.uri.clone());
    // The length is the body's own: the proxy may have rewritten it (a receive's visibility).
    for (k, v) in parts
        .headers
        .iter()
        .filter(|(k, _)| *k != hyper::header::CONTENT_LENGTH)
    {
        req = req.header(k, v);
    }
    let resp = sender.send_request(req.body(Full::new(body))?).await?;
    let (rparts, rbody) = resp.into_parts();
    let bytes = rbody
        .collect()
        .await
        .map_err(|e| anyhow!("reading LocalStack's reply: {e}"))?
        .to_bytes();
    Ok((rparts.status, rparts.headers, bytes))
}

/// Forwards a granted call. A transport failure or an error status completes the call as an
/// error and gives the reply to return to the worker as `Err`.
async fn forward_call(
    p: &SqsProxy,
    parts: &hyper::http::request::Parts,
    body: Bytes,
) -> std::result::Result<(StatusCode, hyper::HeaderMap, Bytes), Response<Full<Bytes>>> {
    match forward(&p.upstream, parts, body).await {
        Err(e) => {
            p.worker.complete(
                Service::Sqs,
                Outcome::Error {
                    message: format!("{e:#}"),
                },
                vec![],
            );
            Err(reply(
                StatusCode::BAD_GATEWAY,
                "text/plain",
                format!("crashpoint: {e:#}"),
                None,
            ))
        }
        Ok((status, headers, rbody)) if !status.is_success() => {
            // The error code only: bodies carry request ids and receipt handles (not deterministic).
            let code = error_code(&rbody).unwrap_or_default();
            p.worker.complete(
                Service::Sqs,
                Outcome::Error {
                    message: format!("HTTP {} {code}", status.as_u16()),
                },
                vec![],
            );
            Err(passthrough(status, headers, rbody))
        }
        Ok(r) => Ok(r),
    }
}

async fn visible(p: &SqsProxy, queue: &'static str) -> Result<u64> {
    use aws_sdk_sqs::types::QueueAttributeName as A;
    let out = p
        .sqs
        .get_queue_attributes()
        .queue_url(p.worker.queues.url(queue))
        .attribute_names(A::ApproximateNumberOfMessages)
        .send()
        .await
        .map_err(|e| {
            anyhow!(
                "GetQueueAttributes: {}",
                aws_sdk_sqs::error::DisplayErrorContext(&e)
            )
        })?;
    Ok(out
        .attributes
        .and_then(|a| {
            a.get(&A::ApproximateNumberOfMessages)
                .and_then(|n| n.parse().ok())
        })
        .unwrap_or(0))
}

async fn receive(
    p: &SqsProxy,
    call: &Call,
    queue: &'static str,
    parts: &hyper::http::request::Parts,
    body: Bytes,
) -> Response<Full<Bytes>> {
    let empty = || call.ok_reply("<ReceiveMessageResult/>");
    if visible(p, queue).await.unwrap_or(1) == 0 {
        p.worker.complete(Service::Sqs, Outcome::Empty, vec![]);
        p.worker.set_idle(true);
        return empty();
    }
    // A visibility timeout the receive sets runs on the logical clock, as a
    // ChangeMessageVisibility to it right after the receive would: SQS keeps the messages
    // hidden for the harness's real hour ("Visibility timeout", AWS SQS developer guide).
    let visibility: Option<u64> = call
        .param("VisibilityTimeout")
        .and_then(|v| v.trim_matches('"').parse().ok());
    let body = match visibility {
        Some(_) => call.with_param("VisibilityTimeout", &REAL_VISIBILITY_S.to_string()),
        None => body,
    };
    let (status, headers, rbody) = match forward_call(p, parts, body).await {
        Ok(r) => r,
        Err(resp) => return resp,
    };
    let got = parse_received(call.proto, &rbody);
    let prefix = p.worker.queues.prefix(queue);
    let model::Received {
        delivered,
        lost,
        outcome,
        facts,
    } = model::receive(&mut p.worker.world.borrow_mut(), queue, prefix, got, visibility);
    for d in &delivered {
        p.worker.remember_receipt(&d.receipt, queue, &d.msg);
    }
    p.worker.complete(Service::Sqs, outcome, facts);
    p.worker.set_idle(delivered.is_empty() || lost);
    if lost {
        // The response is lost on its way: the worker gets an empty one.
        return empty();
    }
    passthrough(status, headers, rbody)
}

fn passthrough(
    status: StatusCode,
    headers: hyper::HeaderMap,
    body: Bytes,
) -> Response<Full<Bytes>> {
    let mut r = Response::builder().status(status);
    for (k, v) in headers.iter() {
        if k != "transfer-encoding" && k != "content-length" && k != "connection" {
            r = r.header(k, v);
        }
    }
    r.body(Full::new(body)).expect("a valid response")
}

async fn send(
    p: &SqsProxy,
    call: &Call,
    queue: &'static str,
    parts: &hyper::http::request::Parts,
    body: Bytes,
) -> Response<Full<Bytes>> {
    let identity = call
        .param("MessageBody")
        .and_then(|b| serde_json::from_str::<serde_json::Value>(&b).ok())
        .and_then(|v| (*p.worker.identity)(&v))
        .map(|(_, id)| id);
    let (status, headers, rbody) = match forward_call(p, parts, body).await {
        Ok(r) => r,
        Err(resp) => return resp,
    };
    let id = match call.proto {
        Proto::Json => serde_json::from_slice::<serde_json::Value>(&rbody)
            .map(|v| str_of(&v, "MessageId"))
            .unwrap_or_default(),
        Proto::Query => xml_tag(&String::from_utf8_lossy(&rbody), "MessageId").unwrap_or_default(),
    };
    let identity = identity.unwrap_or_default();
    // The worker's own MessageDeduplicationId, if any, passes through: on a FIFO queue SQS's
    // answer with an accepted message's id says it dropped the send (in LocalStack's real time).
    let fifo = p.worker.queues.is_fifo(queue);
    let prefix = p.worker.queues.prefix(queue);
    let sent = model::sent(&mut p.worker.world.borrow_mut(), queue, prefix, &id, fifo, None, identity);
    p.worker.complete(Service::Sqs, sent.outcome(), vec![sent.fact]);
    passthrough(status, headers, rbody)
}

async fn delete(
    p: &SqsProxy,
    call: &Call,
    parts: &hyper::http::request::Parts,
    body: Bytes,
) -> Response<Full<Bytes>> {
    let receipt = call.param("ReceiptHandle").unwrap_or_default();
    let Some((queue, msg)) = p.worker.message_of(&receipt) else {
        p.worker.complete(
            Service::Sqs,
            Outcome::Error {
                message: "a receipt handle this worker never received".into(),
            },
            vec![],
        );
        return forward_or_502(p, parts, body).await;
    };
    let plan = model::plan_delete(&p.worker.world.borrow(), &msg, &receipt);
    let answer = match plan.noop {
        true => None,
        false => match forward_call(p, parts, body).await {
            Ok(r) => Some(r),
            Err(resp) => return resp,
        },
    };
    let (outcome, facts) = model::deleted(&mut p.worker.world.borrow_mut(), queue, &msg, plan);
    p.worker.complete(Service::Sqs, outcome, facts);
    match answer {
        Some((status, headers, rbody)) => passthrough(status, headers, rbody),
        None => call.ok_reply(""),
    }
}

/// Completes a ChangeMessageVisibility that set `msg`'s visibility to `secs` (logical).
fn hidden(p: &SqsProxy, queue: &'static str, msg: String, secs: u64) {
    let (outcome, facts) = model::hidden(queue, &msg, secs);
    p.worker.complete(Service::Sqs, outcome, facts);
}


async fn change_visibility(
    p: &SqsProxy,
    call: &Call,
    queue: &'static str,
    parts: &hyper::http::request::Parts,
    body: Bytes,
) -> Response<Full<Bytes>> {
    let receipt = call.param("ReceiptHandle").unwrap_or_default();
    let secs: u64 = call
        .param("VisibilityTimeout")
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let msg = p
        .worker
        .message_of(&receipt)
        .map(|(_, m)| m)
        .unwrap_or_default();
    if secs == 0 {
        let (status, headers, rbody) = match forward_call(p, parts, body).await {
            Ok(r) => r,
            Err(resp) => return resp,
        };
        hidden(p, queue, msg, secs);
        return passthrough(status, headers, rbody);
    }
    // Hidden for the real hour; the logical clock makes it visible after `secs`.
    let r = p
        .sqs
        .change_message_visibility()
        .queue_url(p.worker.queues.url(queue))
        .receipt_handle(&receipt)
        .visibility_timeout(REAL_VISIBILITY_S)
        .send()
        .await;
    match r {
        Ok(_) => {
            hidden(p, queue, msg, secs);
            call.ok_reply("")
        }
        Err(e) => {
            // SQS's code and message only: the whole error carries headers (a date) and ids.
            use aws_sdk_sqs::error::ProvideErrorMetadata;
            let what = match (e.code(), e.message()) {
                (Some(code), Some(message)) => format!("{code}: {message}"),
                _ => format!("{}", aws_sdk_sqs::error::DisplayErrorContext(&e)),
            };
            let e = crate::sim::cx::sqs::redact_handles(&format!("ChangeMessageVisibility: {what}"));
            p.worker
                .complete(Service::Sqs, Outcome::Error { message: e.clone() }, vec![]);
            call.error_reply(&e)
        }
    }
}
