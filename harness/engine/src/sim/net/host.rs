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
use serde_json::Value;

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
    let mut request = decode(req).await;
    let caller = request.headers.remove(CALLER_HEADER).unwrap_or_default();
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

/// The request as a provider reads it, on either front-end: headers in lower case (without
/// `host`, `content-length`, `content-type`), the query decoded, a JSON body as JSON, a form
/// body (`application/x-www-form-urlencoded`, Stripe's SDKs) as nested objects ([`form_body`]),
/// any other body as a string.
pub(crate) async fn decode(req: hyper::Request<Incoming>) -> Request {
    let (parts, body) = req.into_parts();
    let bytes = body.collect().await.map(|b| b.to_bytes()).unwrap_or_default();
    let form = parts
        .headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/x-www-form-urlencoded"));
    let headers = parts
        .headers
        .iter()
        .filter(|(k, _)| !matches!(k.as_str(), "host" | "content-length" | "content-type"))
        .map(|(k, v)| (k.as_str().to_string(), String::from_utf8_lossy(v.as_bytes()).into_owned()))
        .collect();
    let query = parts.uri.query().map(|q| url::form_urlencoded::parse(q.as_bytes()).into_owned().collect()).unwrap_or_default();
    let body = match (bytes.is_empty(), form) {
        (true, _) => Value::Null,
        (false, true) => form_body(&bytes),
        (false, false) => serde_json::from_slice(&bytes).unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned())),
    };
    Request { method: parts.method.to_string(), path: parts.uri.path().to_string(), query, headers, body }
}

/// A form body as nested JSON: `a[b][c]=v` → `{"a": {"b": {"c": "v"}}}`; `a[]=v` and
/// `a[0]=v` → lists. Values stay strings (a form carries no types).
pub fn form_body(bytes: &[u8]) -> Value {
    let mut root = Value::Object(Default::default());
    for (k, v) in url::form_urlencoded::parse(bytes) {
        let (head, rest) = k.split_once('[').map_or((k.as_ref(), ""), |(h, r)| (h, r));
        let mut path: Vec<&str> = vec![head];
        if !rest.is_empty() {
            path.extend(rest.trim_end_matches(']').split("]["));
        }
        insert(&mut root, &path, Value::String(v.into_owned()));
    }
    root
}

fn insert(at: &mut Value, path: &[&str], v: Value) {
    let Some((first, rest)) = path.split_first() else {
        *at = v;
        return;
    };
    // A list index is `[]` (append) or the next or an existing position; any other key,
    // numbers past the end too (`metadata[2024]`), names an object's field.
    let index = |items: &Vec<Value>| match first.parse::<usize>() {
        _ if first.is_empty() => Some(items.len()),
        Ok(i) if i <= items.len() => Some(i),
        _ => None,
    };
    if at.is_null() {
        *at = if index(&Vec::new()).is_some() { Value::Array(vec![]) } else { Value::Object(Default::default()) };
    }
    if let Value::Array(items) = at {
        match index(items) {
            Some(i) => {
                if i == items.len() {
                    items.push(Value::Null);
                }
                return insert(&mut items[i], rest, v);
            }
            // The list becomes an object keyed by position, so no value is lost.
            None => *at = Value::Object(items.drain(..).enumerate().map(|(i, x)| (i.to_string(), x)).collect()),
        }
    }
    if !at.is_object() {
        *at = Value::Object(Default::default());
    }
    if let Value::Object(m) = at {
        insert(m.entry(first.to_string()).or_insert(Value::Null), rest, v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_form_body_reads_as_nested_objects_and_lists() {
        let v = form_body(b"amount=1000&currency=eur&metadata[order_id]=o1&expand[0]=latest_charge&expand[1]=customer&confirm=true");
        assert_eq!(
            v,
            serde_json::json!({"amount": "1000", "currency": "eur", "metadata": {"order_id": "o1"}, "expand": ["latest_charge", "customer"], "confirm": "true"})
        );
        assert_eq!(form_body(b"a[b][c]=1&a[b][d]=2"), serde_json::json!({"a": {"b": {"c": "1", "d": "2"}}}));
        assert_eq!(form_body(b"metadata[2024]=x"), serde_json::json!({"metadata": {"2024": "x"}}), "no list of 2025 entries");
        assert_eq!(form_body(b"a[0]=x&a[b]=y"), serde_json::json!({"a": {"0": "x", "b": "y"}}), "no value lost");
        assert_eq!(form_body(b"a[]=x&a[]=y"), serde_json::json!({"a": ["x", "y"]}));
    }
}
