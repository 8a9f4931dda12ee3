//! A provider's webhooks at the wire: crashpoint POSTs each event to the endpoint a team's
//! process serves ([`crate::provider::api::Webhook`]), on a loopback port it hands the process
//! in the webhook's `port_env`. The process's own HTTP server (Node's `http`, Express, Flask)
//! is used unchanged.
//!
//! A worker of the webhook's role ([`crate::spec::RoleKind::Endpoint`]) stands at a held call
//! labelled by the webhook, the top of its cycle as a receive is a consumer's. Granted, it
//! takes the next delivery ([`crate::sim::net::webhook::take`]; none pending: an idle call)
//! and completes at once, so that the calls the endpoint's handler makes are the worker's next
//! calls, gated as any (its crash point `after_<label>` is the handler's start). Then the event
//! is POSTed as JSON to the endpoint's path. The endpoint's answer reaches the provider by a
//! held call of its own, `<label>_answer` ([`answer_label`]), as an SQS consumer's
//! DeleteMessage follows its handler: a crash at the crash point after the handler's last call
//! (`after_commit`) loses it, the window between COMMIT and the acknowledgement. The answer ends
//! the delivery ([`crate::sim::net::webhook::answered`]): a 2xx is done with; anything else, a
//! closed connection, the process killed before its answer reached the provider, or a
//! `fail@` on the answer queues the event again. A process that never listens on its port ends
//! the run with exit 2 naming the variable.

use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;

use super::worker::{Granted, Held, WireWorker};
use crate::provider::api::Webhook;
use crate::record::history::{Outcome, Service};
use crate::sim::net::webhook::{answered, take, Delivery};
use crate::sim::world::SharedWorld;

/// The label of the call by which an endpoint's answer to a delivery of webhook `label` reaches
/// the provider: `<label>_answer`.
pub fn answer_label(label: &str) -> String {
    format!("{label}_answer")
}

/// The webhooks of `providers` that role `role` serves, with their providers' names.
pub fn of_role(providers: &[Rc<dyn crate::provider::Provider>], role: &str) -> Vec<Webhook> {
    providers.iter().flat_map(|p| p.webhooks()).filter(|w| w.role == role).collect()
}

/// The environment lines that hand a process of a role its webhook ports: each distinct
/// `port_env` of `hooks` with its port in `ports` (one per distinct variable, in order).
pub fn environment(hooks: &[Webhook], ports: &[u16]) -> Vec<(String, String)> {
    port_envs(hooks).into_iter().zip(ports).map(|(v, p)| (v, p.to_string())).collect()
}

/// The distinct `port_env`s of `hooks`, in order.
pub fn port_envs(hooks: &[Webhook]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for h in hooks {
        if !out.contains(&h.port_env) {
            out.push(h.port_env.clone());
        }
    }
    out
}

/// A delivery whose answer has not come: ended as unanswered if its task is dropped (the
/// worker's host crashed, killing the process mid-request), so that the event is delivered
/// again.
struct InFlight {
    world: SharedWorld,
    delivery: Option<Delivery>,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if let Some(d) = self.delivery.take() {
            // A host is dropped by the scheduler between steps, with the world not borrowed.
            if self.world.try_borrow_mut().is_ok() {
                answered(&self.world, d, None, "the endpoint's process was killed before its answer reached the provider");
            } else {
                tracing::error!(event = %d.pending.event.id, "a webhook delivery ended while the world was borrowed: its event is lost");
            }
        }
    }
}

/// Waits until something listens on `127.0.0.1:port` (the process started its server): real
/// time, up to its role's `step_timeout_s` less half a second, so that the run ends naming
/// `hook.port_env` rather than the settle's general timeout. `false` when it never did (the
/// run then ends with exit 2).
async fn listening(worker: &WireWorker, hook: &Webhook, port: u16) -> bool {
    let within = Duration::from_millis((worker.ext.step_timeout_s * 1000).saturating_sub(500).max(500));
    let started = Instant::now();
    loop {
        match tokio::net::TcpStream::connect(("127.0.0.1", port)).await {
            Ok(_) => return true,
            Err(e) if started.elapsed() >= within => {
                worker.fatal(format!(
                    "{}: nothing listens on 127.0.0.1:{port}, the port crashpoint handed it in {} for webhook `{}` (POST {}), \
                     {:.1} s after it started ({e}): its process must serve the endpoint on that port",
                    worker.me,
                    hook.port_env,
                    hook.label,
                    hook.path,
                    within.as_secs_f64()
                ));
                return false;
            }
            // Simulated time: it passes as the scheduler steps the simulation meanwhile.
            Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
        }
    }
}

/// Delivers webhook `hook`'s events to `worker`'s process, listening on `port`, until the host is
/// dropped. The first delivery is held only once the process listens: until then the worker has
/// made no call, and a process that exits first is one that cannot start.
pub async fn serve(worker: Rc<WireWorker>, hook: Webhook, port: u16) {
    if !listening(&worker, &hook, port).await {
        return;
    }
    let answer = crate::spec::intern(&answer_label(hook.label));
    loop {
        let held = Held {
            op: hook.label,
            service: Service::Http,
            cycle_start: true,
            key: format!("webhook {}", hook.label),
            pid: None,
            about: None,
            tie: 0,
        };
        worker.waiting_for_delivery(Some(hook.label));
        let granted = worker.hold(held).await;
        worker.waiting_for_delivery(None);
        if let Granted::Fail(_) = granted {
            // A failure armed at a crash point lands on the delivery: the provider could not
            // reach the endpoint this time, and nothing was taken from its queue.
            worker.complete(Service::Http, Outcome::Done, vec![]);
            continue;
        }
        let Some(d) = take(&worker.world, hook.role, hook.label, &worker.me) else {
            worker.complete(Service::Http, Outcome::Empty, vec![]);
            worker.set_idle(true);
            continue;
        };
        let e = &d.pending.event;
        let outcome = Outcome::Delivered { provider: e.provider.to_string(), event: e.id.clone(), attempt: d.pending.attempts };
        let (path, body) = (d.pending.path.clone(), e.body.to_string());
        worker.complete(Service::Http, outcome, vec![]);
        worker.set_idle(false);
        let provider = e.provider;
        let mut flight = InFlight { world: worker.world.clone(), delivery: Some(d) };
        let result = post(port, &path, body).await;
        // The endpoint's answer reaches the provider as a call of its own, held like any: a
        // crash before it (at the crash point after the handler's last call) loses it.
        let held = Held {
            op: answer,
            service: Service::Http,
            cycle_start: false,
            key: format!("webhook answer {}", hook.label),
            pid: None,
            about: None,
            tie: 0,
        };
        let granted = worker.hold(held).await;
        let d = flight.delivery.take().expect("taken here only");
        let status = match (granted, result) {
            (Granted::Fail(cp), _) => {
                answered(&worker.world, d, None, &format!("the answer was lost (fail@{cp})"));
                None
            }
            (_, Ok(status)) => {
                answered(&worker.world, d, Some(status), "");
                Some(status)
            }
            (_, Err(why)) => {
                answered(&worker.world, d, None, why);
                None
            }
        };
        worker.complete(Service::Http, Outcome::Answered { provider: provider.to_string(), status }, vec![]);
    }
}

/// POSTs `body` to `path` on `127.0.0.1:port`: the status, or why no answer came, in words that
/// do not depend on the system's error (the trace must repeat byte for byte; the error itself
/// is logged).
async fn post(port: u16, path: &str, body: String) -> Result<u16, &'static str> {
    let stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.map_err(|e| {
        tracing::debug!(port, error = %e, "webhook endpoint: connect");
        "the endpoint refused the connection"
    })?;
    let closed = |e: hyper::Error| {
        tracing::debug!(port, error = %e, "webhook endpoint: exchange");
        "the connection closed without an answer"
    };
    let (mut sender, conn) = hyper::client::conn::http1::handshake::<_, Full<Bytes>>(TokioIo::new(stream)).await.map_err(closed)?;
    tokio::task::spawn_local(async move {
        let _ = conn.await;
    });
    let req = hyper::Request::builder()
        .method("POST")
        .uri(path)
        .header("host", format!("127.0.0.1:{port}"))
        .header("content-type", "application/json")
        .header("user-agent", "crashpoint-webhooks")
        .body(Full::new(Bytes::from(body)))
        .map_err(|_| "the request could not be built")?;
    let resp = sender.send_request(req).await.map_err(closed)?;
    let status = resp.status().as_u16();
    // The body is read to the end, so that the endpoint's answer is complete; it says nothing.
    let _ = resp.into_body().collect().await;
    Ok(status)
}
