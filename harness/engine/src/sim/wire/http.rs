//! A workload's providers at the wire: each provider ([`crate::provider::Provider`], e.g. a
//! team's `[[providers]]` payment API) is served to a team's process over plain HTTP/1 on a
//! loopback port of the harness, whose URL the process finds in the provider's
//! [`crate::provider::Provider::url_env`]. The process's own HTTP client (an SDK such as
//! `stripe`, `fetch`, `requests`) is used unchanged.
//!
//! Each request is a call of the worker: held until the scheduler grants it (its label is the
//! route's, so the worker stands at `after_<label>` once it is answered), then handed to the
//! provider through the same [`crate::sim::net::deliver`] as an in-process worker's request,
//! with the same faults. What the wire does with a lost answer, a request held on the link or
//! dropped: it closes the worker's connection without answering (the client sees a reset
//! connection, "socket hang up": the outcome is unknown to it). A JSON body is read as JSON,
//! a form body (`application/x-www-form-urlencoded`, Stripe's SDKs) as nested objects
//! (`metadata[order_id]=o1` → `{"metadata": {"order_id": "o1"}}`, `items[0]=a` → a list).
//!
//! An HTTP client retries a request whose connection closed without an answer by itself (Node's
//! keep-alive race: stripe-node retries once even with `maxNetworkRetries: 0`, 0.5 s later, the
//! same request with the same key). The first such retry, identical to the worker's last call
//! to the provider and sent before any other call is held, is part of that call, as an SQS
//! SDK's retries are: it passes without a hold and meets the call's fault again (a lost answer
//! is lost again, a request lost on its way is lost again: the link is still down), so that one
//! fault leaves the worker's code with the unknown outcome it must handle, as it does for an
//! in-process worker. The provider still handles a retry that reaches it (a replay from its
//! key, or a second effect when it has none), and the provider's lane says it was a retry. A
//! further repeat is a call of its own. A request held on the link (`net:delay`) is on its way:
//! the client's retry of it is a call of its own too.
//!
//! Known limit: a role declared `concurrent = true` makes its calls in an order its process
//! decides; a client's retry 0.5 s later lands in whichever settle it reaches, so a provider's
//! references can differ between runs of one schedule. The one-call-at-a-time roles have no
//! such dependence.
//!
//! A request no route of the provider takes ends the run with exit 2 naming it: the harness
//! cannot know what the real provider would answer, and a made-up 404 would test the worker
//! against an API that does not exist.

use std::cell::RefCell;
use std::rc::Rc;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::Response;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use super::worker::{injected_error, Granted, Held, WireWorker};
use crate::nemesis::net::{NetFault, NetFaultKind};
use crate::provider::{Provider, Reply};
use crate::record::history::{Outcome, Service};
use crate::sim::net::host::{decode, encode};
use crate::sim::net::Handoff;

/// The connection is closed without an answer (the service's error: hyper then drops it).
#[derive(Debug)]
struct Closed;

impl std::fmt::Display for Closed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("closed without an answer")
    }
}

impl std::error::Error for Closed {}

/// The worker's last call to the provider, when its answer never came: what a retry of it
/// looks like, what befell it, and [`WireWorker::calls_held`] then.
#[derive(Debug, Clone, PartialEq)]
struct Unanswered {
    fingerprint: String,
    fault: Option<NetFault>,
    held: u64,
}

/// Serves `provider` to `worker` on `listener` until dropped; one task per connection.
pub async fn serve(listener: TcpListener, provider: Rc<dyn Provider>, worker: Rc<WireWorker>) {
    let last: Rc<RefCell<Option<Unanswered>>> = Rc::default();
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let (provider, worker, last) = (provider.clone(), worker.clone(), last.clone());
        let stream = super::worker::Touching::new(stream, worker.clone());
        tokio::task::spawn_local(async move {
            let gate = worker.clone();
            let svc = hyper::service::service_fn(move |req| {
                let (provider, worker, last) = (provider.clone(), worker.clone(), last.clone());
                async move {
                    worker.touch();
                    let r = respond(&*provider, &worker, &last, req).await;
                    worker.touch();
                    r
                }
            });
            let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), svc).await;
            gate.task_ended();
        });
    }
}

async fn respond(
    provider: &dyn Provider,
    worker: &WireWorker,
    last: &RefCell<Option<Unanswered>>,
    req: hyper::Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Closed> {
    let request = decode(req).await;
    let name = provider.name();
    let fingerprint = format!("{} {} {:?} {}", request.method, request.target(), request.headers.get("idempotency-key"), request.body);
    let retry = last.borrow_mut().take().filter(|u| u.fingerprint == fingerprint && u.held == worker.calls_held());
    if let Some(u) = retry {
        // The client's own (first) retry of a call whose answer never came: the same fault
        // again, once. A further repeat is a call of its own, held as any.
        let _pending = worker.pending_guard();
        if let Some(f) = u.fault {
            worker.world.borrow_mut().net.armed.insert(0, f);
        }
        worker.world.borrow_mut().net.log.push((name, format!("{} retries its {} {} by itself: part of its call, whose fault holds", worker.me, request.method, request.shown())));
        let (handoff, taken) = crate::sim::net::deliver_with(provider, &worker.world, request, worker.me.clone());
        if let (Some(fault), None) = (u.fault, taken) {
            // Not taken (the provider was partitioned meanwhile): no fault the schedule did not
            // choose stays armed.
            let mut w = worker.world.borrow_mut();
            if let Some(i) = w.net.armed.iter().position(|f| *f == fault) {
                w.net.armed.remove(i);
            }
        }
        return match handoff {
            Handoff::Reply(r) => Ok(encode(&r)),
            _ => Err(Closed),
        };
    }
    let Some(op) = provider.route(&request) else {
        worker.fatal(format!(
            "{}: {} {} was sent to provider `{name}`, which declares no route for it: declare it in the workload file's \
             [[providers.routes]] of `{name}` (method and path, `{{id}}` for a path segment)",
            worker.me,
            request.method,
            request.target()
        ));
        return Err(Closed);
    };
    let key = request.headers.get("idempotency-key").cloned();
    let held = Held {
        op,
        service: Service::Http,
        cycle_start: false,
        key: format!("{} {} {} {}", request.method, request.target(), key.as_deref().unwrap_or(""), request.body),
        pid: None,
        about: Some(key.unwrap_or_else(|| request.target())),
        tie: 0,
    };
    if let Granted::Fail(cp) = worker.hold(held).await {
        // Not applied, and an answer a client takes for a transient failure of the provider
        // (a 503 of Stripe's `api_error` shape), as the other proxies answer `fail@` with a
        // service error.
        worker.complete(Service::Http, Outcome::Done, vec![]);
        let body = serde_json::json!({"error": {"type": "api_error", "message": injected_error(op, cp)}});
        crate::sim::net::injected(provider, &worker.world, &request, &worker.me, &format!("503 (fail@{cp}): not applied"));
        return Ok(encode(&Reply::new(503, body)));
    }
    let (delivery, taken) = crate::sim::net::deliver_with(provider, &worker.world, request, worker.me.clone());
    let fault = taken.filter(|f| matches!(f.kind, NetFaultKind::DropResponse | NetFaultKind::DropRequest));
    if matches!(delivery, Handoff::Lost(_) | Handoff::Dropped) {
        *last.borrow_mut() = Some(Unanswered { fingerprint, fault, held: worker.calls_held() });
    }
    let outcome = match &delivery {
        Handoff::Reply(r) => Outcome::Http { provider: name.to_string(), status: r.status },
        Handoff::Lost(_) => Outcome::NoResponse { provider: name.to_string(), why: "the connection closed before the response".into() },
        Handoff::Held => Outcome::NoResponse { provider: name.to_string(), why: "the request is held on the link; the connection closed".into() },
        Handoff::Dropped => Outcome::NoResponse { provider: name.to_string(), why: "the request was lost on its way; the connection closed".into() },
    };
    worker.complete(Service::Http, outcome, vec![]);
    match delivery {
        Handoff::Reply(r) => Ok(encode(&r)),
        _ => Err(Closed),
    }
}

/// The environment lines that point a team's process at `providers`: each provider's
/// [`Provider::url_env`] = `http://127.0.0.1:<port>`, ports in the providers' order.
pub fn environment(providers: &[Rc<dyn Provider>], ports: &[u16]) -> Vec<(String, String)> {
    providers.iter().zip(ports).map(|(p, port)| (p.url_env(), format!("http://127.0.0.1:{port}"))).collect()
}
