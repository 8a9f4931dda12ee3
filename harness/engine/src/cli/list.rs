//! `crashpoint list`.

use anyhow::Result;

use crate::duration::format_duration_ms;
use crate::error::EXIT_OK;
use crate::scenario;
use crate::workload::Registry;
use crate::spec::RoleKind;

/// Prints the scenarios, and for each workload they use (every workload when there is no
/// scenario) its queues (visibility timeout and retention, logical), roles with their crash
/// points, faults, providers, invariants and systems, then the engine's fault kinds and its
/// own invariants. Errors: a scenario file that does not load (named with its line and field).
pub fn list(registry: &Registry) -> Result<i32> {
    let dir = scenario::scenarios_dir();
    println!("scenarios (from {}/):", dir.display());
    let scenarios = scenario::discover(&dir, registry)?;
    for s in &scenarios {
        println!("  {:<36} {}", s.name, s.description);
    }
    let used: std::collections::BTreeSet<&str> = scenarios.iter().map(|s| s.workload.name()).collect();
    let (shown, unused): (Vec<_>, Vec<_>) = registry.all().iter().partition(|w| used.is_empty() || used.contains(w.name()));
    if !unused.is_empty() {
        let names: Vec<&str> = unused.iter().map(|w| w.name()).collect();
        println!("
(workloads with no scenario here, not shown: {})", names.join(", "));
    }
    for w in shown {
        println!("\nworkload {}: {}", w.name(), w.about());
        for q in w.queues() {
            println!(
                "  queue {:<30} visibility timeout {}, retention {}, {}, {}",
                q.name,
                format_duration_ms(q.visibility_timeout_s.saturating_mul(1000)),
                format_duration_ms(q.retention_s.saturating_mul(1000)),
                if q.fifo { "FIFO" } else { "standard (a scenario's fifo_queues makes it FIFO)" },
                match q.dead_letter {
                    Some(d) => format!("dead-letter queue {} after {} receives", d.queue, d.max_receive_count),
                    None => "no dead-letter queue (a scenario's dead_letter adds one)".into(),
                }
            );
        }
        println!("  roles (worker names) and crash points:");
        for r in w.roles() {
            let kind = match r.kind {
                RoleKind::Producer => "producer".to_string(),
                RoleKind::Handler { queue } => format!("handles {queue}"),
                RoleKind::Poller => "poller".into(),
                RoleKind::Periodic => "periodic".into(),
                RoleKind::Endpoint => "serves webhooks".into(),
            };
            let name = if matches!(r.kind, RoleKind::Producer | RoleKind::Periodic) { r.prefix.to_string() } else { format!("{}N", r.prefix) };
            println!("    {name:<8} {kind:<18} {:<24} {}", r.about, r.points.join(" "));
        }
        for f in w.faults() {
            println!("  fault {:<30} {}", f.name(), f.about());
        }
        for p in w.providers() {
            println!("  provider {:<27} {}", p.name(), p.about());
            for r in p.routes() {
                println!("    route {r}");
            }
            for h in p.webhooks() {
                println!(
                    "    webhook {:<14} POST {} on role {}'s port {}, after each `{}` applied, up to {} deliveries",
                    h.label, h.path, h.role, h.port_env, h.on, h.attempts_max
                );
            }
        }
        for i in w.invariants() {
            println!("  invariant {}", i.name());
        }
        println!("  systems (--system):");
        for s in w.systems() {
            let must = if s.must_pass && s.name != "reference" { " (harmless: must pass)" } else { "" };
            println!("    {:<34} {}{must}", s.name, s.about);
        }
    }
    println!("\nfaults (schedule text):");
    for (text, what) in crate::nemesis::KINDS {
        println!("  {text:<36} {what}");
    }
    println!("\nengine invariants (every scenario):");
    for i in crate::checker::with_engine_invariants(Vec::new()) {
        println!("  {}", i.name());
    }
    Ok(EXIT_OK)
}
