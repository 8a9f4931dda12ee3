//! A worker's HTTP client to a provider over turmoil's simulated network: one connection per
//! call, a response awaited for [`CLIENT_TIMEOUT_MS`] of turmoil time.

use std::time::Duration;

use anyhow::Result;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;

use super::host::CALLER_HEADER;
use super::CLIENT_TIMEOUT_MS;
use crate::provider::{Reply, Request, PORT};

/// Sends `request` from worker `me` to `provider` and returns its reply. Errors: why no
/// response came (the timeout, a refused or reset connection): the caller cannot know
/// whether the request was applied.
pub async fn call(me: &str, provider: &str, request: &Request) -> Result<Reply, String> {
    match tokio::time::timeout(Duration::from_millis(CLIENT_TIMEOUT_MS), exchange(me, provider, request)).await {
        Ok(Ok(reply)) => Ok(reply),
        Ok(Err(e)) => Err(format!("connection to {provider} failed: {e:#}")),
        Err(_) => Err(format!("no response from {provider} within {} s", CLIENT_TIMEOUT_MS / 1000)),
    }
}

async fn exchange(me: &str, provider: &str, request: &Request) -> Result<Reply> {
    let stream = turmoil::net::TcpStream::connect((provider, PORT)).await?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake::<_, Full<Bytes>>(TokioIo::new(stream)).await?;
    tokio::task::spawn_local(async move {
        let _ = conn.await;
    });
    let mut req = hyper::Request::builder()
        .method(request.method.as_str())
        .uri(request.target())
        .header("host", provider)
        .header(CALLER_HEADER, me);
    for (k, v) in &request.headers {
        req = req.header(k.as_str(), v.as_str());
    }
    let body = match &request.body {
        serde_json::Value::Null => Bytes::new(),
        b => {
            req = req.header("content-type", "application/json");
            Bytes::from(b.to_string())
        }
    };
    let resp = sender.send_request(req.body(Full::new(body))?).await?;
    let status = resp.status().as_u16();
    let bytes = resp.into_body().collect().await?.to_bytes();
    let body = if bytes.is_empty() {
        serde_json::Value::Null
    } else {
        serde_json::from_slice(&bytes).unwrap_or_else(|_| serde_json::Value::String(String::from_utf8_lossy(&bytes).into_owned()))
    };
    Ok(Reply { status, body })
}
