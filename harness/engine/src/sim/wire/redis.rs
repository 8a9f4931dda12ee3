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
use crate::sim::model::redis::{self as model, Reply};
use crate::nemesis::redis::RedisFault;
use crate::record::history::{Fact, Outcome, Service};

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
        let watched = worker.watch(&client);
        tokio::task::spawn_local(async move {
            let _watched = watched;
            let r = relay(client, &upstream, &worker).await;
            worker.task_ended();
            if let Err(e) = r {
                tracing::debug!(worker = %worker.me, error = %e, "redis proxy connection ended");
            }
        });
    }
}

/// One reply from `buf` with the length of its frame, `None` while it is incomplete. An array
/// (an `EXEC`'s replies) is read one level deep.
fn read_reply(buf: &[u8]) -> Result<Option<(Reply, usize)>> {
    fn v2(f: Resp2) -> Reply {
        match f {
            Resp2::SimpleString(_) | Resp2::BulkString(_) => Reply::Ok,
            Resp2::Null => Reply::Null,
            Resp2::Integer(i) => Reply::Int(i),
            Resp2::Error(e) => Reply::Error(e),
            Resp2::Array(items) => Reply::Many(items.into_iter().map(v2).collect()),
        }
    }
    fn v3(f: Resp3) -> Reply {
        match f {
            Resp3::SimpleString { .. } | Resp3::BlobString { .. } | Resp3::VerbatimString { .. } => Reply::Ok,
            Resp3::Null => Reply::Null,
            Resp3::Number { data, .. } => Reply::Int(data),
            Resp3::SimpleError { data, .. } => Reply::Error(data),
            Resp3::BlobError { data, .. } => Reply::Error(String::from_utf8_lossy(&data).into_owned()),
            Resp3::Array { data, .. } => Reply::Many(data.into_iter().map(v3).collect()),
            _ => Reply::Other,
        }
    }
    if let Ok(r) = redis_protocol::resp2::decode::decode(buf) {
        return Ok(r.map(|(f, n)| (v2(f), n)));
    }
    let r = redis_protocol::resp3::decode::complete::decode(buf).map_err(|e| anyhow!("malformed reply from Redis: {e:?}"))?;
    Ok(r.map(|(f, n)| (v3(f), n)))
}

/// A command from the client: its arguments (lossy UTF-8), each argument's bytes, and the
/// length of its frame.
type Command = (Vec<String>, Vec<Vec<u8>>, usize);

fn read_command(buf: &[u8]) -> Result<Option<Command>> {
    match redis_protocol::resp2::decode::decode(buf).map_err(|e| anyhow!("malformed command: {e:?}"))? {
        None => Ok(None),
        Some((Resp2::Array(parts), n)) => {
            let raw: Vec<Vec<u8>> = parts
                .into_iter()
                .map(|p| match p {
                    Resp2::BulkString(b) | Resp2::SimpleString(b) => b.to_vec(),
                    other => format!("{other:?}").into_bytes(),
                })
                .collect();
            let args = raw.iter().map(|b| String::from_utf8_lossy(b).into_owned()).collect();
            Ok(Some((args, raw, n)))
        }
        Some((other, _)) => bail!("expected a command (an array of bulk strings), got {other:?} (inline commands are not relayed)"),
    }
}

/// A command as an array of bulk strings (RESP2, which every server reads), `raw` with the
/// arguments `replace` names by index replaced.
fn encode(mut raw: Vec<Vec<u8>>, replace: Vec<(usize, String)>) -> Vec<u8> {
    for (i, v) in replace {
        raw[i] = v.into_bytes();
    }
    let mut out = format!("*{}\r\n", raw.len()).into_bytes();
    for a in raw {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(&a);
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// The wall clock, ms since the Unix epoch (for `EXAT`/`PXAT`, which a worker computes from it).
fn wall_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
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
    // A reply goes out at once, even behind another one the worker has not acknowledged yet
    // (pipelined commands of a concurrent worker): without it, Nagle's algorithm may hold it
    // until the worker's delayed ACK, tens of ms of real time in which the worker seems still.
    client.set_nodelay(true)?;
    server.set_nodelay(true)?;
    let (mut from_client, mut from_server) = (Vec::new(), Vec::new());
    let mut in_multi = false;
    // The commands queued in the current MULTI: EXEC's reply answers each in order.
    let mut queued: Vec<Vec<String>> = Vec::new();
    loop {
        let (args, raw, n) = loop {
            if let Some(c) = read_command(&from_client)? {
                break c;
            }
            if !fill(&mut client, &mut from_client, worker).await? {
                return Ok(()); // the worker closed (or died): drop the upstream at once
            }
        };
        let mut bytes: Vec<u8> = from_client.drain(..n).collect();
        let name = model::name(&args);
        // Handshake and health traffic passes, and so do the commands queued in a MULTI: the
        // transaction is one call, gated at its EXEC.
        let queued_in_multi = in_multi && name != "EXEC";
        let gated = !(PASS.contains(&name.as_str()) || queued_in_multi);
        if in_multi && !["EXEC", "DISCARD", "MULTI"].contains(&name.as_str()) {
            queued.push(args.clone());
        }
        if name == "MULTI" || name == "DISCARD" {
            queued.clear();
        }
        in_multi = (in_multi || name == "MULTI") && name != "EXEC" && name != "DISCARD";
        let op = worker
            .ext
            .label_of(&name, false)
            .unwrap_or_else(|| model::label(&args));
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
                    .then(|| model::subject(&args))
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
                            format!("-EXECABORT {}\r\n", super::worker::injected_error(op, cp))
                                .as_bytes(),
                        )
                        .await?;
                } else {
                    client
                        .write_all(
                            format!("-ERR {}\r\n", super::worker::injected_error(op, cp)).as_bytes(),
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
        // Gated or queued in a MULTI: the real server gets each TTL padded, the logical clock
        // expires the key.
        let key = raw.get(1).cloned().unwrap_or_default();
        let replace = model::real_args(&args);
        if !replace.is_empty() {
            bytes = encode(raw, replace);
        }
        let wall = wall_ms();
        server.write_all(&bytes).await?;
        let (mut reply, mut out) = read_one(&mut server, &mut from_server, worker).await?;
        let mut lost = Vec::new();
        // An armed `redis:lose-lock` takes the first lock asked for in vain: the holder's key
        // goes (the proxy's own DEL, never the worker's), and the command is sent again.
        if let Some(lost_key) = model::refused_lock(&args, &reply).filter(|_| gated) {
            if worker.world.borrow_mut().redis.take(RedisFault::LoseLock) {
                // The key as the worker sent it (its bytes, not their lossy text).
                server.write_all(&encode(vec![b"DEL".to_vec(), key.clone()], vec![])).await?;
                read_one(&mut server, &mut from_server, worker).await?;
                lost.push(Fact::LockLost { key: lost_key.to_string() });
                server.write_all(&bytes).await?;
                (reply, out) = read_one(&mut server, &mut from_server, worker).await?;
            }
        }
        // Recorded before the worker hears the reply, as the other proxies do: a one-call
        // worker's next call then never finds this one in flight.
        if gated {
            let (outcome, facts) = match name.as_str() {
                "EXEC" => model::exec(&std::mem::take(&mut queued), &reply, wall),
                _ => model::outcome(&args, &reply, wall),
            };
            lost.extend(facts);
            worker.complete(Service::Redis, outcome, lost);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_and_replies_frame() {
        let (args, _, n) = read_command(b"*3\r\n$3\r\nDEL\r\n$1\r\nk\r\n$1\r\nj\r\n*1\r\n")
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
    fn a_command_with_a_padded_ttl_is_framed_again_with_its_other_bytes_unchanged() {
        let raw: Vec<Vec<u8>> = vec![b"SET".to_vec(), b"k".to_vec(), vec![0xff, 0x00, b'\r'], b"PX".to_vec(), b"20000".to_vec()];
        let out = encode(raw, vec![(4, "3620000".into())]);
        let (args, raw, n) = read_command(&out).unwrap().unwrap();
        assert_eq!(n, out.len());
        assert_eq!(args[4], "3620000");
        assert_eq!(raw[2], vec![0xff, 0x00, b'\r'], "a binary value is sent as it came");
    }
}
