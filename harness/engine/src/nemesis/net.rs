//! Network and provider faults between the workers and a workload's external providers
//! ([`crate::provider`]), applied on turmoil's simulated network (the orders article's
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
//! | `net:duplicate@<p>:<dur>` | the next request to `<p>` is answered, and a copy of it arrives `<dur>` of logical time later (a retry by a proxy or a load balancer), answered to nobody |
//! | `webhook:duplicate@<p>` | `<p>`'s next webhook delivery is made again later, whatever the endpoint answered |
//! | `webhook:reorder@<p>` | `<p>`'s next webhook delivery takes the event queued behind the oldest pending one (a later event first) |
//!
//! A request fault may be aimed at one route of the provider, `@<p>/<route>`
//! (`net:drop-response@cards/charge`, `net:delay@cards/charge:5s`): it waits for the next
//! request that takes that route, whatever requests to `<p>` come before it (a lookup before a
//! charge). The exploration menu aims each request fault at every route that applies effects,
//! besides the unaimed ones: a fault lands where the work is.
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
    /// The next request is answered, and a copy of it arrives this many logical ms later.
    Duplicate(u64),
    /// The next webhook delivery is made again later, whatever its answer.
    WebhookDuplicate,
    /// The next webhook delivery takes the second pending event, not the oldest.
    WebhookReorder,
}

/// A fault aimed at one provider, e.g. `net:drop-response@gateway`, or at one of its routes,
/// `net:drop-response@cards/charge`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NetFault {
    /// What it does.
    pub kind: NetFaultKind,
    /// The provider's name ([`crate::provider::Provider::name`]).
    pub provider: &'static str,
    /// The route whose next request it waits for ([`crate::provider::Provider::route_labels`];
    /// `None`: the provider's next request). Only a request fault ([`NetFaultKind::per_request`])
    /// has one.
    pub route: Option<&'static str>,
}

impl NetFaultKind {
    /// Whether it befalls one request (and so may be aimed at a route): not a partition, a
    /// heal, a restart or a webhook fault.
    pub fn per_request(self) -> bool {
        !matches!(
            self,
            NetFaultKind::Partition | NetFaultKind::Heal | NetFaultKind::Restart | NetFaultKind::WebhookDuplicate | NetFaultKind::WebhookReorder
        )
    }
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
/// The kinds whose text is `webhook:<name>@<p>`.
const WEBHOOK: [(&str, NetFaultKind); 2] = [("duplicate", NetFaultKind::WebhookDuplicate), ("reorder", NetFaultKind::WebhookReorder)];

/// The delays the exploration strategy picks for `net:delay`, logical ms (each past the
/// client timeout; 40 s also past a 30 s visibility timeout).
pub const DELAYS_MS: [u64; 2] = [5_000, 40_000];

impl NetFault {
    /// `kind` at `provider`, unaimed.
    pub fn at(provider: &'static str, kind: NetFaultKind) -> NetFault {
        NetFault { kind, provider, route: None }
    }

    /// Every fault on the exploration menu for `providers` (delays from [`DELAYS_MS`]); each
    /// request fault aimed at every route of `routes` (provider, label, applies) that applies
    /// effects; and the webhook faults for those of them in `webhooks` (the providers that send
    /// webhooks).
    pub fn menu(providers: &[&'static str], webhooks: &[&'static str], routes: &[(&'static str, &'static str, bool)]) -> Vec<NetFault> {
        let mut kinds: Vec<NetFaultKind> = NET.iter().chain(PROVIDER.iter()).map(|(_, k)| *k).collect();
        kinds.extend(DELAYS_MS.map(NetFaultKind::Delay));
        kinds.push(NetFaultKind::Duplicate(DELAYS_MS[0]));
        let mut out: Vec<NetFault> = providers.iter().flat_map(|p| kinds.iter().map(move |k| NetFault::at(p, *k))).collect();
        for p in providers.iter().filter(|p| webhooks.contains(p)) {
            out.extend(WEBHOOK.iter().map(|(_, k)| NetFault::at(p, *k)));
        }
        for (p, r, _) in routes.iter().filter(|(p, _, applies)| *applies && providers.contains(p)) {
            out.extend(kinds.iter().filter(|k| k.per_request()).map(|k| NetFault { kind: *k, provider: p, route: Some(r) }));
        }
        out
    }

    /// Parses the text after `net:` (`family = "net"`), `webhook:` (`"webhook"`) or `provider:`
    /// (any other `family`), e.g. `drop-response@gateway`, `delay@gateway:40s`,
    /// `drop-response@cards/charge` or `duplicate@cards`. Errors: an unknown fault, a malformed
    /// duration, an unknown provider (for `webhook:`, one that sends no webhooks: `webhooks`),
    /// a route that is not one of the provider's (`routes`: provider, label, applies) or on a
    /// fault that befalls no single request, or a workload without providers, each with the
    /// expected forms.
    pub fn parse(
        family: &str,
        rest: &str,
        providers: &[&'static str],
        webhooks: &[&'static str],
        routes: &[(&'static str, &'static str, bool)],
    ) -> Result<NetFault, String> {
        let table: &[(&str, NetFaultKind)] = match family {
            "net" => &NET,
            "webhook" => &WEBHOOK,
            _ => &PROVIDER,
        };
        let names: Vec<String> = table.iter().map(|(n, _)| format!("`{family}:{n}@<provider>`")).collect();
        let timed = if family == "net" { ", `net:delay@<provider>:<duration>`, `net:duplicate@<provider>:<duration>`" } else { "" };
        let expected = format!("expected {}{timed} (a request fault may name a route: `@<provider>/<route>`)", names.join(", "));
        let Some((name, target)) = rest.split_once('@') else { return Err(expected) };
        let (target, kind) = match (family, name, target.split_once(':')) {
            ("net", "delay", Some((p, d))) => (p, NetFaultKind::Delay(parse_duration_ms(d)?)),
            ("net", "duplicate", Some((p, d))) => (p, NetFaultKind::Duplicate(parse_duration_ms(d)?)),
            ("net", "delay" | "duplicate", None) => {
                return Err(format!("expected `net:{name}@<provider>:<duration>`, e.g. `net:{name}@gateway:5s`"))
            }
            _ => (target, table.iter().find(|(n, _)| *n == name).map(|(_, k)| *k).ok_or(expected)?),
        };
        let (target, route) = match target.split_once('/') {
            Some((p, r)) => (p, Some(r)),
            None => (target, None),
        };
        let among = if family == "webhook" { webhooks } else { providers };
        let provider = among.iter().copied().find(|p| *p == target).ok_or_else(|| match (among, family) {
            ([], "webhook") => format!("`{target}`: no provider of this workload sends webhooks"),
            (_, "webhook") if providers.contains(&target) => {
                format!("provider `{target}` sends no webhooks; expected one that does: {}", among.join(", "))
            }
            ([], _) => format!("`{target}`: this workload has no providers"),
            _ => format!("unknown provider `{target}`; expected one of {}", among.join(", ")),
        })?;
        let route = match route {
            None => None,
            Some(_) if !kind.per_request() => {
                return Err(format!("`{family}:{name}` befalls no single request: expected it at `@{provider}`, with no route"))
            }
            Some(r) => {
                let labels: Vec<&'static str> = routes.iter().filter(|(p, _, _)| *p == provider).map(|(_, l, _)| *l).collect();
                match labels.iter().find(|l| **l == r) {
                    Some(l) => Some(*l),
                    None => return Err(format!("`{provider}` has no route `{r}`; expected one of {}", labels.join(", "))),
                }
            }
        };
        Ok(NetFault { kind, provider, route })
    }

    /// What the nemesis says in the trace when the schedule applies it.
    pub fn announcement(&self) -> String {
        let p = self.provider;
        let next = match self.route {
            Some(r) => format!("next `{r}` request"),
            None => "next request".to_string(),
        };
        match self.kind {
            NetFaultKind::DropRequest => format!("the {next} to {p} will be lost on its way"),
            NetFaultKind::DropResponse => format!("the {next} to {p} will be applied and its response lost"),
            NetFaultKind::Delay(ms) => format!("the {next} to {p} will arrive {} later, after its caller gave up", format_duration_ms(ms)),
            NetFaultKind::Partition => format!("{p} is cut off from every worker"),
            NetFaultKind::Heal => format!("the network to {p} is repaired"),
            NetFaultKind::Error5xxBefore => format!("{p} will answer its {next} 503 without applying it"),
            NetFaultKind::Error5xxAfter => format!("{p} will apply its {next}, then answer 503"),
            NetFaultKind::Restart => format!("{p} restarts: open connections and held requests are lost"),
            NetFaultKind::Duplicate(ms) => format!("the {next} to {p} will arrive again {} later, a copy sent by a proxy", format_duration_ms(ms)),
            NetFaultKind::WebhookDuplicate => format!("{p}'s next webhook delivery will be made again later, whatever it is answered"),
            NetFaultKind::WebhookReorder => format!("{p}'s next webhook delivery will carry a later event before the oldest pending one"),
        }
    }
}

impl fmt::Display for NetFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let p = match self.route {
            Some(r) => format!("{}/{r}", self.provider),
            None => self.provider.to_string(),
        };
        match self.kind {
            NetFaultKind::Delay(ms) => return write!(f, "net:delay@{p}:{}", format_duration_ms(ms)),
            NetFaultKind::Duplicate(ms) => return write!(f, "net:duplicate@{p}:{}", format_duration_ms(ms)),
            _ => {}
        }
        let (family, name) = NET
            .iter()
            .map(|(n, k)| ("net", n, k))
            .chain(PROVIDER.iter().map(|(n, k)| ("provider", n, k)))
            .chain(WEBHOOK.iter().map(|(n, k)| ("webhook", n, k)))
            .find(|(_, _, k)| **k == self.kind)
            .map(|(fam, n, _)| (fam, *n))
            .expect("every kind but Delay and Duplicate has a name");
        write!(f, "{family}:{name}@{p}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_menu_fault_prints_and_parses_back() {
        let routes = [("gateway", "apply", true), ("gateway", "lookup", false), ("mail", "send", true)];
        let menu = NetFault::menu(&["gateway", "mail"], &["mail"], &routes);
        assert!(menu.iter().any(|f| f.kind == NetFaultKind::WebhookReorder && f.provider == "mail"));
        assert!(!menu.iter().any(|f| f.kind == NetFaultKind::WebhookReorder && f.provider == "gateway"));
        assert!(menu.iter().any(|f| f.kind == NetFaultKind::DropResponse && f.route == Some("apply")));
        assert!(!menu.iter().any(|f| f.route == Some("lookup")), "aimed at the routes that apply effects only");
        assert!(!menu.iter().any(|f| f.route.is_some() && !f.kind.per_request()));
        for f in menu {
            let text = f.to_string();
            let (family, rest) = text.split_once(':').unwrap();
            assert_eq!(NetFault::parse(family, rest, &["gateway", "mail"], &["mail"], &routes), Ok(f), "{text}");
        }
        let aimed = NetFault::parse("net", "delay@gateway/lookup:5s", &["gateway"], &[], &routes).unwrap();
        assert_eq!((aimed.to_string(), aimed.route), ("net:delay@gateway/lookup:5s".to_string(), Some("lookup")));
    }

    #[test]
    fn errors_name_the_expected_forms() {
        let e = NetFault::parse("net", "drop-response@gateway/charge", &["gateway"], &[], &[("gateway", "apply", true)]).unwrap_err();
        assert!(e.contains("`gateway` has no route `charge`; expected one of apply"), "{e}");
        let e = NetFault::parse("net", "partition@gateway/apply", &["gateway"], &[], &[("gateway", "apply", true)]).unwrap_err();
        assert!(e.contains("befalls no single request"), "{e}");
        let e = NetFault::parse("net", "drop@gateway", &["gateway"], &[], &[]).unwrap_err();
        assert!(e.contains("`net:drop-request@<provider>`"), "{e}");
        let e = NetFault::parse("net", "drop-request@bank", &["gateway"], &[], &[]).unwrap_err();
        assert!(e.contains("unknown provider `bank`; expected one of gateway"), "{e}");
        let e = NetFault::parse("net", "delay@gateway", &["gateway"], &[], &[]).unwrap_err();
        assert!(e.contains("net:delay@gateway:5s"), "{e}");
        let e = NetFault::parse("net", "duplicate@gateway", &["gateway"], &[], &[]).unwrap_err();
        assert!(e.contains("net:duplicate@gateway:5s"), "{e}");
        let e = NetFault::parse("provider", "restart@gateway", &[], &[], &[]).unwrap_err();
        assert!(e.contains("no providers"), "{e}");
        let e = NetFault::parse("webhook", "duplicate@gateway", &["gateway"], &[], &[]).unwrap_err();
        assert!(e.contains("no provider of this workload sends webhooks"), "{e}");
        let e = NetFault::parse("webhook", "duplicate@gateway", &["gateway", "mail"], &["mail"], &[]).unwrap_err();
        assert!(e.contains("provider `gateway` sends no webhooks; expected one that does: mail"), "{e}");
        let e = NetFault::parse("webhook", "twice@mail", &["mail"], &["mail"], &[]).unwrap_err();
        assert!(e.contains("`webhook:duplicate@<provider>`, `webhook:reorder@<provider>`"), "{e}");
    }
}
