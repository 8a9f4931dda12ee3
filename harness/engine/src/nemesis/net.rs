//! Network and provider faults between the workers and a workload's external providers
//! ([`crate::provider`]), applied on turmoil's simulated network (issue 13, the orders article's
//! "an HTTP timeout leaves the outcome unknown"):
//!
//! | text | what happens |
//! |---|---|
//! | `net:drop-request@<p>` | the next request to `<p>` never arrives: the link from the caller is cut (turmoil `partition_oneway`) until the call gave up |
//! | `net:drop-response@<p>` | the next request to `<p>` is applied, and its response is lost on the way back (turmoil `partition_oneway` from `<p>` as it answers) |
//! | `net:delay@<p>:<dur>` | the next request to `<p>` is held on the link past the caller's timeout; it arrives at the first clock move that reaches `<dur>` of logical time later (lost if `<p>` is partitioned then) |
//! | `net:partition@<p>` | every message between `<p>` and the workers is dropped (turmoil `partition`) until `net:heal@<p>` or the drain |
//! | `net:heal@<p>` | the partition is repaired (turmoil `repair`) |
//! | `provider:5xx-before@<p>` | the next request gets a 503 and is not applied |
//! | `provider:5xx-after@<p>` | the next request is applied, then answered with a 503 |
//! | `provider:restart@<p>` | the provider's host restarts (turmoil `bounce`): open connections and held requests are lost, its ledger is kept |
//!
//! The drain heals every partition first, as Jepsen's final generator does.

use std::fmt;

use crate::duration::{format_duration_ms, parse_duration_ms};

/// What a network or provider fault does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum NetFaultKind {
    /// The next request never arrives.
    DropRequest,
    /// The next request is applied; its response is lost.
    DropResponse,
    /// The next request arrives this many logical ms later, after the caller gave up.
    Delay(u64),
    /// The provider is cut off from every worker.
    Partition,
    /// The partition is repaired.
    Heal,
    /// The next request is answered 503 and not applied.
    Error5xxBefore,
    /// The next request is applied, then answered 503.
    Error5xxAfter,
    /// The provider's host restarts.
    Restart,
}

/// A fault aimed at one provider, e.g. `net:drop-response@gateway`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NetFault {
    /// What it does.
    pub kind: NetFaultKind,
    /// The provider's name ([`crate::provider::Provider::name`]).
    pub provider: &'static str,
}

/// The kinds whose text is `net:<name>@<p>`, and those whose text is `provider:<name>@<p>`.
const NET: [(&str, NetFaultKind); 4] = [
    ("drop-request", NetFaultKind::DropRequest),
    ("drop-response", NetFaultKind::DropResponse),
    ("partition", NetFaultKind::Partition),
    ("heal", NetFaultKind::Heal),
];
const PROVIDER: [(&str, NetFaultKind); 3] = [
    ("5xx-before", NetFaultKind::Error5xxBefore),
    ("5xx-after", NetFaultKind::Error5xxAfter),
    ("restart", NetFaultKind::Restart),
];

/// The delays the exploration strategy picks for `net:delay`, logical ms (each past the
/// client timeout; 40 s also past a 30 s visibility timeout).
pub const DELAYS_MS: [u64; 2] = [5_000, 40_000];

impl NetFault {
    /// Every fault on the exploration menu for `providers` (delays from [`DELAYS_MS`]).
    pub fn menu(providers: &[&'static str]) -> Vec<NetFault> {
        let mut kinds: Vec<NetFaultKind> = NET.iter().chain(PROVIDER.iter()).map(|(_, k)| *k).collect();
        kinds.extend(DELAYS_MS.map(NetFaultKind::Delay));
        providers.iter().flat_map(|p| kinds.iter().map(move |k| NetFault { kind: *k, provider: p })).collect()
    }

    /// Parses the text after `net:` (`family = "net"`) or `provider:` (any other `family`),
    /// e.g. `drop-response@gateway` or `delay@gateway:40s`. Errors: an unknown fault, a
    /// malformed delay duration, an unknown provider, or a workload without providers, each
    /// with the expected forms.
    pub fn parse(family: &str, rest: &str, providers: &[&'static str]) -> Result<NetFault, String> {
        let table: &[(&str, NetFaultKind)] = if family == "net" { &NET } else { &PROVIDER };
        let names: Vec<String> = table.iter().map(|(n, _)| format!("`{family}:{n}@<provider>`")).collect();
        let delay = if family == "net" { ", `net:delay@<provider>:<duration>`" } else { "" };
        let expected = format!("expected {}{delay}", names.join(", "));
        let Some((name, target)) = rest.split_once('@') else { return Err(expected) };
        let (target, dur) = match (name, target.split_once(':')) {
            ("delay", Some((p, d))) if family == "net" => (p, Some(parse_duration_ms(d)?)),
            ("delay", None) if family == "net" => return Err("expected `net:delay@<provider>:<duration>`, e.g. `net:delay@gateway:40s`".into()),
            _ => (target, None),
        };
        let kind = match dur {
            Some(ms) => NetFaultKind::Delay(ms),
            None => table.iter().find(|(n, _)| *n == name).map(|(_, k)| *k).ok_or(expected)?,
        };
        let provider = providers.iter().copied().find(|p| *p == target).ok_or_else(|| match providers {
            [] => format!("`{target}`: this workload has no providers"),
            _ => format!("unknown provider `{target}`; expected one of {}", providers.join(", ")),
        })?;
        Ok(NetFault { kind, provider })
    }

    /// What the nemesis says in the trace when the schedule applies it.
    pub fn announcement(&self) -> String {
        let p = self.provider;
        match self.kind {
            NetFaultKind::DropRequest => format!("the next request to {p} will be lost on its way"),
            NetFaultKind::DropResponse => format!("the next request to {p} will be applied and its response lost"),
            NetFaultKind::Delay(ms) => format!("the next request to {p} will arrive {} later, after its caller gave up", format_duration_ms(ms)),
            NetFaultKind::Partition => format!("{p} is cut off from every worker"),
            NetFaultKind::Heal => format!("the network to {p} is repaired"),
            NetFaultKind::Error5xxBefore => format!("{p} will answer its next request 503 without applying it"),
            NetFaultKind::Error5xxAfter => format!("{p} will apply its next request, then answer 503"),
            NetFaultKind::Restart => format!("{p} restarts: open connections and held requests are lost"),
        }
    }
}

impl fmt::Display for NetFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let p = self.provider;
        if let NetFaultKind::Delay(ms) = self.kind {
            return write!(f, "net:delay@{p}:{}", format_duration_ms(ms));
        }
        let (family, name) = NET
            .iter()
            .map(|(n, k)| ("net", n, k))
            .chain(PROVIDER.iter().map(|(n, k)| ("provider", n, k)))
            .find(|(_, _, k)| **k == self.kind)
            .map(|(fam, n, _)| (fam, *n))
            .expect("every kind but Delay has a name");
        write!(f, "{family}:{name}@{p}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_menu_fault_prints_and_parses_back() {
        for f in NetFault::menu(&["gateway", "mail"]) {
            let text = f.to_string();
            let (family, rest) = text.split_once(':').unwrap();
            assert_eq!(NetFault::parse(family, rest, &["gateway", "mail"]), Ok(f), "{text}");
        }
    }

    #[test]
    fn errors_name_the_expected_forms() {
        let e = NetFault::parse("net", "drop@gateway", &["gateway"]).unwrap_err();
        assert!(e.contains("`net:drop-request@<provider>`"), "{e}");
        let e = NetFault::parse("net", "drop-request@bank", &["gateway"]).unwrap_err();
        assert!(e.contains("unknown provider `bank`; expected one of gateway"), "{e}");
        let e = NetFault::parse("net", "delay@gateway", &["gateway"]).unwrap_err();
        assert!(e.contains("net:delay@gateway:40s"), "{e}");
        let e = NetFault::parse("provider", "restart@gateway", &[]).unwrap_err();
        assert!(e.contains("no providers"), "{e}");
    }
}
