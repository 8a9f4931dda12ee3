//! Redis as the harness models it: which commands take and release locks, what each command
//! does to a key's expiry on the logical clock, what a call records, and the TTL the real
//! server is given instead of the command's own. One model for both front-ends: the in-process
//! [`crate::sim::cx::Cx`] builds its lock commands as arguments and reads their outcome here;
//! the wire proxy (`crate::sim::wire::redis`) frames a worker's commands and asks the same
//! functions.
//!
//! Expiry follows the Redis documentation ("EXPIRE", "SET"): a key has no expiry unless a
//! command gives it one (`SET … EX|PX|EXAT|PXAT`, `SETEX`, `PSETEX`, `GETEX`, `EXPIRE`,
//! `PEXPIRE`, `EXPIREAT`, `PEXPIREAT`); "the timeout will only be cleared by commands that
//! delete or overwrite the contents of the key, including DEL, SET, GETSET" (and `PERSIST`,
//! `GETEX … PERSIST`); commands that alter a value in place (`INCR`, `HSET`, `LPUSH`, …) and
//! `SET … KEEPTTL` leave it as it was. The logical clock ([`crate::sim::clock`]) is the one
//! authority on when a key with an expiry goes: the real server gets the command's TTL plus
//! [`REAL_TTL_PAD_MS`], so that it never expires a key first, and the scheduler deletes the
//! key when its logical deadline passes.
//!
//! Not modelled: `RENAME`/`RENAMENX` (the destination's expiry), `COPY`, `MOVE`, `RESTORE`,
//! `FLUSHDB`/`FLUSHALL`, and a worker reading a TTL back (`TTL`, `PTTL`, `EXPIRETIME` answer
//! what the real server holds, the pad included).

use crate::record::history::{Expiry, Fact, Outcome};
use crate::record::trace::one_line;

/// Added to every positive TTL a command gives the real server, ms: the real key outlives its
/// logical deadline by an hour, so that only the logical clock expires it (the harness deletes
/// the key then). Added, not substituted, so that `EXPIRE … GT|LT` still compare as written.
pub const REAL_TTL_PAD_MS: u64 = 3_600_000;

/// A server reply, as far as the model reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// A simple string (`+OK`) or a bulk string (a value).
    Ok,
    /// A null reply (nothing set, no such key).
    Null,
    /// An integer reply.
    Int(i64),
    /// An error reply, with its text.
    Error(String),
    /// An array (`EXEC`'s replies, one per queued command).
    Many(Vec<Reply>),
    /// Anything else (a map, a set, a double).
    Other,
}

/// A command's name in upper case: its first argument.
pub fn name(args: &[String]) -> String {
    args.first().map(|a| a.to_ascii_uppercase()).unwrap_or_default()
}

/// Whether `args` has the option `opt` (case-insensitive), after the key.
fn has(args: &[String], opt: &str) -> bool {
    args.iter().skip(2).any(|a| a.eq_ignore_ascii_case(opt))
}

/// The index of option `opt`'s value (the argument after it), after the key.
fn option_value(args: &[String], opt: &str) -> Option<usize> {
    args.iter().enumerate().skip(2).find(|(_, a)| a.eq_ignore_ascii_case(opt)).map(|(i, _)| i + 1).filter(|i| *i < args.len())
}

/// Whether `EVAL script 1 key token` is a lock's compare-and-delete (its script reads the key
/// and deletes it, as [`crate::sim::cx::COMPARE_AND_DELETE`] and Symfony's RedisStore do).
pub fn is_compare_and_delete(args: &[String]) -> bool {
    let script = args.get(1).map(|s| s.to_ascii_lowercase()).unwrap_or_default();
    let calls = |cmd: &str| script.contains(&format!("'{cmd}'")) || script.contains(&format!("\"{cmd}\""));
    name(args) == "EVAL" && args.get(2).is_some_and(|n| n == "1") && calls("get") && calls("del")
}

/// Whether `SET` takes a lock: `SET key value NX …` (the Redis documentation's locking pattern,
/// "SET": `SET resource-name anystring NX EX max-lock-time`).
fn is_lock(args: &[String]) -> bool {
    name(args) == "SET" && has(args, "NX")
}

/// The lock `args` asked for in vain, when it did: the key of a `SET … NX` that Redis refused
/// because the key exists (a null reply; with `GET`, the holder's value). What an armed
/// `redis:lose-lock` ([`crate::nemesis::redis`]) waits for: both front-ends then delete the key
/// at the real server, send the command again, and record [`Fact::LockLost`] before its facts.
pub fn refused_lock<'a>(args: &'a [String], reply: &Reply) -> Option<&'a str> {
    (is_lock(args) && !matches!(reply, Reply::Error(_)) && !wrote(args, reply)).then(|| args[1].as_str())
}

/// The call label a command gets in the trace and as a crash point (`after_<label>`): `lock`
/// for `SET … NX`, `unlock` for `DEL`, `UNLINK` and a compare-and-delete script, else the
/// command's name in lower case.
pub fn label(args: &[String]) -> &'static str {
    match name(args).as_str() {
        "SET" if is_lock(args) => "lock",
        "DEL" | "UNLINK" => "unlock",
        "EVAL" if is_compare_and_delete(args) => "unlock",
        other => crate::spec::intern(&other.to_ascii_lowercase()),
    }
}

/// What a command is about, for a trace line, on one line and uncut (the trace cuts it to
/// [`crate::record::trace::SUBJECT_MAX`] characters once its ids are labels: a cut id would not
/// be known): the keys of an `EVAL`/`EVALSHA` (never its script), else the first argument
/// after the name.
pub fn subject(args: &[String]) -> Option<String> {
    let s = match name(args).as_str() {
        "EVAL" | "EVALSHA" | "FCALL" | "FCALL_RO" => {
            let n: usize = args.get(2)?.parse().ok()?;
            let keys: Vec<&str> = args.iter().skip(3).take(n).map(String::as_str).collect();
            if keys.is_empty() {
                return None;
            }
            keys.join(" ")
        }
        _ => args.get(1)?.clone(),
    };
    Some(one_line(&s, usize::MAX))
}

/// The keys a command writes and what it does to their expiry, from its arguments alone (the
/// reply decides whether it happened: [`outcome`]). Commands that only read, and commands the
/// model does not know, write nothing.
fn writes(args: &[String], wall_ms: u64) -> Vec<(String, Expiry)> {
    let key = |i: usize| args.get(i).cloned();
    let one = |e: Expiry| key(1).map(|k| vec![(k, e)]).unwrap_or_default();
    let n = name(args);
    match n.as_str() {
        "SET" => one(set_expiry(args, wall_ms)),
        "SETNX" | "GETSET" | "GETDEL" | "PERSIST" => one(Expiry::Never),
        "SETEX" => one(relative(args.get(2), 1000)),
        "PSETEX" => one(relative(args.get(2), 1)),
        "GETEX" => one(getex_expiry(args, wall_ms)),
        "EXPIRE" => one(relative(args.get(2), 1000)),
        "PEXPIRE" => one(relative(args.get(2), 1)),
        "EXPIREAT" => one(absolute(args.get(2), 1000, wall_ms)),
        "PEXPIREAT" => one(absolute(args.get(2), 1, wall_ms)),
        "DEL" | "UNLINK" => args.iter().skip(1).map(|k| (k.clone(), Expiry::Never)).collect(),
        "MSET" | "MSETNX" => args.iter().skip(1).step_by(2).map(|k| (k.clone(), Expiry::Never)).collect(),
        "EVAL" | "EVALSHA" | "FCALL" => {
            let n: usize = args.get(2).and_then(|n| n.parse().ok()).unwrap_or(0);
            args.iter().skip(3).take(n).map(|k| (k.clone(), Expiry::Keep)).collect()
        }
        "SMOVE" | "LMOVE" | "RPOPLPUSH" | "BLMOVE" | "BRPOPLPUSH" => {
            args.iter().skip(1).take(2).map(|k| (k.clone(), Expiry::Keep)).collect()
        }
        "XGROUP" => key(2).map(|k| vec![(k, Expiry::Keep)]).unwrap_or_default(),
        other if KEEPS_EXPIRY.contains(&other) => one(Expiry::Keep),
        _ => vec![],
    }
}

/// Commands that change the value at `args[1]` in place and leave its expiry as it was (Redis
/// documentation, "EXPIRE": "all the operations that conceptually alter the value stored at
/// the key without replacing it with a new one will leave the timeout untouched").
const KEEPS_EXPIRY: &[&str] = &[
    "APPEND", "INCR", "INCRBY", "INCRBYFLOAT", "DECR", "DECRBY", "SETRANGE", "SETBIT", "HSET", "HSETNX", "HMSET",
    "HINCRBY", "HINCRBYFLOAT", "HDEL", "LPUSH", "RPUSH", "LPUSHX", "RPUSHX", "LPOP", "RPOP", "LSET", "LREM", "LTRIM",
    "LINSERT", "SADD", "SREM", "SPOP", "ZADD", "ZINCRBY", "ZREM", "ZPOPMIN", "ZPOPMAX", "PFADD", "XADD", "XDEL",
    "XTRIM", "XACK", "XCLAIM", "XAUTOCLAIM",
];

/// A relative TTL argument in `unit` ms (1000 for seconds): expires that long from now; a
/// non-positive one deletes the key (Redis documentation, "EXPIRE").
fn relative(v: Option<&String>, unit: u64) -> Expiry {
    match v.and_then(|v| v.parse::<i64>().ok()) {
        Some(t) if t > 0 => Expiry::In((t as u64).saturating_mul(unit)),
        Some(_) => Expiry::Never,
        None => Expiry::Keep,
    }
}

/// An absolute deadline in `unit` ms since the Unix epoch (wall time, as the worker's clock
/// gave it), as a logical TTL: its distance from the wall clock now, rounded up to whole
/// seconds so that the few ms between the worker's reading and the proxy's do not show; a
/// deadline in the past deletes the key.
fn absolute(v: Option<&String>, unit: u64, wall_ms: u64) -> Expiry {
    match v.and_then(|v| v.parse::<u64>().ok()) {
        Some(at) => {
            let at_ms = at.saturating_mul(unit);
            match at_ms.checked_sub(wall_ms) {
                Some(d) if d > 0 => Expiry::In(d.div_ceil(1000) * 1000),
                _ => Expiry::Never,
            }
        }
        None => Expiry::Keep,
    }
}

/// The expiry a `SET` gives its key: its `EX`, `PX`, `EXAT` or `PXAT`; kept with `KEEPTTL`;
/// none otherwise.
fn set_expiry(args: &[String], wall_ms: u64) -> Expiry {
    let at = |opt| option_value(args, opt).map(|i| &args[i]);
    if let Some(v) = at("EX") {
        relative(Some(v), 1000)
    } else if let Some(v) = at("PX") {
        relative(Some(v), 1)
    } else if let Some(v) = at("EXAT") {
        absolute(Some(v), 1000, wall_ms)
    } else if let Some(v) = at("PXAT") {
        absolute(Some(v), 1, wall_ms)
    } else if has(args, "KEEPTTL") {
        Expiry::Keep
    } else {
        Expiry::Never
    }
}

/// The expiry a `GETEX` gives its key: as `SET`'s options, `PERSIST` clears it, no option
/// keeps it.
fn getex_expiry(args: &[String], wall_ms: u64) -> Expiry {
    if has(args, "PERSIST") {
        return Expiry::Never;
    }
    match set_expiry(args, wall_ms) {
        Expiry::Never => Expiry::Keep,
        e => e,
    }
}

/// The arguments to send the real server instead, by index: each positive TTL of a command
/// plus [`REAL_TTL_PAD_MS`] (in the command's own unit), so that only the logical clock
/// expires the key. Empty when the command is sent as it is.
pub fn real_args(args: &[String]) -> Vec<(usize, String)> {
    let pad = |i: usize, unit: u64| -> Option<(usize, String)> {
        let v: i64 = args.get(i)?.parse().ok()?;
        (v > 0).then(|| (i, (v as u64).saturating_add(REAL_TTL_PAD_MS / unit).to_string()))
    };
    let option = |opt: &str, unit: u64| option_value(args, opt).and_then(|i| pad(i, unit));
    let n = name(args);
    let one = match n.as_str() {
        "SET" | "GETEX" => {
            option("EX", 1000).or_else(|| option("PX", 1)).or_else(|| option("EXAT", 1000)).or_else(|| option("PXAT", 1))
        }
        "SETEX" | "EXPIRE" | "EXPIREAT" => pad(2, 1000),
        "PSETEX" | "PEXPIRE" | "PEXPIREAT" => pad(2, 1),
        _ => None,
    };
    one.into_iter().collect()
}

/// Whether a command's reply says it wrote: an integer reply counts the keys it changed
/// (`SETNX`, `EXPIRE`, `PERSIST`, `MSETNX`: 0 is nothing), a null reply is no write (a
/// `SET NX` refused, a `GETEX` of no key); with `SET … GET` the reply is the old value, so
/// `NX` wrote when there was none and `XX` when there was one.
fn wrote(args: &[String], reply: &Reply) -> bool {
    let n = name(args);
    match (n.as_str(), reply) {
        (_, Reply::Error(_)) => false,
        ("SET", r) if has(args, "GET") => match (has(args, "NX"), has(args, "XX")) {
            (true, _) => *r == Reply::Null,
            (_, true) => *r != Reply::Null,
            _ => true,
        },
        ("SETNX" | "EXPIRE" | "PEXPIRE" | "EXPIREAT" | "PEXPIREAT" | "PERSIST" | "MSETNX", Reply::Int(0)) => false,
        (_, Reply::Null) => !matches!(n.as_str(), "SET" | "GETEX" | "GETDEL"),
        _ => true,
    }
}

/// What a command did, from its arguments, the server's reply and the wall clock (ms since
/// the Unix epoch, for `EXAT`/`PXAT`): its outcome, and its facts: [`Fact::LockTaken`] for a
/// lock taken, [`Fact::LockReleased`] for a lock released, and a [`Fact::KeyWritten`] for
/// every key written with what that did to its expiry.
pub fn outcome(args: &[String], reply: &Reply, wall_ms: u64) -> (Outcome, Vec<Fact>) {
    if let Reply::Error(e) = reply {
        return (Outcome::Error { message: e.clone() }, vec![]);
    }
    let wrote = wrote(args, reply);
    let mut facts: Vec<Fact> = Vec::new();
    let n = name(args);
    let outcome = if is_lock(args) {
        if wrote {
            let ttl_ms = match set_expiry(args, wall_ms) {
                Expiry::In(ms) => Some(ms),
                Expiry::Keep | Expiry::Never => None,
            };
            facts.push(Fact::LockTaken { key: args[1].clone(), ttl_ms });
        }
        Outcome::Locked { taken: wrote }
    } else if n == "DEL" || n == "UNLINK" {
        let held = matches!(reply, Reply::Int(n) if *n > 0);
        // Which of several keys went is not in the reply: only when all went are they all
        // released (a key still held keeps its lock, and its expiry goes with the key).
        let keys = &args[1.min(args.len())..];
        match reply {
            Reply::Int(n) if *n > 0 && *n as usize == keys.len() => {
                facts.extend(keys.iter().map(|k| Fact::LockReleased { key: k.clone(), checked: false }))
            }
            Reply::Int(n) if *n > 0 => {
                tracing::warn!(deleted = n, keys = keys.len(), "a DEL of several keys deleted some: none is recorded as released")
            }
            _ => {}
        }
        Outcome::Unlocked { held }
    } else if is_compare_and_delete(args) {
        let held = matches!(reply, Reply::Int(n) if *n > 0);
        if held {
            facts.push(Fact::LockReleased { key: args[3].clone(), checked: true });
        }
        return (Outcome::Unlocked { held }, facts);
    } else {
        Outcome::Done
    };
    if wrote {
        let written = writes(args, wall_ms);
        let locked = |k: &str| facts.iter().any(|f| matches!(f, Fact::LockTaken { key, .. } if key == k));
        let extra: Vec<Fact> = written
            .into_iter()
            .filter(|(k, _)| !locked(k))
            .map(|(key, expiry)| Fact::KeyWritten { key, expiry })
            .collect();
        facts.extend(extra);
    }
    (outcome, facts)
}

/// What a transaction did (`MULTI`, the `queued` commands, `EXEC`, as one call: Redis
/// documentation, "Transactions"): each queued command's facts from its own reply in EXEC's
/// array; nothing when EXEC was refused (a null reply: a `WATCH`ed key changed) or failed.
pub fn exec(queued: &[Vec<String>], reply: &Reply, wall_ms: u64) -> (Outcome, Vec<Fact>) {
    match reply {
        Reply::Error(e) => (Outcome::Error { message: e.clone() }, vec![]),
        Reply::Many(replies) => {
            let facts = queued.iter().zip(replies).flat_map(|(args, r)| outcome(args, r, wall_ms).1).collect();
            (Outcome::Done, facts)
        }
        _ => (Outcome::Done, vec![]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(s: &str) -> Vec<String> {
        s.split(' ').map(String::from).collect()
    }

    /// The facts of `cmd` answered `reply` at wall time 1,000,000,000 ms.
    fn facts(cmd: &str, reply: Reply) -> Vec<Fact> {
        outcome(&a(cmd), &reply, 1_000_000_000).1
    }

    fn written(key: &str, expiry: Expiry) -> Vec<Fact> {
        vec![Fact::KeyWritten { key: key.into(), expiry }]
    }

    #[test]
    fn a_lock_without_an_expiry_has_none() {
        assert_eq!(facts("SET k 1 NX", Reply::Ok), vec![Fact::LockTaken { key: "k".into(), ttl_ms: None }]);
        // A lock asked for in vain, and only that, is what `redis:lose-lock` waits for.
        let refused = |cmd: &str, reply: Reply| refused_lock(&a(cmd), &reply).map(str::to_string);
        assert_eq!(refused("SET k 1 NX PX 20000", Reply::Null), Some("k".into()));
        assert_eq!(refused("SET k 1 NX PX 20000", Reply::Ok), None, "taken");
        assert_eq!(refused("SET k 1 NX GET", Reply::Ok), Some("k".into()), "with GET the holder's value says it was held");
        assert_eq!(refused("SET k 1 NX GET", Reply::Null), None);
        assert_eq!(refused("SET k 1 PX 20000", Reply::Null), None, "no NX: no lock");
        assert_eq!(refused("SET k 1 NX", Reply::Error("READONLY".into())), None, "an error is not a refusal");
        assert_eq!(facts("SET k 1 NX PX 20000", Reply::Ok), vec![Fact::LockTaken { key: "k".into(), ttl_ms: Some(20_000) }]);
        assert_eq!(facts("SET k 1 NX EX 20", Reply::Ok), vec![Fact::LockTaken { key: "k".into(), ttl_ms: Some(20_000) }]);
        assert_eq!(facts("SET k 1 NX EX 20", Reply::Null), vec![], "refused: nothing taken");
        assert_eq!(label(&a("SET k 1 NX")), "lock");
    }

    #[test]
    fn each_form_of_expiry_is_read_as_redis_documents_it() {
        assert_eq!(facts("SET k v", Reply::Ok), written("k", Expiry::Never));
        assert_eq!(facts("SET k v EX 10", Reply::Ok), written("k", Expiry::In(10_000)));
        assert_eq!(facts("SET k v px 1500", Reply::Ok), written("k", Expiry::In(1_500)));
        assert_eq!(facts("SET k v EXAT 1000030", Reply::Ok), written("k", Expiry::In(30_000)));
        assert_eq!(facts("SET k v PXAT 1000029001", Reply::Ok), written("k", Expiry::In(30_000)), "rounded up to whole seconds");
        assert_eq!(facts("SET k v EXAT 999999", Reply::Ok), written("k", Expiry::Never), "in the past: gone");
        assert_eq!(facts("SET k v KEEPTTL", Reply::Ok), written("k", Expiry::Keep));
        assert_eq!(facts("SET k v XX", Reply::Null), vec![], "XX on no key: nothing written");
        assert_eq!(facts("SET k v NX GET", Reply::Ok), vec![], "NX GET answered an old value: not set");
        assert_eq!(facts("SETNX k v", Reply::Int(1)), written("k", Expiry::Never));
        assert_eq!(facts("SETNX k v", Reply::Int(0)), vec![]);
        assert_eq!(facts("SETEX k 5 v", Reply::Ok), written("k", Expiry::In(5_000)));
        assert_eq!(facts("PSETEX k 5 v", Reply::Ok), written("k", Expiry::In(5)));
        assert_eq!(facts("GETSET k v", Reply::Null), written("k", Expiry::Never));
        assert_eq!(facts("GETEX k", Reply::Ok), written("k", Expiry::Keep));
        assert_eq!(facts("GETEX k PERSIST", Reply::Ok), written("k", Expiry::Never));
        assert_eq!(facts("GETEX k EX 7", Reply::Ok), written("k", Expiry::In(7_000)));
        assert_eq!(facts("GETEX k EX 7", Reply::Null), vec![], "no such key");
        assert_eq!(facts("EXPIRE k 60", Reply::Int(1)), written("k", Expiry::In(60_000)));
        assert_eq!(facts("EXPIRE k 60 NX", Reply::Int(0)), vec![], "not set: the condition did not hold");
        assert_eq!(facts("EXPIRE k 0", Reply::Int(1)), written("k", Expiry::Never), "a non-positive timeout deletes the key");
        assert_eq!(facts("PEXPIRE k 60", Reply::Int(1)), written("k", Expiry::In(60)));
        assert_eq!(facts("EXPIREAT k 1000100", Reply::Int(1)), written("k", Expiry::In(100_000)));
        assert_eq!(facts("PEXPIREAT k 1000100000", Reply::Int(1)), written("k", Expiry::In(100_000)));
        assert_eq!(facts("PERSIST k", Reply::Int(1)), written("k", Expiry::Never));
        assert_eq!(facts("PERSIST k", Reply::Int(0)), vec![]);
        assert_eq!(facts("INCR k", Reply::Int(4)), written("k", Expiry::Keep));
        assert_eq!(facts("HSET h f v", Reply::Int(1)), written("h", Expiry::Keep));
        assert_eq!(facts("GET k", Reply::Ok), vec![], "a read writes nothing");
        assert_eq!(
            facts("MSET a 1 b 2", Reply::Ok),
            vec![Fact::KeyWritten { key: "a".into(), expiry: Expiry::Never }, Fact::KeyWritten { key: "b".into(), expiry: Expiry::Never }]
        );
        assert_eq!(facts("SET k v EX 10", Reply::Error("ERR".into())), vec![]);
    }

    #[test]
    fn a_transaction_records_each_queued_command_from_its_own_reply() {
        let queued = vec![a("SET k v EX 10"), a("INCR n"), a("SETNX j v")];
        let (o, f) = exec(&queued, &Reply::Many(vec![Reply::Ok, Reply::Int(1), Reply::Int(0)]), 0);
        assert_eq!(o, Outcome::Done);
        assert_eq!(f, vec![Fact::KeyWritten { key: "k".into(), expiry: Expiry::In(10_000) }, Fact::KeyWritten { key: "n".into(), expiry: Expiry::Keep }]);
        assert_eq!(exec(&queued, &Reply::Null, 0), (Outcome::Done, vec![]), "a WATCHed key changed: nothing ran");
    }

    #[test]
    fn deletes_release_locks_and_clear_expiries() {
        let (o, f) = outcome(&a("DEL k"), &Reply::Int(1), 0);
        assert_eq!(o, Outcome::Unlocked { held: true });
        assert_eq!(f, vec![Fact::LockReleased { key: "k".into(), checked: false }, Fact::KeyWritten { key: "k".into(), expiry: Expiry::Never }]);
        let (o, f) = outcome(&a("DEL k"), &Reply::Int(0), 0);
        assert_eq!((o, f), (Outcome::Unlocked { held: false }, written("k", Expiry::Never)));
        let f = outcome(&a("DEL k j"), &Reply::Int(1), 0).1;
        assert!(!f.iter().any(|f| matches!(f, Fact::LockReleased { .. })), "one of two deleted: which is unknown");
        assert_eq!(outcome(&a("DEL k j"), &Reply::Int(2), 0).1.len(), 4);
        let cad: Vec<String> = ["EVAL", crate::sim::cx::COMPARE_AND_DELETE, "1", "k", "p.1"].map(String::from).to_vec();
        assert_eq!(label(&cad), "unlock");
        assert_eq!(outcome(&cad, &Reply::Int(1), 0), (Outcome::Unlocked { held: true }, vec![Fact::LockReleased { key: "k".into(), checked: true }]));
        assert_eq!(outcome(&cad, &Reply::Int(0), 0), (Outcome::Unlocked { held: false }, vec![]));
        assert_eq!(label(&a("EVAL return 0")), "eval");
    }

    #[test]
    fn the_real_server_gets_each_ttl_an_hour_longer() {
        assert_eq!(real_args(&a("SET k v NX PX 20000")), vec![(5, "3620000".to_string())]);
        assert_eq!(real_args(&a("SET k v EX 20")), vec![(4, "3620".to_string())]);
        assert_eq!(real_args(&a("SET k v EXAT 1000030")), vec![(4, "1003630".to_string())]);
        assert_eq!(real_args(&a("SETEX k 5 v")), vec![(2, "3605".to_string())]);
        assert_eq!(real_args(&a("PEXPIRE k 10")), vec![(2, "3600010".to_string())]);
        assert_eq!(real_args(&a("EXPIRE k 0")), vec![], "a delete stays a delete");
        assert_eq!(real_args(&a("SET k v")), vec![]);
        assert_eq!(real_args(&a("SET k v KEEPTTL")), vec![]);
    }

    #[test]
    fn a_subject_is_one_short_line() {
        let script = "if redis.call('GET', KEYS[1]) == ARGV[1]\nthen\n  return redis.call('DEL', KEYS[1])\nelse return 0 end";
        let cad: Vec<String> = ["EVAL", script, "1", "lock:wallet:7", "t"].map(String::from).to_vec();
        assert_eq!(subject(&cad).as_deref(), Some("lock:wallet:7"));
        assert_eq!(subject(&a("EVALSHA abc 0")), None);
        assert_eq!(subject(&a("GET k")).as_deref(), Some("k"));
        assert_eq!(one_line("a\n  b", 10), "a b");
        let max = crate::record::trace::SUBJECT_MAX;
        assert_eq!(one_line(&"x".repeat(60), max).chars().count(), max + 1);
    }
}
