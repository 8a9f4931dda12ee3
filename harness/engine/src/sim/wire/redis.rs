//! The Redis gating proxy (RESP2 and RESP3, framed with the `redis-protocol` crate).
//!
//! Each command is one call; `MULTI … EXEC` is one call, gated at EXEC (nothing runs before
//! it: Redis docs, "Transactions"). Handshake and health traffic passes ungated: `HELLO`,
//! `AUTH`, `SELECT`, `CLIENT …` (`CLIENT SETINFO lib-name` of redis-py, ioredis, Lettuce and
//! phpredis names the client library in errors), `INFO` (ioredis's ready check), `COMMAND`,
//! `PING`, `ECHO`, and the commands queued inside a MULTI.
//! Pipelined commands are forwarded one at a time, so that each stays a call of its own.

use std::rc::Rc;

use anyhow::{anyhow, bail, Result};
use redis_protocol::resp2::types::OwnedFrame as Resp2;
use redis_protocol::resp3::types::OwnedFrame as Resp3;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::worker::WireWorker;
use crate::sim::history::{Fact, Outcome, Service};

/// Commands that pass ungated.
pub const PASS: &[&str] = &[
    "HELLO", "AUTH", "SELECT", "CLIENT", "INFO", "COMMAND", "PING", "ECHO", "MULTI", "DISCARD",
    "QUIT", "RESET",
];

/// Serves worker connections on `listener`, each relayed to Redis at `upstream` (`host:port`),
/// until dropped.
pub async fn serve(listener: TcpListener, upstream: String, worker: Rc<WireWorker>) {
    loop {
        let Ok((client, _)) = listener.accept().await else {
            continue;
        };
        let (upstream, worker) = (upstream.clone(), worker.clone());
        tokio::task::spawn_local(async move {
            let r = relay(client, &upstream, &worker).await;
            worker.task_ended();
            if let Err(e) = r {
                tracing::debug!(worker = %worker.me, error = %e, "redis proxy connection ended");
            }
        });
    }
}

/// A server reply, as far as the harness needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Reply {
    Ok,
    Null,
    Int(i64),
    Error(String),
    Other,
}

fn read_reply(buf: &[u8]) -> Result<Option<(Reply, usize)>> {
    let v2 = redis_protocol::resp2::decode::decode(buf);
    if let Ok(r) = v2 {
        return Ok(r.map(|(f, n)| {
            let reply = match f {
                Resp2::SimpleString(_) | Resp2::BulkString(_) => Reply::Ok,
                Resp2::Null => Reply::Null,
                Resp2::Integer(i) => Reply::Int(i),
                Resp2::Error(e) => Reply::Error(e),
                Resp2::Array(_) => Reply::Other,
            };
            (reply, n)
        }));
    }
    let r = redis_protocol::resp3::decode::complete::decode(buf)
        .map_err(|e| anyhow!("malformed reply from Redis: {e:?}"))?;
    Ok(r.map(|(f, n)| {
        let reply = match f {
            Resp3::SimpleString { .. } | Resp3::BlobString { .. } => Reply::Ok,
            Resp3::Null => Reply::Null,
            Resp3::Number { data, .. } => Reply::Int(data),
            Resp3::SimpleError { data, .. } => Reply::Error(data),
            Resp3::BlobError { data, .. } => {
                Reply::Error(String::from_utf8_lossy(&data).into_owned())
            }
            _ => Reply::Other,
        };
        (reply, n)
    }))
}

/// A command from the client: its arguments (lossy UTF-8) and its bytes.
fn read_command(buf: &[u8]) -> Result<Option<(Vec<String>, usize)>> {
    match redis_protocol::resp2::decode::decode(buf).map_err(|e| anyhow!("malformed command: {e:?}"))? {
        None => Ok(None),
        Some((Resp2::Array(parts), n)) => {
            let args = parts
                .into_iter()
                .map(|p| match p {
                    Resp2::BulkString(b) | Resp2::SimpleString(b) => String::from_utf8_lossy(&b).into_owned(),
                    other => format!("{other:?}"),
                })
                .collect();
            Ok(Some((args, n)))
        }
        Some((other, _)) => bail!("expected a command (an array of bulk strings), got {other:?} (inline commands are not relayed)"),
    }
}

async fn fill(stream: &mut TcpStream, buf: &mut Vec<u8>, worker: &WireWorker) -> Result<bool> {
    let mut chunk = [0u8; 16 * 1024];
    let n = stream.read(&mut chunk).await?;
    worker.touch();
    buf.extend_from_slice(&chunk[..n]);
    Ok(n > 0)
}

async fn relay(mut client: TcpStream, upstream: &str, worker: &Rc<WireWorker>) -> Result<()> {
    let mut server = TcpStream::connect(upstream).await?;
    let (mut from_client, mut from_server) = (Vec::new(), Vec::new());
    let mut in_multi = false;
    loop {
        let (args, n) = loop {
            if let Some(c) = read_command(&from_client)? {
                break c;
            }
            if !fill(&mut client, &mut from_client, worker).await? {
                return Ok(()); // the worker closed (or died): drop the upstream at once
            }
        };
        let bytes: Vec<u8> = from_client.drain(..n).collect();
        let name = args
            .first()
            .map(|a| a.to_ascii_uppercase())
            .unwrap_or_default();
        let gated = !PASS.contains(&name.as_str()) && !(in_multi && name != "EXEC");
        in_multi = (in_multi || name == "MULTI") && name != "EXEC" && name != "DISCARD";
        let op = worker
            .ext
            .label_of(&name, false)
            .unwrap_or_else(|| label(&name, &args));
        if name == "CLIENT"
            && args
                .get(1)
                .is_some_and(|a| a.eq_ignore_ascii_case("SETINFO"))
        {
            if let (Some(k), Some(v)) = (args.get(2), args.get(3)) {
                worker.saw_client(format!("Redis client {}={v}", k.to_ascii_lowercase()));
            }
        }
        if gated {
            // Held, while watching the client: a command whose client went away is never sent.
            let granted = {
                let key = args.join(" ");
                let about = worker
                    .ext
                    .concurrent
                    .then(|| args.get(1).cloned())
                    .flatten();
                let held = worker.hold(super::worker::Held {
                    op,
                    service: Service::Redis,
                    cycle_start: false,
                    key,
                    pid: None,
                    about,
                    tie: 0,
                });
                tokio::pin!(held);
                loop {
                    tokio::select! {
                        g = &mut held => break g,
                        more = fill(&mut client, &mut from_client, worker) => if !more? { return Ok(()) },
                    }
                }
            };
            if let super::worker::Granted::Fail(cp) = granted {
                worker.complete(Service::Redis, Outcome::Done, vec![]);
                if name == "EXEC" {
                    // The transaction is dropped as a failed EXEC drops it (Redis: EXECABORT).
                    server.write_all(b"*1\r\n$7\r\nDISCARD\r\n").await?;
                    read_one(&mut server, &mut from_server, worker).await?;
                    client
                        .write_all(
                            format!("-EXECABORT {}\r\n", super::worker::injected_error(cp))
                                .as_bytes(),
                        )
                        .await?;
                } else {
                    client
                        .write_all(
                            format!("-ERR {}\r\n", super::worker::injected_error(cp)).as_bytes(),
                        )
                        .await?;
                }
                continue;
            }
        }
        if !gated {
            tracing::debug!(worker = %worker.me, command = %name, "redis proxy: passes ungated");
        }
        let _pending = (!gated).then(|| worker.pending_guard());
        server.write_all(&bytes).await?;
        let (reply, out) = read_one(&mut server, &mut from_server, worker).await?;
        // Recorded before the worker hears the reply, as the other proxies do: a one-call
        // worker's next call then never finds this one in flight.
        if gated {
            let (outcome, facts) = outcome(&name, &args, &reply);
            worker.complete(Service::Redis, outcome, facts);
        }
        client.write_all(&out).await?;
    }
}

/// Reads one complete reply from the server: what it says, and its bytes.
async fn read_one(
    server: &mut TcpStream,
    buf: &mut Vec<u8>,
    worker: &WireWorker,
) -> Result<(Reply, Vec<u8>)> {
    loop {
        if let Some((reply, n)) = read_reply(buf)? {
            return Ok((reply, buf.drain(..n).collect()));
        }
        if !fill(server, buf, worker).await? {
            bail!("Redis closed the connection");
        }
    }
}

/// Whether `EVAL script 1 key token` is a lock's compare-and-delete (its script reads the key
/// and deletes it, as [`crate::sim::cx::COMPARE_AND_DELETE`] and Symfony's RedisStore do).
fn is_compare_and_delete(name: &str, args: &[String]) -> bool {
    let script = args
        .get(1)
        .map(|s| s.to_ascii_lowercase())
        .unwrap_or_default();
    let calls =
        |cmd: &str| script.contains(&format!("'{cmd}'")) || script.contains(&format!("\"{cmd}\""));
    name == "EVAL" && args.get(2).is_some_and(|n| n == "1") && calls("get") && calls("del")
}

fn label(name: &str, args: &[String]) -> &'static str {
    match name {
        "SET" if args.iter().any(|a| a.eq_ignore_ascii_case("NX")) => "lock",
        "DEL" | "UNLINK" => "unlock",
        "EVAL" if is_compare_and_delete(name, args) => "unlock",
        other => super::spec::intern(&other.to_ascii_lowercase()),
    }
}

/// The TTL of a `SET … PX ms | EX s`, ms (0 when none).
fn ttl_ms(args: &[String]) -> u64 {
    let find = |opt: &str| {
        args.iter()
            .position(|a| a.eq_ignore_ascii_case(opt))
            .and_then(|i| args.get(i + 1))
            .and_then(|v| v.parse::<u64>().ok())
    };
    find("PX")
        .or_else(|| find("EX").map(|s| s * 1000))
        .unwrap_or(0)
}

fn outcome(name: &str, args: &[String], reply: &Reply) -> (Outcome, Vec<Fact>) {
    if let Reply::Error(e) = reply {
        return (Outcome::Error { message: e.clone() }, vec![]);
    }
    match name {
        "SET" if args.iter().any(|a| a.eq_ignore_ascii_case("NX")) => {
            let taken = *reply == Reply::Ok;
            let key = args.get(1).cloned().unwrap_or_default();
            let facts = if taken {
                vec![Fact::LockTaken {
                    key,
                    ttl_ms: ttl_ms(args),
                }]
            } else {
                vec![]
            };
            (Outcome::Locked { taken }, facts)
        }
        "DEL" | "UNLINK" => {
            let held = matches!(reply, Reply::Int(n) if *n > 0);
            // Which of several keys went is not in the reply: only when all went are they all
            // released (a key still held keeps its logical expiry).
            let keys = &args[1.min(args.len())..];
            let facts = match reply {
                Reply::Int(n) if *n > 0 && *n as usize == keys.len() => keys
                    .iter()
                    .map(|k| Fact::LockReleased {
                        key: k.clone(),
                        checked: false,
                    })
                    .collect(),
                Reply::Int(n) if *n > 0 => {
                    tracing::warn!(
                        deleted = n,
                        keys = keys.len(),
                        "a DEL of several keys deleted some: none is recorded as released"
                    );
                    vec![]
                }
                _ => vec![],
            };
            (Outcome::Unlocked { held }, facts)
        }
        "EVAL" if is_compare_and_delete(name, args) => {
            let held = matches!(reply, Reply::Int(n) if *n > 0);
            let key = args.get(3).cloned().unwrap_or_default();
            let facts = if held {
                vec![Fact::LockReleased { key, checked: true }]
            } else {
                vec![]
            };
            (Outcome::Unlocked { held }, facts)
        }
        _ => (Outcome::Done, vec![]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_and_replies_frame() {
        let (args, n) = read_command(b"*3\r\n$3\r\nDEL\r\n$1\r\nk\r\n$1\r\nj\r\n*1\r\n")
            .unwrap()
            .unwrap();
        assert_eq!(
            (args, n),
            (vec!["DEL".to_string(), "k".into(), "j".into()], 27)
        );
        assert_eq!(read_command(b"*2\r\n$3\r\nDEL").unwrap(), None);
        assert_eq!(read_reply(b":1\r\n").unwrap(), Some((Reply::Int(1), 4)));
        assert_eq!(read_reply(b"$-1\r\n").unwrap(), Some((Reply::Null, 5)));
        assert_eq!(read_reply(b"_\r\n").unwrap(), Some((Reply::Null, 3)));
    }

    #[test]
    fn lock_and_unlock_become_facts() {
        let set: Vec<String> = ["SET", "k", "1", "NX", "PX", "20000"]
            .map(String::from)
            .to_vec();
        assert_eq!(label("SET", &set), "lock");
        let (o, f) = outcome("SET", &set, &Reply::Ok);
        assert_eq!(
            (o, f),
            (
                Outcome::Locked { taken: true },
                vec![Fact::LockTaken {
                    key: "k".into(),
                    ttl_ms: 20000
                }]
            )
        );
        let (o, f) = outcome("DEL", &["DEL".into(), "k".into()], &Reply::Int(0));
        assert_eq!((o, f), (Outcome::Unlocked { held: false }, vec![]));
        let (o, f) = outcome("DEL", &["DEL".into(), "k".into()], &Reply::Int(1));
        assert_eq!(
            (o, f),
            (
                Outcome::Unlocked { held: true },
                vec![Fact::LockReleased {
                    key: "k".into(),
                    checked: false
                }]
            )
        );
        let cad: Vec<String> = ["EVAL", crate::sim::cx::COMPARE_AND_DELETE, "1", "k", "p.1"]
            .map(String::from)
            .to_vec();
        assert_eq!(label("EVAL", &cad), "unlock");
        let (o, f) = outcome("EVAL", &cad, &Reply::Int(1));
        assert_eq!(
            (o, f),
            (
                Outcome::Unlocked { held: true },
                vec![Fact::LockReleased {
                    key: "k".into(),
                    checked: true
                }]
            )
        );
        let (o, f) = outcome("EVAL", &cad, &Reply::Int(0));
        assert_eq!((o, f), (Outcome::Unlocked { held: false }, vec![]));
        let two: Vec<String> = ["DEL", "k", "j"].map(String::from).to_vec();
        assert_eq!(
            outcome("DEL", &two, &Reply::Int(1)).1,
            vec![],
            "one of two deleted: which is unknown"
        );
        assert_eq!(outcome("DEL", &two, &Reply::Int(2)).1.len(), 2);
        let other: Vec<String> = ["EVAL", "return 1", "0"].map(String::from).to_vec();
        assert_eq!(label("EVAL", &other), "eval");
    }
}
