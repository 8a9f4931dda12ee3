//! `timeline-<scenario>.html`: one failing schedule drawn as lanes, a self-contained HTML page
//! (inline CSS and SVG, no script, no network) that opens offline.
//!
//! One lane per worker (producer, consumers, relays, downstream consumers, retention), one for
//! the nemesis (clock, expiries, replays, the drain) and one per service (PostgreSQL, SQS,
//! Redis), and one per external provider the workers called (`gateway`, `mail`: the requests
//! it applied, replayed, lost or held). Columns are the history's entries in order (logical time only moves forward along
//! them; the axis shows it). A step is a box in its worker's lane, joined to a dot in the lane
//! of the service it called; a crash is a red cross, a restart a green arrow, a blocked step a
//! hatched wait that lasts until the worker's next step. The step where the first violated
//! invariant broke (see [`super::violation`]) is outlined in red, with a band across every lane.
//! Every mark has a tooltip with its trace line; the full trace follows the drawing.

use std::collections::BTreeMap;
use std::fmt::Write;

use quick_xml::escape::escape;

use crate::record::trace;
use super::violation::first_break;
use crate::scenario::ScenarioOutcome;
use crate::record::history::{Entry, FaultEvent, Outcome, Service};

const LABEL_W: usize = 110;
const COL_W: usize = 52;
const LANE_H: usize = 34;
const TOP: usize = 58;

/// The service lanes, in drawing order.
pub const SERVICE_LANES: [&str; 3] = ["postgres", "sqs", "redis"];
/// The nemesis lane's name.
pub const NEMESIS_LANE: &str = "nemesis";

/// Lane order of a worker: its role's rank in the workload's role list, then its name
/// (`c2` before `c10`).
fn role_rank(o: &ScenarioOutcome, w: &str) -> (usize, String) {
    let rank = o.history.roles.get(w).map(|r| r.rank).unwrap_or(usize::MAX);
    (rank, format!("{:>8}", w))
}

/// The lanes, top to bottom: the workers that have an entry among `shown` (indices into the
/// history; by role, then name), the nemesis, the services, then the providers called or
/// speaking among `shown` (by name).
fn lanes(o: &ScenarioOutcome, shown: &[usize]) -> Vec<String> {
    fn push_new(v: &mut Vec<String>, name: &str) {
        if !v.iter().any(|x| x == name) {
            v.push(name.to_string());
        }
    }
    let mut workers: Vec<String> = Vec::new();
    let mut providers: Vec<String> = Vec::new();
    for e in shown.iter().map(|&i| &o.history.entries[i]) {
        match e {
            Entry::Step(s) => {
                push_new(&mut workers, &s.worker);
                if let Some(p) = provider_of(s) {
                    push_new(&mut providers, p);
                }
            }
            // A provider's own line: what it applied, replayed, lost or held.
            Entry::Note { worker, .. } if !o.history.roles.contains_key(worker) => push_new(&mut providers, worker),
            Entry::Blocked { worker, .. } | Entry::Crash { worker, .. } | Entry::Restart { worker, .. } | Entry::Note { worker, .. } => {
                push_new(&mut workers, worker)
            }
            Entry::Fault { .. } => {}
        }
    }
    workers.sort_by_key(|w| role_rank(o, w));
    providers.sort();
    workers.push(NEMESIS_LANE.into());
    workers.extend(SERVICE_LANES.iter().map(|s| s.to_string()));
    workers.extend(providers);
    workers
}

fn service_lane(s: Service) -> Option<&'static str> {
    match s {
        Service::Postgres => Some("postgres"),
        Service::Sqs => Some("sqs"),
        Service::Redis => Some("redis"),
        Service::Http | Service::None => None,
    }
}

/// The provider an HTTP step called.
fn provider_of(s: &crate::record::history::Step) -> Option<&str> {
    match &s.outcome {
        Outcome::Http { provider, .. } | Outcome::NoResponse { provider, .. } | Outcome::Delivered { provider, .. } | Outcome::Answered { provider, .. } => Some(provider),
        _ => None,
    }
}

/// A call name that fits a box: `insert_payout` → `i_payout`.
fn op_label(op: &str) -> String {
    const MAX: usize = 8;
    if op.len() <= MAX || !op.contains('_') {
        return short(op, MAX);
    }
    let parts: Vec<&str> = op.split('_').collect();
    let (last, init) = parts.split_last().expect("contains _");
    let prefix: String = init.iter().filter_map(|p| p.chars().next()).collect();
    short(&format!("{prefix}_{last}"), MAX)
}

fn short(text: &str, n: usize) -> String {
    if text.chars().count() <= n {
        text.to_string()
    } else {
        text.chars().take(n.saturating_sub(1)).collect::<String>() + "…"
    }
}

fn fault_label(f: &FaultEvent) -> String {
    match f {
        FaultEvent::DrainStart | FaultEvent::DrainPending { .. } | FaultEvent::Clock { drain: true, .. } => "drain".into(),
        FaultEvent::UpstreamRetry { .. } => "retry".into(),
        FaultEvent::Lag { .. } | FaultEvent::CatchUp { .. } => "lag".into(),
        FaultEvent::Clock { .. } => "tick".into(),
        FaultEvent::Pause { .. } => "pause".into(),
        FaultEvent::Skipped { .. } => "skip".into(),
        FaultEvent::Armed { .. } | FaultEvent::ArmedFires { .. } => "armed".into(),
        FaultEvent::VisibilityExpired { .. } | FaultEvent::LockExpired { .. } | FaultEvent::KeyExpired { .. } => "expire".into(),
        FaultEvent::Expired { .. } => "retention".into(),
        FaultEvent::DeadLettered { .. } => "dlq".into(),
        FaultEvent::Redriven { .. } => "redrive".into(),
        FaultEvent::Workload { name, .. } => short(name, 8),
        FaultEvent::RedisRestart { .. } | FaultEvent::Redis { .. } | FaultEvent::LockLost { .. } => "redis".into(),
        FaultEvent::Dispatch { .. } => "dispatch".into(),
        FaultEvent::Sqs { .. } | FaultEvent::Redelivered { .. } => "sqs".into(),
        FaultEvent::Pg { .. } => "pg".into(),
        FaultEvent::Net { name, .. } => short(name.split(['@', ':']).nth(1).unwrap_or("net"), 8),
    }
}

/// Renders the page for one failing (or passing) schedule. `title` names scenario and system;
/// `repro` lists the commands that reproduce it.
pub fn render(title: &str, o: &ScenarioOutcome, repro: &[String]) -> String {
    let hidden = trace::idle_polls(&o.history);
    let shown: Vec<usize> = (0..o.history.entries.len()).filter(|i| !hidden.contains(i)).collect();
    let lanes = lanes(o, &shown);
    let lane_y: BTreeMap<&str, usize> = lanes.iter().enumerate().map(|(i, l)| (l.as_str(), TOP + i * LANE_H)).collect();
    let col_of: BTreeMap<usize, usize> = shown.iter().enumerate().map(|(c, &i)| (i, c)).collect();
    let breaking = first_break(&o.history, &o.verdicts);
    let width = LABEL_W + shown.len().max(1) * COL_W + 20;
    let height = TOP + lanes.len() * LANE_H + 10;
    let x_of = |col: usize| LABEL_W + col * COL_W;

    let mut svg = String::new();
    let _ = write!(
        svg,
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="monospace" font-size="10">
<defs><pattern id="hatch" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)"><rect width="3" height="6" fill="#f0b429"/></pattern></defs>
"##
    );
    // The providers' lanes follow the services' and are drawn like them.
    let providers_from = lanes.iter().position(|l| l == SERVICE_LANES[SERVICE_LANES.len() - 1]).map_or(usize::MAX, |i| i + 1);
    for (i, l) in lanes.iter().enumerate() {
        let y = TOP + i * LANE_H;
        let class = if SERVICE_LANES.contains(&l.as_str()) || i >= providers_from { "svc" } else if l == NEMESIS_LANE { "nem" } else { "wrk" };
        let _ = writeln!(
            svg,
            r#"<rect class="lane {class}" x="0" y="{y}" width="{width}" height="{LANE_H}"/><text class="lane-name" data-lane="{l}" x="8" y="{}">{l}</text>"#,
            y + LANE_H / 2 + 4
        );
    }
    if let Some((i, inv)) = breaking {
        if let Some(&c) = col_of.get(&i) {
            let x = x_of(c);
            // The label extends to the left of the band unless that would leave the drawing,
            // so that it stays in view in a window that shows the band.
            let anchor = if x > 420 { "end" } else { "start" };
            let _ = writeln!(
                svg,
                r#"<rect id="breaking" class="breaking" x="{}" y="{}" width="{COL_W}" height="{}"><title>{}</title></rect><text class="breaking-label" x="{}" y="{}" text-anchor="{anchor}">✗ {} breaks here</text>"#,
                x - 3,
                TOP - 14,
                lanes.len() * LANE_H + 14,
                escape(inv),
                if anchor == "end" { x + COL_W } else { x },
                TOP - 18,
                escape(inv)
            );
        }
    }
    let mut last_t = None;
    for (c, &i) in shown.iter().enumerate() {
        let e = &o.history.entries[i];
        let x = x_of(c);
        let tip = escape(trace::line(e).trim().to_string()).into_owned();
        let t_ms = match e {
            Entry::Step(s) => s.t_ms,
            Entry::Blocked { t_ms, .. } | Entry::Crash { t_ms, .. } | Entry::Restart { t_ms, .. } | Entry::Fault { t_ms, .. } | Entry::Note { t_ms, .. } => *t_ms,
        };
        if last_t != Some(t_ms) {
            last_t = Some(t_ms);
            let _ = writeln!(svg, r#"<text class="t" x="{x}" y="{}">{}s</text><line class="tick" x1="{x}" x2="{x}" y1="{}" y2="{}"/>"#, TOP - 4, t_ms as f64 / 1000.0, TOP, height - 10);
        }
        let hl = if breaking.map(|b| b.0) == Some(i) { " hl" } else { "" };
        match e {
            Entry::Step(s) => {
                let y = lane_y[s.worker.as_str()];
                let svc = match s.service {
                    Service::Http => "http",
                    other => service_lane(other).unwrap_or("none"),
                };
                let failed = if s.outcome.failed() { " failed" } else { "" };
                let _ = writeln!(
                    svg,
                    r#"<g class="step {svc}{failed}{hl}" data-entry="{i}"><title>{tip}</title><rect x="{x}" y="{}" width="{}" height="{}" rx="3"/><text x="{}" y="{}">{}</text></g>"#,
                    y + 6,
                    COL_W - 6,
                    LANE_H - 12,
                    x + 3,
                    y + LANE_H / 2 + 4,
                    escape(op_label(&s.op))
                );
                if let Some(l) = service_lane(s.service).or_else(|| provider_of(s)) {
                    let sy = lane_y[l] + LANE_H / 2;
                    let _ = writeln!(
                        svg,
                        r#"<line class="call {svc}" x1="{}" x2="{}" y1="{}" y2="{sy}"/><circle class="call {svc}" cx="{}" cy="{sy}" r="4"><title>{tip}</title></circle>"#,
                        x + COL_W / 2 - 3,
                        x + COL_W / 2 - 3,
                        y + LANE_H - 6,
                        x + COL_W / 2 - 3
                    );
                }
            }
            Entry::Blocked { worker, .. } => {
                let y = lane_y[worker.as_str()];
                let until = shown[c + 1..]
                    .iter()
                    .position(|&j| matches!(&o.history.entries[j], Entry::Step(s) if &s.worker == worker) || matches!(&o.history.entries[j], Entry::Crash { worker: w, .. } if w == worker))
                    .map(|p| c + 1 + p)
                    .unwrap_or(shown.len());
                let _ = writeln!(
                    svg,
                    r#"<g class="wait{hl}"><title>{tip}</title><rect x="{x}" y="{}" width="{}" height="{}" fill="url(#hatch)"/><text x="{}" y="{}">wait</text></g>"#,
                    y + 10,
                    (until - c) * COL_W - 6,
                    LANE_H - 20,
                    x + 2,
                    y + 8
                );
            }
            Entry::Crash { worker, graceful, .. } => {
                let y = lane_y[worker.as_str()];
                let mark = if *graceful { "■" } else { "✗" };
                let _ = writeln!(svg, r#"<g class="crash{hl}"><title>{tip}</title><text x="{}" y="{}">{mark}</text></g>"#, x + 8, y + LANE_H / 2 + 8);
            }
            Entry::Restart { worker, .. } => {
                let y = lane_y[worker.as_str()];
                let _ = writeln!(svg, r#"<g class="restart{hl}"><title>{tip}</title><text x="{}" y="{}">↻</text></g>"#, x + 8, y + LANE_H / 2 + 7);
            }
            Entry::Fault { fault, .. } => {
                let y = lane_y[NEMESIS_LANE];
                let _ = writeln!(
                    svg,
                    r#"<g class="fault{hl}"><title>{tip}</title><path d="M{} {} l8 8 l-8 8 l-8 -8 z"/><text x="{}" y="{}">{}</text></g>"#,
                    x + 12,
                    y + 4,
                    x + 2,
                    y + LANE_H - 2,
                    escape(fault_label(fault))
                );
            }
            Entry::Note { worker, text, .. } => {
                let y = lane_y[worker.as_str()];
                // A provider's line about a message the network lost (a dropped request or
                // response, a held request lost in a partition) is drawn as a red cross.
                if !o.history.roles.contains_key(worker) && text.contains(" lost") {
                    let _ = writeln!(svg, r#"<g class="note lost{hl}"><title>{tip}</title><text x="{}" y="{}">✗</text></g>"#, x + 8, y + LANE_H / 2 + 5);
                    continue;
                }
                let _ = writeln!(svg, r#"<g class="note{hl}"><title>{tip}</title><circle cx="{}" cy="{}" r="3"/></g>"#, x + 12, y + LANE_H / 2);
            }
        }
    }
    svg.push_str("</svg>\n");
    page(title, o, repro, &svg, &shown, breaking.map(|b| b.0))
}

fn page(title: &str, o: &ScenarioOutcome, repro: &[String], svg: &str, shown: &[usize], breaking: Option<usize>) -> String {
    let verdict = if o.passed() { "PASS" } else { "FAIL" };
    let mut html = String::new();
    let _ = write!(
        html,
        r#"<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>crashpoint {verdict}: {}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 16px; color: #1f2933; }}
code, pre {{ font-family: ui-monospace, monospace; font-size: 12px; }}
pre {{ background: #f5f7fa; padding: 8px; overflow-x: auto; }}
.FAIL {{ color: #b00020; }} .PASS {{ color: #137333; }}
.scroll {{ overflow-x: auto; border: 1px solid #cbd2d9; }}
.lane.wrk {{ fill: #ffffff; stroke: #e4e7eb; }} .lane.nem {{ fill: #fff8e1; stroke: #e4e7eb; }} .lane.svc {{ fill: #eef2f7; stroke: #e4e7eb; }}
.lane-name {{ font-weight: bold; font-size: 12px; }}
.t {{ fill: #7b8794; font-size: 9px; }} .tick {{ stroke: #e4e7eb; stroke-dasharray: 2 3; }}
.step rect {{ stroke: #52606d; }} .step text {{ font-size: 9px; }}
.step.postgres rect {{ fill: #bcd7f5; }} .step.sqs rect {{ fill: #ffd8a8; }} .step.redis rect {{ fill: #f8c4c4; }} .step.none rect {{ fill: #e4e7eb; }} .step.http rect {{ fill: #c9e8c9; }}
.step.failed rect {{ stroke: #b00020; stroke-dasharray: 3 2; }}
line.call {{ stroke: #9aa5b1; stroke-width: 0.6; }} circle.call.postgres {{ fill: #2f6fb3; }} circle.call.sqs {{ fill: #d9822b; }} circle.call.redis {{ fill: #c23030; }} circle.call.http {{ fill: #2b8a3e; }}
.crash text {{ fill: #b00020; font-size: 20px; font-weight: bold; }} .restart text {{ fill: #137333; font-size: 18px; }}
.fault path {{ fill: #f0b429; stroke: #8d6708; }} .fault text {{ font-size: 8px; }} .wait text {{ font-size: 8px; fill: #8d6708; }}
.note circle {{ fill: #7b8794; }} .note.lost text {{ fill: #b00020; font-size: 13px; }}
.breaking {{ fill: rgba(176, 0, 32, 0.10); stroke: #b00020; stroke-width: 1.5; }} .breaking-label {{ fill: #b00020; font-weight: bold; font-size: 11px; }}
.hl rect {{ stroke: #b00020; stroke-width: 3; }}
.legend span {{ display: inline-block; margin-right: 14px; }} .sw {{ display: inline-block; width: 12px; height: 12px; vertical-align: middle; border: 1px solid #52606d; }}
pre .hl {{ background: #fde2e1; font-weight: bold; }}
</style></head>
<body>
<h1><span class="{verdict}">{verdict}</span> {}</h1>
"#,
        escape(title),
        escape(title)
    );
    let broken: Vec<_> = o.verdicts.iter().filter(|v| !v.holds).collect();
    if !broken.is_empty() {
        html.push_str("<ul class=\"violations\">\n");
        for v in broken {
            let _ = writeln!(html, "<li><b>{}</b>: {}</li>", escape(&v.invariant), escape(&v.detail));
        }
        html.push_str("</ul>\n");
    }
    let _ = writeln!(html, "<p>schedule: <code>{}</code></p>", escape(o.schedule.to_string()));
    for r in repro {
        let _ = writeln!(html, "<p>reproduce: <code>{}</code></p>", escape(r));
    }
    html.push_str(
        r#"<p class="legend"><span><i class="sw" style="background:#bcd7f5"></i> PostgreSQL call</span><span><i class="sw" style="background:#ffd8a8"></i> SQS call</span><span><i class="sw" style="background:#f8c4c4"></i> Redis call</span><span><i class="sw" style="background:#c9e8c9"></i> provider call (HTTP)</span><span><i class="sw" style="background:#e4e7eb"></i> injected failure</span><span style="color:#b00020">✗ crash, or a message the network lost</span><span style="color:#137333">↻ restart</span><span><i class="sw" style="background:#f0b429"></i> fault / blocked (wait)</span><span><i class="sw" style="background:#fde2e1;border:2px solid #b00020"></i> where the invariant breaks</span></p>
"#,
    );
    let _ = writeln!(html, "<div class=\"scroll\">\n{svg}</div>");
    html.push_str("<h2>Trace</h2>\n<pre>");
    for &i in shown {
        let line = escape(trace::line(&o.history.entries[i])).into_owned();
        if Some(i) == breaking {
            let _ = writeln!(html, "<span class=\"hl\" id=\"breaking-line\">{line}    ← invariant breaks here</span>");
        } else {
            let _ = writeln!(html, "{line}");
        }
    }
    html.push_str("</pre>\n<h2>Invariants</h2>\n<ul>\n");
    for v in &o.verdicts {
        let mark = if v.holds { "ok" } else { "FAIL" };
        let _ = writeln!(html, "<li>{mark} {}{}</li>", escape(&v.invariant), if v.detail.is_empty() { String::new() } else { format!(": {}", escape(&v.detail)) });
    }
    html.push_str("</ul>\n</body></html>\n");
    html
}
