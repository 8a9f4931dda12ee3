//! A provider's turmoil host: an HTTP/1 server (hyper over turmoil's TCP) that hands each
//! request to the workload's [`Provider`], after the faults armed for it
//! ([`crate::nemesis::net`]).

use std::rc::Rc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::Response;
use hyper_util::rt::TokioIo;

use super::{Cut, Handoff};
use crate::provider::{Provider, Reply, Request, PORT};
use crate::sim::world::SharedWorld;

/// The header a worker's client names itself in (the provider never sees it).
pub const CALLER_HEADER: &str = "x-crashpoint-caller";

/// Serves `provider` on port [`PORT`] until the host is dropped (a crash or a bounce).
/// Errors: the port cannot be bound, or accepting fails (turmoil's errors, which end the
/// simulation step as a host failure).
pub async fn serve(provider: Rc<dyn Provider>, world: SharedWorld) -> Result<(), Box<dyn std::error::Error>> {
    let listener = turmoil::net::TcpListener::bind(("0.0.0.0", PORT)).await?;
    loop {
        let (stream, _) = listener.accept().await?;
        let (provider, world) = (provider.clone(), world.clone());
        tokio::task::spawn_local(async move {
            let svc = hyper::service::service_fn(move |req| {
                let (provider, world) = (provider.clone(), world.clone());
                async move { Ok::<_, std::convert::Infallible>(respond(&*provider, &world, req).await) }
            });
            let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), svc).await;
        });
    }
}

/// The request as the provider sees it, and the caller's name.
async fn decode(req: hyper::Request<Incoming>) -> (Request, String) {
    let (parts, body) = req.into_parts();
    let bytes = body.collect().await.map(|b| b.to_bytes()).unwrap_or_default();
    let mut headers: std::collections::BTreeMap<String, String> = parts
        .headers
        .iter()
        .filter(|(k, _)| !matches!(k.as_str(), "host" | "content-length" | "content-type"))
        .map(|(k, v)| (k.as_str().to_string(), String::from_utf8_lossy(v.as_bytes()).into_owned()))
        .collect();
    let caller = headers.remove(CALLER_HEADER).unwrap_or_default();
    let query = parts
        .uri
        .query()
        .map(|q| url::form_urlencoded::parse(q.as_bytes()).into_owned().collect())
        .unwrap_or_default();
    let body = serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null);
    (Request { method: parts.method.to_string(), path: parts.uri.path().to_string(), query, headers, body }, caller)
}

/// `reply` as an HTTP/1 response with a JSON body (none when the body is `null`): the answer
/// of a provider on either front-end.
pub(crate) fn encode(reply: &Reply) -> Response<Full<Bytes>> {
    let body = if reply.body.is_null() { Bytes::new() } else { Bytes::from(reply.body.to_string()) };
    Response::builder()
        .status(reply.status)
        .header("content-type", "application/json")
        .body(Full::new(body))
        .expect("a status and a header always build")
}

async fn respond(provider: &dyn Provider, world: &SharedWorld, req: hyper::Request<Incoming>) -> Response<Full<Bytes>> {
    let (request, caller) = decode(req).await;
    match super::deliver(provider, world, request, caller.clone()) {
        Handoff::Reply(reply) => encode(&reply),
        Handoff::Lost(reply) => {
            world.borrow_mut().net.to_cut.push(Cut { from: provider.name().to_string(), to: caller });
            encode(&reply)
        }
        // The caller gives up; the request is delivered when the logical clock gets there.
        // (A request dropped on its way never gets here: its caller's link is cut.)
        Handoff::Held | Handoff::Dropped => std::future::pending().await,
    }
}
