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
use crate::sim::cx::REAL_VISIBILITY_S;
use crate::sim::history::{Fact, Outcome, Service};

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

/// The wire form of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Proto {
    Json,
    Query,
}

/// One parsed SQS request.
struct Call {
    proto: Proto,
    op: String,
    json: serde_json::Value,
    form: Vec<(String, String)>,
}

impl Call {
    fn parse(headers: &hyper::HeaderMap, body: &[u8]) -> Option<Call> {
        if let Some(t) = headers.get("x-amz-target").and_then(|v| v.to_str().ok()) {
            let op = t.strip_prefix("AmazonSQS.")?.to_string();
            let json = serde_json::from_slice(body).unwrap_or(serde_json::Value::Null);
            return Some(Call {
                proto: Proto::Json,
                op,
                json,
                form: vec![],
            });
        }
        let form: Vec<(String, String)> = url::form_urlencoded::parse(body).into_owned().collect();
        let op = form.iter().find(|(k, _)| k == "Action")?.1.clone();
        Some(Call {
            proto: Proto::Query,
            op,
            json: serde_json::Value::Null,
            form,
        })
    }

    /// The request body with parameter `key` set to `value` (a number in JSON).
    fn with_param(&self, key: &str, value: &str) -> Bytes {
        match self.proto {
            Proto::Json => {
                let mut v = self.json.clone();
                if let Some(o) = v.as_object_mut() {
                    let n = value
                        .parse::<u64>()
                        .map(serde_json::Value::from)
                        .unwrap_or_else(|_| value.into());
                    o.insert(key.to_string(), n);
                }
                Bytes::from(v.to_string())
            }
            Proto::Query => {
                let mut out = url::form_urlencoded::Serializer::new(String::new());
                for (k, v) in &self.form {
                    out.append_pair(k, if k == key { value } else { v });
                }
                Bytes::from(out.finish())
            }
        }
    }

    fn param(&self, key: &str) -> Option<String> {
        match self.proto {
            Proto::Json => match self.json.get(key)? {
                serde_json::Value::String(s) => Some(s.clone()),
                v => Some(v.to_string()),
            },
            Proto::Query => self
                .form
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.clone()),
        }
    }

    /// For a batch operation, the query protocol's entry prefix and the field that names each
    /// entry's message: its receipt handle, or for SendMessageBatch its body.
    fn batch_field(&self) -> Option<(&'static str, &'static str)> {
        Some(match self.op.as_str() {
            "DeleteMessageBatch" => ("DeleteMessageBatchRequestEntry", "ReceiptHandle"),
            "ChangeMessageVisibilityBatch" => ("ChangeMessageVisibilityBatchRequestEntry", "ReceiptHandle"),
            "SendMessageBatch" => ("SendMessageBatchRequestEntry", "MessageBody"),
            _ => return None,
        })
    }

    /// The entries of a batch request, in request order, as (`Id`, `field`): JSON `Entries`,
    /// or the query protocol's `<prefix>.<n>.Id` and `<prefix>.<n>.<field>`.
    fn entries(&self, prefix: &str, field: &str) -> Vec<(String, String)> {
        match self.proto {
            Proto::Json => self
                .json
                .get("Entries")
                .and_then(|e| e.as_array())
                .into_iter()
                .flatten()
                .map(|e| {
                    // A number (VisibilityTimeout) as its text, as the query protocol has it.
                    let value = match e.get(field) {
                        Some(serde_json::Value::String(s)) => s.clone(),
                        Some(serde_json::Value::Null) | None => String::new(),
                        Some(v) => v.to_string(),
                    };
                    (str_of(e, "Id"), value)
                })
                .collect(),
            Proto::Query => (1..)
                .map_while(|n| {
                    let get = |k: &str| {
                        self.form
                            .iter()
                            .find(|(key, _)| *key == format!("{prefix}.{n}.{k}"))
                            .map(|(_, v)| v.clone())
                    };
                    Some((get("Id")?, get(field).unwrap_or_default()))
                })
                .collect(),
        }
    }

    /// A batch operation's reply: the ids that succeeded, and the failed ones with their
    /// error code (`SenderFault` false), in this request's wire form.
    fn batch_reply(
        &self,
        successful: &[String],
        failed: &[(String, String)],
    ) -> Response<Full<Bytes>> {
        match self.proto {
            Proto::Json => {
                let ok: Vec<serde_json::Value> = successful
                    .iter()
                    .map(|id| serde_json::json!({ "Id": id }))
                    .collect();
                let bad: Vec<serde_json::Value> = failed
                    .iter()
                    .map(|(id, code)| serde_json::json!({ "Id": id, "SenderFault": false, "Code": code, "Message": "crashpoint: entry failed" }))
                    .collect();
                let body = serde_json::json!({ "Successful": ok, "Failed": bad }).to_string();
                reply(StatusCode::OK, "application/x-amz-json-1.0", body, None)
            }
            Proto::Query => {
                let esc = |s: &str| quick_xml::escape::escape(s).into_owned();
                let mut result = String::new();
                for id in successful {
                    result.push_str(&format!(
                        "<{0}ResultEntry><Id>{1}</Id></{0}ResultEntry>",
                        self.op,
                        esc(id)
                    ));
                }
                for (id, code) in failed {
                    result.push_str(&format!(
                        "<BatchResultErrorEntry><Id>{}</Id><SenderFault>false</SenderFault><Code>{}</Code><Message>crashpoint: entry failed</Message></BatchResultErrorEntry>",
                        esc(id),
                        esc(code)
                    ));
                }
                self.ok_reply(&format!("<{0}Result>{result}</{0}Result>", self.op))
            }
        }
    }

    /// A success reply without content, in this request's wire form.
    fn ok_reply(&self, result: &str) -> Response<Full<Bytes>> {
        match self.proto {
            Proto::Json => reply(
                StatusCode::OK,
                "application/x-amz-json-1.0",
                "{}".into(),
                None,
            ),
            Proto::Query => {
                let op = &self.op;
                let body = format!(
                    "<?xml version=\"1.0\"?><{op}Response xmlns=\"http://queue.amazonaws.com/doc/2012-11-05/\">{result}\
                     <ResponseMetadata><RequestId>00000000-0000-0000-0000-000000000000</RequestId></ResponseMetadata></{op}Response>"
                );
                reply(StatusCode::OK, "text/xml", body, None)
            }
        }
    }

    /// A client error the SDKs do not retry (`InvalidParameterValue`, HTTP 400).
    fn error_reply(&self, message: &str) -> Response<Full<Bytes>> {
        match self.proto {
            Proto::Json => {
                let body = serde_json::json!({"__type": "com.amazonaws.sqs#InvalidParameterValue", "message": message}).to_string();
                reply(
                    StatusCode::BAD_REQUEST,
                    "application/x-amz-json-1.0",
                    body,
                    Some("AWS.SimpleQueueService.InvalidParameterValue;Sender"),
                )
            }
            Proto::Query => {
                let body = format!(
                    "<?xml version=\"1.0\"?><ErrorResponse><Error><Type>Sender</Type><Code>InvalidParameterValue</Code>\
                     <Message>{}</Message></Error><RequestId>00000000-0000-0000-0000-000000000000</RequestId></ErrorResponse>",
                    quick_xml::escape::escape(message)
                );
                reply(StatusCode::BAD_REQUEST, "text/xml", body, None)
            }
        }
    }
}

fn reply(
    status: StatusCode,
    content_type: &str,
    body: String,
    query_error: Option<&str>,
) -> Response<Full<Bytes>> {
    let mut b = Response::builder()
        .status(status)
        .header("content-type", content_type);
    if let Some(q) = query_error {
        b = b.header("x-amzn-query-error", q);
    }
    b.body(Full::new(Bytes::from(body)))
        .expect("a valid response")
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

/// A message in a ReceiveMessage reply.
struct Received {
    id: String,
    receipt: String,
    body: String,
    /// `ApproximateReceiveCount`, when the receive asked for it.
    receive_count: Option<u32>,
}

fn parse_received(proto: Proto, body: &[u8]) -> Vec<Received> {
    match proto {
        Proto::Json => {
            let v: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
            v.get("Messages")
                .and_then(|m| m.as_array())
                .map(|ms| {
                    ms.iter()
                        .map(|m| Received {
                            id: str_of(m, "MessageId"),
                            receipt: str_of(m, "ReceiptHandle"),
                            body: str_of(m, "Body"),
                            receive_count: m
                                .get("Attributes")
                                .map(|a| str_of(a, "ApproximateReceiveCount"))
                                .and_then(|c| c.parse().ok()),
                        })
                        .collect()
                })
                .unwrap_or_default()
        }
        Proto::Query => {
            let text = String::from_utf8_lossy(body);
            text.split("<Message>")
                .skip(1)
                .map(|m| {
                    let count = m
                        .split("<Attribute>")
                        .find(|a| a.contains("<Name>ApproximateReceiveCount</Name>"))
                        .and_then(|a| xml_tag(a, "Value"))
                        .and_then(|c| c.parse().ok());
                    Received {
                        id: xml_tag(m, "MessageId").unwrap_or_default(),
                        receipt: xml_tag(m, "ReceiptHandle").unwrap_or_default(),
                        body: xml_tag(m, "Body").unwrap_or_default(),
                        receive_count: count,
                    }
                })
                .collect()
        }
    }
}

/// The error code of an SQS error body: JSON `__type` (after its `#`) or query XML `<Code>`.
fn error_code(body: &[u8]) -> Option<String> {
    if let Ok(v) = serde_json::from_slice::<serde_json::Value>(body) {
        let t = str_of(&v, "__type");
        return Some(t.rsplit('#').next().unwrap_or_default().to_string());
    }
    xml_tag(&String::from_utf8_lossy(body), "Code")
}

fn str_of(v: &serde_json::Value, key: &str) -> String {
    v.get(key)
        .and_then(|s| s.as_str())
        .unwrap_or_default()
        .to_string()
}

/// The unescaped text of the first `<tag>…</tag>` in `xml`.
fn xml_tag(xml: &str, tag: &str) -> Option<String> {
    let start = xml.find(&format!("<{tag}>"))? + tag.len() + 2;
    let end = start + xml[start..].find(&format!("</{tag}>"))?;
    quick_xml::escape::unescape(&xml[start..end])
        .ok()
        .map(|s| s.into_owned())
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
    let msgs = parse_received(call.proto, &rbody);
    let prefix = p.worker.queues.prefix(queue);
    let mut facts = Vec::new();
    let mut outcome = Outcome::Empty;
    let mut lost_all = !msgs.is_empty();
    let mut lost = Vec::new();
    for (i, m) in msgs.iter().enumerate() {
        let msg = p.worker.label(prefix, &m.id);
        let receive_count = p
            .worker
            .world
            .borrow_mut()
            .count_receive(&msg, m.receive_count);
        p.worker.remember_receipt(&m.receipt, queue, &msg);
        let is_lost = p
            .worker
            .world
            .borrow_mut()
            .sqs
            .received(queue, &msg, &m.receipt, &m.body);
        lost_all &= is_lost;
        if is_lost {
            lost.push(m.receipt.clone());
        }
        facts.push(Fact::Received {
            queue,
            msg: msg.clone(),
            receive_count,
            receipt: m.receipt.clone(),
        });
        if let Some(secs) = visibility.filter(|_| !is_lost) {
            facts.push(Fact::VisibilityChanged {
                queue,
                msg: msg.clone(),
                secs,
            });
        }
        if i == 0 {
            outcome = if is_lost {
                Outcome::ReceiveLost { msg, receive_count }
            } else {
                Outcome::Received { msg, receive_count }
            };
        } else {
            p.worker
                .note(format!("the same receive also returned {msg} (prefetch)"));
        }
    }
    let idle = msgs.is_empty() || lost_all;
    p.worker.complete(Service::Sqs, outcome, facts);
    p.worker.set_idle(idle);
    if lost_all {
        return empty();
    }
    if !lost.is_empty() {
        // Replies are not signed: the lost messages are cut out of it.
        return passthrough(
            status,
            headers,
            Bytes::from(without_messages(call.proto, &rbody, &lost)),
        );
    }
    passthrough(status, headers, rbody)
}

/// A ReceiveMessage reply without the messages whose receipt handle is in `receipts`.
fn without_messages(proto: Proto, body: &[u8], receipts: &[String]) -> Vec<u8> {
    match proto {
        Proto::Json => {
            let mut v: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
            if let Some(ms) = v.get_mut("Messages").and_then(|m| m.as_array_mut()) {
                ms.retain(|m| !receipts.contains(&str_of(m, "ReceiptHandle")));
            }
            v.to_string().into_bytes()
        }
        Proto::Query => {
            let text = String::from_utf8_lossy(body);
            let mut parts = text.split("<Message>");
            let mut out = parts.next().unwrap_or_default().to_string();
            for m in parts {
                let keep = xml_tag(m, "ReceiptHandle").is_none_or(|r| !receipts.contains(&r));
                let (message, rest) = m.split_once("</Message>").unwrap_or((m, ""));
                if keep {
                    out.push_str("<Message>");
                    out.push_str(message);
                    out.push_str("</Message>");
                }
                out.push_str(rest);
            }
            out.into_bytes()
        }
    }
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
    let who = p.worker.world.borrow().names.uuid(&identity);
    // The worker's own MessageDeduplicationId, if any, passes through: on a FIFO queue SQS's
    // answer with an accepted message's id says it dropped the send (in LocalStack's real time).
    let fifo = p.worker.queues.is_fifo(queue);
    let sent =
        p.worker
            .world
            .borrow_mut()
            .sent(queue, p.worker.queues.prefix(queue), &id, fifo, None);
    match sent {
        Ok(msg) => p.worker.complete(
            Service::Sqs,
            Outcome::Sent {
                msg: msg.clone(),
                who,
            },
            vec![Fact::Sent {
                queue,
                msg,
                identity,
            }],
        ),
        Err(first) => {
            let fact = Fact::Suppressed {
                queue,
                msg: first.msg.clone(),
                identity,
                replay: false,
            };
            p.worker.complete(
                Service::Sqs,
                Outcome::Suppressed {
                    msg: first.msg,
                    who,
                    first_ms: first.at_ms,
                },
                vec![fact],
            );
        }
    }
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
    let (depends, noop, gone) = {
        let w = p.worker.world.borrow();
        (
            w.sqs.depends_on_stale_delete(&msg, &receipt),
            w.sqs.is_stale(&msg, &receipt) && w.sqs.stale_delete_noop,
            w.sqs.is_gone(&receipt),
        )
    };
    if noop {
        p.worker
            .complete(Service::Sqs, Outcome::NotDeleted { msg }, vec![]);
        return call.ok_reply("");
    }
    let (status, headers, rbody) = match forward_call(p, parts, body).await {
        Ok(r) => r,
        Err(resp) => return resp,
    };
    // A handle of a message a redelivery replaced: the copy stays.
    if gone {
        p.worker.complete(Service::Sqs, Outcome::NotDeleted { msg }, vec![]);
        return passthrough(status, headers, rbody);
    }
    p.worker.world.borrow_mut().sqs.deleted(&msg);
    let mut facts = vec![Fact::Deleted {
        queue,
        msg: msg.clone(),
    }];
    if depends {
        facts.push(Fact::DependsOn {
            behaviour: crate::nemesis::sqs::STALE_RECEIPT_HANDLE.into(),
        });
    }
    p.worker.complete(
        Service::Sqs,
        Outcome::Deleted {
            msg,
            stale: depends,
        },
        facts,
    );
    passthrough(status, headers, rbody)
}

/// DeleteMessageBatch, as the in-process [`crate::sim::cx::Cx::delete_batch`] makes it: the
/// entries are planned under the armed faults ([`crate::nemesis::sqs::SqsNemesis::plan_batch_delete`]),
/// those to send are deleted by the harness's own client, and the worker gets SQS's answer in
/// its wire form, with an injected `InternalError` entry under `sqs:batch-delete-partial`
/// (HTTP 200 all the same: "check for batch errors even when the call returns an HTTP status
/// code of 200", DeleteMessageBatch API reference). Each entry's fate is a fact: `Deleted` or
/// `DeleteFailed`. A request SQS refuses as a whole (no entries, more than 10, repeated or
/// malformed ids) is forwarded as it is and its error returned.
async fn delete_batch(
    p: &SqsProxy,
    call: &Call,
    queue: &'static str,
    parts: &hyper::http::request::Parts,
    body: Bytes,
) -> Response<Full<Bytes>> {
    let entries = call.entries("DeleteMessageBatchRequestEntry", "ReceiptHandle");
    let mut ids: Vec<&str> = entries.iter().map(|(id, _)| id.as_str()).collect();
    ids.sort_unstable();
    let well_formed = |id: &str| {
        (1..=80).contains(&id.len())
            && id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    };
    if !(1..=10).contains(&entries.len())
        || ids.windows(2).any(|w| w[0] == w[1])
        || !ids.iter().all(|id| well_formed(id))
    {
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
    let keys: Vec<(&str, &str)> = msgs
        .iter()
        .zip(&entries)
        .map(|(m, (_, r))| (m.as_str(), r.as_str()))
        .collect();
    let plan = p
        .worker
        .world
        .borrow_mut()
        .sqs
        .plan_batch_delete(&keys, false);
    let mut facts: Vec<Fact> = (0..plan.depends)
        .map(|_| Fact::DependsOn {
            behaviour: crate::nemesis::sqs::STALE_RECEIPT_HANDLE.into(),
        })
        .collect();
    let mut successful: Vec<usize> = plan.kept.clone();
    let mut failed: Vec<(usize, String)> = plan
        .failed
        .map(|i| (i, "InternalError".to_string()))
        .into_iter()
        .collect();
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
        successful.extend(out.successful.iter().filter_map(|ok| index(&ok.id)));
        failed.extend(
            out.failed
                .iter()
                .filter_map(|f| Some((index(&f.id)?, f.code.clone()))),
        );
    }
    successful.sort_unstable();
    failed.sort_unstable();
    let (mut deleted, mut kept) = (Vec::new(), plan.kept.clone());
    {
        let mut w = p.worker.world.borrow_mut();
        for i in successful.iter().filter(|i| !plan.kept.contains(i)) {
            // A handle of a message a redelivery replaced: answered OK, nothing deleted.
            if w.sqs.is_gone(&entries[*i].1) {
                kept.push(*i);
                continue;
            }
            if p.worker.message_of(&entries[*i].1).is_some() {
                w.sqs.deleted(&msgs[*i]);
                facts.push(Fact::Deleted {
                    queue,
                    msg: msgs[*i].clone(),
                });
                deleted.push(msgs[*i].clone());
            }
        }
    }
    facts.extend(failed.iter().map(|(i, _)| Fact::DeleteFailed {
        queue,
        msg: msgs[*i].clone(),
    }));
    let outcome = Outcome::BatchDeleted {
        deleted,
        kept: kept.iter().map(|i| msgs[*i].clone()).collect(),
        failed: failed
            .iter()
            .map(|(i, code)| (msgs[*i].clone(), code.clone()))
            .collect(),
    };
    p.worker.complete(
        if plan.send.is_empty() {
            Service::None
        } else {
            Service::Sqs
        },
        outcome,
        facts,
    );
    let ids = |v: &[usize]| v.iter().map(|i| entries[*i].0.clone()).collect::<Vec<_>>();
    let failed_ids: Vec<(String, String)> = failed
        .iter()
        .map(|(i, code)| (entries[*i].0.clone(), code.clone()))
        .collect();
    call.batch_reply(&ids(&successful), &failed_ids)
}

/// Completes a ChangeMessageVisibility that set `msg`'s visibility to `secs` (logical).
fn hidden(p: &SqsProxy, queue: &'static str, msg: String, secs: u64) {
    let facts = vec![Fact::VisibilityChanged { queue, msg: msg.clone(), secs }];
    p.worker.complete(Service::Sqs, Outcome::Hidden { msg, secs }, facts);
}

/// A batch request SQS refuses as a whole (no entries, more than 10, repeated or malformed
/// ids): forwarded as it is, completed as SQS's error, and its reply relayed.
async fn refused_as_a_whole(p: &SqsProxy, parts: &hyper::http::request::Parts, body: Bytes) -> Response<Full<Bytes>> {
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
async fn own_batch<R, T, E, Fut>(
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

/// (entry id, a field of the entry), one per entry of a batch reply.
type EntryFields = Vec<(String, String)>;

/// The entries of a batch reply: (`Id`, `field`) of each `Successful` entry and (`Id`, `Code`)
/// of each `Failed` one, from JSON or from the query protocol's XML (`<op>ResultEntry`,
/// `BatchResultErrorEntry`).
fn batch_result(call: &Call, body: &[u8], field: &str) -> (EntryFields, EntryFields) {
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
async fn send_batch(
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
    let fifo = p.worker.queues.is_fifo(queue);
    let (mut sent, mut suppressed, mut facts) = (Vec::new(), Vec::new(), Vec::new());
    for (id, message_id) in &ok {
        let identity = bodies
            .iter()
            .find(|(i, _)| i == id)
            .and_then(|(_, b)| serde_json::from_str::<serde_json::Value>(b).ok())
            .and_then(|v| (*p.worker.identity)(&v))
            .map(|(_, u)| u)
            .unwrap_or_default();
        let mut w = p.worker.world.borrow_mut();
        let who = w.names.uuid(&identity);
        match w.sent(queue, p.worker.queues.prefix(queue), message_id, fifo, None) {
            Ok(msg) => {
                facts.push(Fact::Sent {
                    queue,
                    msg: msg.clone(),
                    identity,
                });
                sent.push((msg, who));
            }
            Err(first) => {
                facts.push(Fact::Suppressed {
                    queue,
                    msg: first.msg.clone(),
                    identity,
                    replay: false,
                });
                suppressed.push((first.msg, who));
            }
        }
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
async fn change_visibility_batch(
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
    let facts = ok
        .iter()
        .map(|i| Fact::VisibilityChanged {
            queue,
            msg: msg_of(*i),
            secs: secs_of(*i),
        })
        .collect();
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_wire_forms_parse() {
        let mut h = hyper::HeaderMap::new();
        h.insert("x-amz-target", "AmazonSQS.DeleteMessage".parse().unwrap());
        let c = Call::parse(
            &h,
            br#"{"QueueUrl":"http://x/000000000000/q","ReceiptHandle":"r1"}"#,
        )
        .unwrap();
        assert_eq!(
            (c.op.as_str(), c.param("ReceiptHandle").as_deref()),
            ("DeleteMessage", Some("r1"))
        );
        let c = Call::parse(
            &hyper::HeaderMap::new(),
            b"Action=ReceiveMessage&Version=2012-11-05&QueueUrl=http%3A%2F%2Fx%2Fq",
        )
        .unwrap();
        assert_eq!(
            (c.proto, c.op.as_str(), c.param("QueueUrl").as_deref()),
            (Proto::Query, "ReceiveMessage", Some("http://x/q"))
        );
    }

    #[test]
    fn received_messages_parse_from_json_and_xml() {
        let json = br#"{"Messages":[{"MessageId":"a","ReceiptHandle":"r","Body":"{\"x\":1}","Attributes":{"ApproximateReceiveCount":"2"}}]}"#;
        let m = parse_received(Proto::Json, json);
        assert_eq!(
            (
                m[0].id.as_str(),
                m[0].receipt.as_str(),
                m[0].body.as_str(),
                m[0].receive_count
            ),
            ("a", "r", "{\"x\":1}", Some(2))
        );
        let xml = b"<ReceiveMessageResponse><ReceiveMessageResult><Message><MessageId>b</MessageId><ReceiptHandle>s</ReceiptHandle>\
            <Body>{&quot;x&quot;:1}</Body><Attribute><Name>ApproximateReceiveCount</Name><Value>3</Value></Attribute></Message>\
            </ReceiveMessageResult></ReceiveMessageResponse>";
        let m = parse_received(Proto::Query, xml);
        assert_eq!(
            (m[0].id.as_str(), m[0].body.as_str(), m[0].receive_count),
            ("b", "{\"x\":1}", Some(3))
        );
        assert!(parse_received(Proto::Json, b"{}").is_empty());
        let cut = without_messages(Proto::Query, xml, &["s".to_string()]);
        assert!(parse_received(Proto::Query, &cut).is_empty());
        let two = br#"{"Messages":[{"MessageId":"a","ReceiptHandle":"r"},{"MessageId":"b","ReceiptHandle":"q"}]}"#;
        let cut = without_messages(Proto::Json, two, &["r".to_string()]);
        assert_eq!(
            parse_received(Proto::Json, &cut)
                .iter()
                .map(|m| m.id.as_str())
                .collect::<Vec<_>>(),
            vec!["b"]
        );
        assert_eq!(
            error_code(br#"{"__type":"com.amazonaws.sqs#QueueDoesNotExist","message":"x"}"#)
                .as_deref(),
            Some("QueueDoesNotExist")
        );
    }
}
