//! The trace: one line per step, in logical-time order.
//!
//! ```text
//!    0.000s  c2   claim                  ⧗ blocked by c1
//!    0.000s  c1   commit                 → ok
//!   31.000s  ~    visibility timeout of m1 expired: it can be received again
//! ```
//! Columns: logical time (s), worker (or `~` for the nemesis), the call, the crash point the
//! worker stood at (in brackets), and the result. Nothing in it depends on wall-clock time.

use std::fmt::Write;

use crate::duration::format_instant_ms;
use crate::schedule::format_duration_ms;
use crate::record::history::{Entry, FaultEvent, History, Outcome, Step};

/// Width of the seconds column: 4 digits, or more when the history's logical time needs them
/// (a 15-day tick reaches 7), so that every line of one trace keeps its columns aligned.
fn seconds_width(history: &History) -> usize {
    let max_s = history.entries.iter().map(t_ms_of).max().unwrap_or(0) / 1000;
    max_s.to_string().len().max(4)
}

fn t_ms_of(e: &Entry) -> u64 {
    match e {
        Entry::Step(s) => s.t_ms,
        Entry::Blocked { t_ms, .. } | Entry::Crash { t_ms, .. } | Entry::Restart { t_ms, .. } | Entry::Fault { t_ms, .. } | Entry::Note { t_ms, .. } => *t_ms,
    }
}

fn t(ms: u64, width: usize) -> String {
    format!("{:>width$}.{:03}s", ms / 1000, ms % 1000)
}

fn plural(n: u64, what: &str) -> String {
    if n == 1 { format!("1 {what}") } else { format!("{n} {what}s") }
}

/// The longest subject a trace line gives a call (what it is about), characters.
pub const SUBJECT_MAX: usize = 48;

/// `s` on one line (line breaks and runs of white space as one space), cut to `max`
/// characters with `…`.
pub fn one_line(s: &str, max: usize) -> String {
    let flat = s.split_whitespace().collect::<Vec<_>>().join(" ");
    match flat.char_indices().nth(max) {
        Some((cut, _)) => format!("{}…", &flat[..cut]),
        None => flat,
    }
}

/// A step's outcome in words, e.g. `1 row`, `m1 (receive 2)`, `✗ injected failure at …`.
pub fn outcome_text(s: &Step) -> String {
    match &s.outcome {
        Outcome::Done => "ok".into(),
        Outcome::Affected { n } | Outcome::Fetched { n } => plural(*n, "row"),
        Outcome::Returned { row: true } => "1 row".into(),
        Outcome::Returned { row: false } => "no row".into(),
        Outcome::Received { msg, receive_count } => format!("{msg} (receive {receive_count})"),
        Outcome::ReceiveLost { msg, receive_count } => {
            format!("empty: {msg} (receive {receive_count}) lost on its way (sqs:receive-lost)")
        }
        Outcome::ReceivedBatch { msgs, lost } => {
            let list: Vec<String> = msgs.iter().map(|(m, n)| format!("{m} (receive {n})")).collect();
            match lost {
                false => list.join(", "),
                true => format!("empty: {} lost on their way (sqs:receive-lost)", list.join(", ")),
            }
        }
        Outcome::BatchDeleted { deleted, kept, failed } => {
            let mut parts: Vec<String> = deleted.iter().map(|m| format!("{m} deleted")).collect();
            parts.extend(kept.iter().map(|m| format!("{m} not deleted: stale receipt handle")));
            parts.extend(failed.iter().map(|(m, code)| format!("{m} failed ({code})")));
            parts.join(", ")
        }
        Outcome::BatchSent { sent, suppressed, failed } => {
            let mut parts: Vec<String> = sent.iter().map(|(m, who)| format!("{m} ({who})")).collect();
            parts.extend(suppressed.iter().map(|(m, who)| format!("{who} dropped: FIFO deduplication ({m})")));
            parts.extend(failed.iter().map(|(id, code)| format!("entry {id} failed ({code})")));
            parts.join(", ")
        }
        Outcome::BatchHidden { hidden, failed } => {
            let mut parts: Vec<String> = hidden.iter().map(|(m, secs)| format!("{m} visible again in {secs}s")).collect();
            parts.extend(failed.iter().map(|(m, code)| format!("{m} failed ({code})")));
            parts.join(", ")
        }
        Outcome::Empty => "empty".into(),
        Outcome::Sent { msg, who } => format!("{msg} ({who})"),
        Outcome::Suppressed { msg, who, first_ms } => format!(
            "ok, dropped: FIFO deduplication ({who} was accepted as {msg} at {}, less than 5 min before)",
            crate::duration::format_instant_ms(*first_ms)
        ),
        Outcome::Deleted { msg, stale: false } => format!("{msg} deleted"),
        Outcome::Deleted { msg, stale: true } => format!("{msg} deleted with a stale receipt handle (AWS may keep it)"),
        Outcome::NotDeleted { msg } => format!("ok, but {msg} is not deleted: stale receipt handle"),
        Outcome::Hidden { msg, secs } => format!("{msg} visible again in {secs}s"),
        Outcome::Locked { taken: true } => "acquired".into(),
        Outcome::Locked { taken: false } => "held elsewhere".into(),
        Outcome::Unlocked { held: true } => "released".into(),
        Outcome::Unlocked { held: false } => "not held".into(),
        Outcome::Injected { at } => format!("✗ injected failure at {at}: `{}` not made", s.op),
        Outcome::ServiceErrorInjected { at } => format!("✗ service error injected at {at}: `{}` answered by the proxy, not made", s.op),
        Outcome::Error { message } => format!("error: {message}"),
        Outcome::Http { provider, status } => format!("{provider} → {status}"),
        Outcome::NoResponse { why, .. } => format!("no response: {why} (outcome unknown)"),
        Outcome::Delivered { provider, event, attempt } => format!("{provider} delivers {event} (delivery {attempt})"),
        Outcome::Answered { provider, status: Some(s) } => format!("{s} to {provider}"),
        Outcome::Answered { provider, status: None } => format!("no answer reached {provider} (its lane says why)"),
    }
}

/// What the nemesis did, in words.
pub fn fault_text(f: &FaultEvent) -> String {
    match f {
        FaultEvent::Skipped { decision, why } => format!("skipped `{decision}`: {why}"),
        FaultEvent::Armed { worker, kind, at, why } => {
            format!("{worker}:{kind}@{at} armed: {why}; it fires when {worker} next gets there")
        }
        FaultEvent::ArmedFires { worker, at } => format!("armed crash of {worker} at {at} fires"),
        FaultEvent::Clock { ms, drain: false } => format!("clock +{}", format_duration_ms(*ms)),
        FaultEvent::Clock { ms, drain: true } => format!("drain: clock +{}", format_duration_ms(*ms)),
        FaultEvent::Pause { ms } => format!("pause: {} of real time for the workers' own timers", format_duration_ms(*ms)),
        FaultEvent::VisibilityExpired { msg, found: true } => format!("visibility timeout of {msg} expired: it can be received again"),
        FaultEvent::VisibilityExpired { msg, found: false } => format!("visibility timeout of {msg} expired (SQS no longer has it)"),
        FaultEvent::Expired { msg, queue, retention_ms, found } => format!(
            "{msg} outlived the message retention of {queue} ({}): {}",
            format_duration_ms(*retention_ms),
            if *found { "SQS deleted it unprocessed" } else { "SQS no longer had it" }
        ),
        FaultEvent::DeadLettered { msg, copy, from, to, receive_count, enqueued_ms, expires_ms } => format!(
            "{msg} was received {}, its queue's maxReceiveCount: at this receive from {from} SQS moved it to {to} as \
             {copy} with its enqueue time ({}), so it expires there at {}, {} after it was first sent",
            match receive_count {
                1 => "once".to_string(),
                2 => "twice".to_string(),
                n => format!("{n} times"),
            },
            format_instant_ms(*enqueued_ms),
            format_instant_ms(*expires_ms),
            format_duration_ms(expires_ms.saturating_sub(*enqueued_ms))
        ),
        FaultEvent::Redriven { msg, from, to, copy } => {
            format!("redrive: {msg} moved from {from} back to {to} as {copy}, a new message with a new enqueue time")
        }
        FaultEvent::LockExpired { key } => format!("lock {key} expired"),
        FaultEvent::KeyExpired { key } => format!("key {key} expired"),
        FaultEvent::RedisRestart { locks, keys: 0 } => format!("redis restarted: {locks} lock(s) lost"),
        FaultEvent::RedisRestart { locks, keys } => format!("redis restarted: {locks} lock(s) and {keys} other key(s) lost"),
        FaultEvent::Dispatch { producer, event } => format!("{producer} will dispatch {event} again"),
        FaultEvent::Sqs { text, .. } | FaultEvent::Pg { text, .. } | FaultEvent::Redis { text, .. } | FaultEvent::Workload { text, .. } => {
            text.clone()
        }
        FaultEvent::LockLost { key, by } => {
            format!("redis:lose-lock: lock {key} was held when {by} asked for it: lost (a failover), and {by} takes it")
        }
        FaultEvent::Net { name, text } => format!("{name}: {text}"),
        FaultEvent::Redelivered { msg } => format!("{msg} delivered once more after its delete (sqs:redeliver-after-delete)"),
        FaultEvent::Lag { worker, before } => {
            format!("{worker} falls behind: in the drain it waits before its next {before} until no other worker can step")
        }
        FaultEvent::CatchUp { workers, idle } => {
            let mut parts = Vec::new();
            if !workers.is_empty() {
                let verb = if workers.len() == 1 { "catches up" } else { "catch up" };
                parts.push(format!("{} {verb}", workers.join(", ")));
            }
            if !idle.is_empty() {
                let reached: Vec<String> = idle.iter().map(|(w, before)| format!("{w} reached no {before}")).collect();
                parts.push(format!("{}: the lag held nothing", reached.join(", ")));
            }
            format!("drain: no other worker can step; {}", parts.join("; "))
        }
        FaultEvent::DrainStart => "drain: restart crashed workers, run everyone until quiescent".into(),
        FaultEvent::DrainPending { left } => format!("drain: {left}; polling again"),
        FaultEvent::UpstreamRetry { events } => {
            format!("drain: upstream dispatches {} again (dispatched, never sent)", events.join(", "))
        }
    }
}

/// Indices (into `history.entries`) of drain-phase steps that only polled: a call that found
/// nothing ([`Step::idle`]: an empty receive, a poll with no rows), and the `begin` and
/// `commit` around such a poll.
pub fn idle_polls(history: &History) -> std::collections::BTreeSet<usize> {
    let start = history
        .entries
        .iter()
        .position(|e| matches!(e, Entry::Fault { fault: FaultEvent::DrainStart, .. }))
        .unwrap_or(history.entries.len());
    let mut by_worker: std::collections::BTreeMap<&str, Vec<usize>> = Default::default();
    for (i, e) in history.entries.iter().enumerate().skip(start) {
        if let Entry::Step(s) = e {
            by_worker.entry(s.worker.as_str()).or_default().push(i);
        }
    }
    let step = |i: usize| match &history.entries[i] {
        Entry::Step(s) => Some(s),
        _ => None,
    };
    let mut hide = std::collections::BTreeSet::new();
    for idx in by_worker.values() {
        for (k, &i) in idx.iter().enumerate() {
            let s = step(i).expect("step");
            if s.idle {
                hide.insert(i);
                continue;
            }
            let next_idle = match idx.get(k + 1).and_then(|&j| step(j)) {
                Some(n) => n.idle,
                None => true,
            };
            let prev_idle = k > 0 && step(idx[k - 1]).is_some_and(|p| p.idle);
            if (s.op == "begin" && next_idle) || (s.op == "commit" && prev_idle) {
                hide.insert(i);
            }
        }
    }
    hide
}

/// One entry as a trace line, without the newline (seconds in at least 4 digits).
pub fn line(e: &Entry) -> String {
    line_with(e, 4)
}

fn line_with(e: &Entry, w: usize) -> String {
    match e {
        Entry::Step(s) => {
            let at = s.at.map(|a| format!("[{a}]")).unwrap_or_default();
            let op = match &s.unit {
                Some(unit) => format!("{} {unit}", s.op),
                None => s.op.clone(),
            };
            format!("{}  {:<4} {:<14} {:<24} → {}", t(s.t_ms, w), s.worker, op, at, outcome_text(s))
        }
        Entry::Blocked { t_ms, worker, op, by } => {
            format!("{}  {:<4} {:<14} {:<24} ⧗ blocked by {}", t(*t_ms, w), worker, op, "", by.join(", "))
        }
        Entry::Crash { t_ms, worker, graceful: true, .. } => {
            format!("{}  {:<4} ■ STOPPED gracefully, before its next receive", t(*t_ms, w), worker)
        }
        Entry::Crash { t_ms, worker, exited: Some(e), .. } => {
            format!("{}  {:<4} ✗ EXITED by itself ({})", t(*t_ms, w), worker, e.how)
        }
        Entry::Crash { t_ms, worker, at, op, .. } => {
            let place = match (at, op) {
                (_, Some(op)) => format!("in the middle of `{op}`"),
                (Some(a), None) => format!("at {a}"),
                (None, None) => "between calls".to_string(),
            };
            format!("{}  {:<4} ✗ CRASH {place}", t(*t_ms, w), worker)
        }
        Entry::Restart { t_ms, worker } => format!("{}  {:<4} ↻ restart", t(*t_ms, w), worker),
        Entry::Fault { t_ms, fault, .. } => format!("{}  ~    {}", t(*t_ms, w), fault_text(fault)),
        Entry::Note { t_ms, worker, text } => format!("{}  {:<4}   · {text}", t(*t_ms, w), worker),
    }
}

/// Renders `history` as trace text, one line per entry, ending with a newline. In the drain
/// phase, polls that found nothing are left out and counted in a last line.
pub fn render(history: &History) -> String {
    let mut out = String::new();
    let hidden = idle_polls(history);
    let w = seconds_width(history);
    for (i, e) in history.entries.iter().enumerate() {
        if !hidden.contains(&i) {
            let _ = writeln!(out, "{}", line_with(e, w));
        }
    }
    if !hidden.is_empty() {
        let _ = writeln!(out, "{:>pad$}   ({} idle polls of the drain phase not shown)", "", hidden.len(), pad = w + 5);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::history::{Service, Step};

    fn step(t_ms: u64) -> Entry {
        let outcome = Outcome::Received { msg: "m1".into(), receive_count: 1 };
        Entry::Step(Step { t_ms, worker: "c1".into(), op: "recv".into(), service: Service::Sqs, at: None, outcome, idle: false, facts: vec![], unit: None })
    }

    /// Every line keeps its columns when logical time passes 6 digits of seconds (a 15-day tick).
    #[test]
    fn columns_stay_aligned_past_a_15_day_tick() {
        let history = History {
            entries: vec![
                step(0),
                Entry::Fault { t_ms: 0, fault: FaultEvent::Clock { ms: 15 * 86_400_000, drain: false }, facts: vec![] },
                step(15 * 86_400_000),
            ],
            roles: Default::default(),
        };
        let text = render(&history);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0].find("c1"), lines[2].find("c1"), "\n{text}");
        assert_eq!(lines[0].find("recv"), lines[2].find("recv"), "\n{text}");
        assert!(lines[2].starts_with("1296000.000s"), "\n{text}");
        assert!(lines[1].contains("clock +15d"), "\n{text}");
        // Short traces keep the 4-digit column of their snapshots.
        assert!(render(&History { entries: vec![step(31_000)], roles: Default::default() }).starts_with("  31.000s  c1"));
    }
}
