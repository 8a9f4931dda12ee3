//! The simulated network between the workers and the workload's providers
//! ([`crate::provider`]): the provider hosts ([`host`]), the workers' HTTP client
//! ([`client`]), and the state the nemesis arms faults in ([`NetState`]).
//!
//! The links are turmoil's. Every message takes exactly [`LATENCY_MS`] of turmoil time, so
//! that the provider interleavings depend only on the schedule. Providers do no I/O, so no
//! real time passes while a request is on the simulated network.

pub(crate) mod client;
pub(crate) mod host;
pub mod webhook;

use std::collections::BTreeSet;

use crate::nemesis::net::{NetFault, NetFaultKind};
use crate::provider::{Call, Handled, Provider, Reply, Request};
use crate::sim::world::SharedWorld;

/// Latency of every simulated message, turmoil ms (min = max: no random latency).
pub const LATENCY_MS: u64 = 1;

/// How long a worker's HTTP client waits for a response, turmoil ms. Past it, the call
/// ends with no response and its outcome is unknown to the worker.
pub const CLIENT_TIMEOUT_MS: u64 = 2_000;

/// A link to cut one way until the call in flight is over: `from` can no longer reach `to`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cut {
    /// The sending host.
    pub from: String,
    /// The receiving host.
    pub to: String,
}

/// A request `net:delay` holds on the link, delivered when the logical clock reaches `due_ms`.
#[derive(Debug, Clone)]
pub struct Held {
    /// Logical ms at which it arrives.
    pub due_ms: u64,
    /// Its provider.
    pub provider: &'static str,
    /// The worker that sent it.
    pub caller: String,
    /// The request.
    pub request: Request,
    /// A copy of a request that was answered (`net:duplicate`): its answer goes to nobody.
    pub copy: bool,
}

/// The network's part of the world: armed faults, partitions, cuts to make and held requests.
#[derive(Debug, Default)]
pub struct NetState {
    /// One-shot faults armed for the next request to their provider, in arming order.
    pub armed: Vec<NetFault>,
    /// Providers cut off from every worker (`net:partition`).
    pub partitioned: BTreeSet<&'static str>,
    /// Cuts a host asked for during the current simulation step; the scheduler makes them
    /// (turmoil `partition_oneway`) before the next step, which drops what is in flight.
    pub to_cut: Vec<Cut>,
    /// Requests held by `net:delay`, in arrival order.
    pub held: Vec<Held>,
    /// Lines for the providers' lanes since the scheduler last looked: (provider, text).
    pub log: Vec<(&'static str, String)>,
    /// Every request that reached a provider or was lost on its way, in order (the facts table
    /// `crashpoint_provider_calls`).
    pub calls: Vec<Call>,
    /// Webhook events waiting for a delivery, oldest first ([`webhook`]).
    pub events: Vec<webhook::Pending>,
    /// Every webhook delivery made, in order (the facts table `crashpoint_webhooks`).
    pub deliveries: Vec<webhook::Delivered>,
    /// The schedule's providers.
    pub providers: Providers,
}

/// What a provider's front-end does with one request once the faults armed for it are applied
/// ([`deliver`]).
#[derive(Debug, Clone, PartialEq)]
pub enum Handoff {
    /// Answer with this.
    Reply(Reply),
    /// The provider handled it (applied or not) and this, its answer, is lost: the front-end
    /// cuts the link or closes the caller's connection without answering.
    Lost(Reply),
    /// It is held on the link (`net:delay`): never answered; the provider gets it when the
    /// logical clock reaches its due time ([`Held`]).
    Held,
    /// It never reaches the provider (`net:drop-request`, or the provider is partitioned): the
    /// front-end closes the caller's connection.
    Dropped,
}

/// Hands `request` from `caller` to `provider`, after the fault armed for its next request
/// (`net:`/`provider:` faults, [`crate::nemesis::net`]) or its partition: one front-end's
/// decisions for both, the turmoil host of an in-process workload ([`host`]) and the wire
/// front-end of a team's process ([`crate::sim::wire::http`]). Records the provider's lane
/// line and the [`Call`].
pub fn deliver(provider: &dyn Provider, world: &SharedWorld, request: Request, caller: String) -> Handoff {
    deliver_with(provider, world, request, caller).0
}

/// [`deliver`], and the armed fault it took (`None`: none, or the request met a partition).
pub fn deliver_with(provider: &dyn Provider, world: &SharedWorld, request: Request, caller: String) -> (Handoff, Option<NetFault>) {
    let name = provider.name();
    let route = provider.route(&request);
    let line = format!("{} {} from {caller}", request.method, request.shown());
    let (now, fault, partitioned) = {
        let mut w = world.borrow_mut();
        let partitioned = w.net.partitioned.contains(name);
        let fault = match partitioned {
            true => None,
            false => w.net.take_for(name, route, |k| {
                matches!(
                    k,
                    NetFaultKind::DropRequest
                        | NetFaultKind::DropResponse
                        | NetFaultKind::Delay(_)
                        | NetFaultKind::Duplicate(_)
                        | NetFaultKind::Error5xxBefore
                        | NetFaultKind::Error5xxAfter
                )
            }),
        };
        (w.now_ms, fault, partitioned)
    };
    let record = |h: Option<&Handled>, status: Option<u16>, text: String| {
        record(world, Some(provider), name, &request, h, status, now, text);
    };
    let unavailable = || Reply::new(503, serde_json::json!({"error": "service unavailable"}));
    match fault.map(|f| f.kind) {
        _ if partitioned => {
            record(None, None, format!("{line}: lost on its way, {name} is partitioned"));
            (Handoff::Dropped, fault)
        }
        Some(NetFaultKind::DropRequest) => {
            record(None, None, format!("{line}: lost on its way, never arrived"));
            (Handoff::Dropped, fault)
        }
        Some(NetFaultKind::Delay(ms)) => {
            world.borrow_mut().net.log.push((name, format!("{line}: held on the link for {}", crate::duration::format_duration_ms(ms))));
            world.borrow_mut().net.held.push(Held { due_ms: now + ms, provider: name, caller, request: request.clone(), copy: false });
            (Handoff::Held, fault)
        }
        Some(NetFaultKind::Duplicate(ms)) => {
            let h = provider.handle(&request, now);
            record(Some(&h), Some(h.reply.status), format!("{line} → {}: {}; a copy arrives {} later", h.reply.status, h.text, crate::duration::format_duration_ms(ms)));
            world.borrow_mut().net.held.push(Held { due_ms: now + ms, provider: name, caller, request: request.clone(), copy: true });
            (Handoff::Reply(h.reply), fault)
        }
        Some(NetFaultKind::Error5xxBefore) => {
            record(None, Some(503), format!("{line} → 503 (injected): not applied"));
            (Handoff::Reply(unavailable()), fault)
        }
        Some(NetFaultKind::Error5xxAfter) => {
            let h = provider.handle(&request, now);
            record(Some(&h), Some(h.reply.status), format!("{line}: {}; then 503 (injected)", h.text));
            (Handoff::Reply(unavailable()), fault)
        }
        Some(NetFaultKind::DropResponse) => {
            let h = provider.handle(&request, now);
            record(Some(&h), Some(h.reply.status), format!("{line} → {}: {}; the response is lost", h.reply.status, h.text));
            (Handoff::Lost(h.reply), fault)
        }
        _ => {
            let h = provider.handle(&request, now);
            record(Some(&h), Some(h.reply.status), format!("{line} → {}: {}", h.reply.status, h.text));
            (Handoff::Reply(h.reply), fault)
        }
    }
}

/// Records a request `caller` sent to `provider` that a fault answered before it reached the
/// provider (`fail@<label>` at the wire): its lane line `what` and its [`Call`], not applied.
pub fn injected(provider: &dyn Provider, world: &SharedWorld, request: &Request, caller: &str, what: &str) {
    let now = world.borrow().now_ms;
    let text = format!("{} {} from {caller} → {what}", request.method, request.shown());
    record(world, Some(provider), provider.name(), request, None, Some(503), now, text);
}

/// Hands a request `net:delay` held to its provider, with the lane line and the [`Call`]:
/// at its due time `h.due_ms`, the logical time it arrives, whatever clock move reached it (a
/// `tick:86401s` past a 5 s delay must not find a key of 24 h expired); `partitioned`: its
/// provider is cut off now, and it is lost.
pub fn deliver_held(provider: Option<&dyn Provider>, world: &SharedWorld, h: &Held, partitioned: bool) {
    let now_ms = h.due_ms;
    let head = match h.copy {
        true => format!("a copy of {} {} from {}, sent again by a proxy,", h.request.method, h.request.shown(), h.caller),
        false => format!("{} {} from {}, held on the link,", h.request.method, h.request.shown(), h.caller),
    };
    let (text, handled) = match provider {
        Some(p) if !partitioned => {
            let handled = p.handle(&h.request, now_ms);
            (format!("{head} arrives → {}: {}", handled.reply.status, handled.text), Some(handled))
        }
        _ => (format!("{head} is lost: {} is partitioned", h.provider), None),
    };
    record(world, provider, h.provider, &h.request, handled.as_ref(), handled.as_ref().map(|x| x.reply.status), now_ms, text);
}

/// Adds `text` to provider `name`'s lane and `request`'s row of `crashpoint_provider_calls`:
/// what `provider` did with it (`handled`; `None`: it never reached the provider), answered
/// `status`, at `t_ms`.
#[allow(clippy::too_many_arguments)]
fn record(
    world: &SharedWorld,
    provider: Option<&dyn Provider>,
    name: &'static str,
    request: &Request,
    handled: Option<&Handled>,
    status: Option<u16>,
    t_ms: u64,
    text: String,
) {
    let route = handled.and_then(|h| h.route).or_else(|| provider.and_then(|p| p.route(request)));
    let mut w = world.borrow_mut();
    w.net.log.push((name, text));
    if let (Some(p), Some(h)) = (provider, handled) {
        webhook::queue(&mut w.net, p, &h.events);
    }
    w.net.calls.push(Call {
        provider: name,
        route: route.unwrap_or_default().to_string(),
        idempotency_key: handled.map(|h| h.key.clone()).unwrap_or_default(),
        body: request.body.clone(),
        applied: handled.is_some_and(|h| h.applied.is_some()),
        status,
        reference: handled.and_then(|h| h.applied.clone()),
        t_ms,
    });
}

impl NetState {
    /// Takes the first armed fault for `provider` that `pick` accepts.
    pub fn take(&mut self, provider: &str, pick: impl Fn(NetFaultKind) -> bool) -> Option<NetFaultKind> {
        self.take_for(provider, None, pick).map(|f| f.kind)
    }

    /// Takes the first armed fault for a request to `provider` that takes route `route`
    /// (`None`: none of its routes) that `pick` accepts: an unaimed one, or one aimed at that
    /// route.
    pub fn take_for(&mut self, provider: &str, route: Option<&str>, pick: impl Fn(NetFaultKind) -> bool) -> Option<NetFault> {
        let i = self
            .armed
            .iter()
            .position(|f| f.provider == provider && (f.route.is_none() || f.route == route) && pick(f.kind))?;
        Some(self.armed.remove(i))
    }

    /// The label of the route `request` takes at `provider` ([`Provider::route`]; `None`: an
    /// unknown provider or no route).
    pub fn route_of(&self, provider: &str, request: &Request) -> Option<&'static str> {
        self.providers.0.iter().find(|p| p.name() == provider).and_then(|p| p.route(request))
    }
}

/// The schedule's providers, for the front-ends that must know a request's route before it
/// reaches its provider (an in-process worker's lost request, [`crate::sim::cx::Cx::http`]).
#[derive(Default, Clone)]
pub struct Providers(pub Vec<std::rc::Rc<dyn Provider>>);

impl std::fmt::Debug for Providers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.0.iter().map(|p| p.name())).finish()
    }
}

/// A provider for tests: `cards`, whose `charge` route (`POST /charges`) applies every request
/// (references `ch_1`, `ch_2`, …) and sends `webhooks`.
#[cfg(test)]
pub(crate) fn test_cards(webhooks: Vec<crate::provider::api::Webhook>) -> crate::provider::api::Api {
    use crate::provider::api::{parse_path, Answer, Api, ApiSpec, Route, RouteKind};
    Api::new(ApiSpec {
        name: "cards",
        about: "cards",
        url_env: "CARDS".into(),
        routes: vec![Route {
            label: "charge",
            method: "POST".into(),
            path: parse_path("/charges").unwrap(),
            kind: RouteKind::Apply { idempotency: None, response: Answer::new(200, serde_json::json!({"id": "{{new ch_}}"})), replay: None },
        }],
        webhooks,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_duplicated_request_is_answered_and_its_copy_arrives_later_to_nobody() {
        let api = test_cards(Vec::new());
        let world = crate::sim::world::World::new(&["c1".to_string()], Default::default());
        world.borrow_mut().net.armed.push(NetFault::at("cards", NetFaultKind::Duplicate(5_000)));
        let (handoff, taken) = deliver_with(&api, &world, Request::new("POST", "/charges"), "c1".into());
        assert_eq!(taken, Some(NetFault::at("cards", NetFaultKind::Duplicate(5_000))));
        assert!(matches!(handoff, Handoff::Reply(ref r) if r.status == 200), "{handoff:?}");
        let held = world.borrow_mut().net.held.pop().expect("the copy is on the link");
        assert_eq!((held.due_ms, held.copy), (5_000, true));
        deliver_held(Some(&api), &world, &held, false);
        let w = world.borrow();
        let applied: Vec<Option<&str>> = w.net.calls.iter().map(|c| c.reference.as_deref()).collect();
        assert_eq!(applied, vec![Some("ch_1"), Some("ch_2")], "a route without a key applies the copy again");
        assert!(w.net.log.iter().any(|(_, l)| l.starts_with("a copy of POST /charges from c1, sent again by a proxy, arrives → 200")), "{:?}", w.net.log);
    }
}
