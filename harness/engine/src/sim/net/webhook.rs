//! Webhook delivery, decided once for every front-end: which event a provider delivers next
//! to a role's endpoint, under the faults armed for it, and what becomes of the event once the
//! endpoint answered or did not ([`crate::provider::api::Webhook`]).
//!
//! A provider queues an event for each effect that a webhook's apply route applies
//! ([`crate::provider::Event`]); the events wait in [`NetState::events`], oldest first. A
//! delivery ([`take`]) hands the oldest pending event of a role to one of its workers; the
//! endpoint's answer ([`answered`]) ends it: a 2xx is done with, anything else (a non-2xx
//! status, a connection refused or closed, a process killed mid-request) queues the event again
//! at the back, until it has been delivered [`crate::provider::api::Webhook::attempts_max`]
//! times, when the provider gives up on it. This is the at-least-once, retried-on-failure
//! delivery Stripe documents ("Best practices for using webhooks": handle duplicate events;
//! events are not delivered in the order they were generated).
//!
//! Faults (`webhook:` of [`crate::nemesis::net`]): `webhook:duplicate@<p>` keeps the next
//! delivery's event pending whatever the answer (it is delivered again); `webhook:reorder@<p>`
//! makes the next delivery take the event queued behind the oldest one. A partitioned provider
//! delivers nothing until healed.
//!
//! Each delivery is a row of the facts table `crashpoint_webhooks` ([`Delivered`]) and a line of
//! the provider's lane.

use crate::nemesis::net::NetFaultKind;
use crate::provider::{Event, Provider};
use crate::sim::world::SharedWorld;

use super::NetState;

/// An event waiting to be delivered.
#[derive(Debug, Clone)]
pub struct Pending {
    /// The event.
    pub event: Event,
    /// The role whose endpoint receives it.
    pub role: &'static str,
    /// The endpoint's path.
    pub path: String,
    /// Deliveries made so far.
    pub attempts: u32,
    /// Deliveries before the provider gives up on it.
    pub attempts_max: u32,
}

/// One delivery under way: the event taken from the queue, and whether it is to be delivered
/// again whatever the answer (`webhook:duplicate`).
#[derive(Debug, Clone)]
pub struct Delivery {
    /// The event and its delivery count, this delivery included.
    pub pending: Pending,
    /// `webhook:duplicate` chose it: it stays pending after this delivery.
    pub again: bool,
}

/// One delivery as the facts table `crashpoint_webhooks` has it ([`crate::checker::facts`]).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Delivered {
    /// The provider (`cards`).
    pub provider: &'static str,
    /// The webhook's label (`payment_succeeded`).
    pub webhook: &'static str,
    /// The event's id (`evt_1`).
    pub event: String,
    /// The effect's reference it is about (`pi_1`).
    pub about: String,
    /// Which delivery of the event it was, from 1.
    pub attempt: u32,
    /// The endpoint's answer; `None`: none came (connection refused or closed, process killed).
    pub status: Option<u16>,
    /// The event body delivered.
    pub body: serde_json::Value,
    /// When the delivery ended (its answer reached the provider, or was lost), logical ms.
    pub t_ms: u64,
}

/// Queues `events`, which `provider` made as it applied an effect, for the roles its webhooks
/// name, with a lane line each.
pub(super) fn queue(net: &mut NetState, provider: &dyn Provider, events: &[Event]) {
    // Every request a provider handles comes through here; most queue nothing.
    if events.is_empty() {
        return;
    }
    let hooks = provider.webhooks();
    for e in events {
        let Some(w) = hooks.iter().find(|w| w.label == e.webhook) else { continue };
        net.log.push((e.provider, format!("{} ({}, about {}) queued for the endpoint of role {}", e.id, w.label, e.about, w.role)));
        net.events.push(Pending { event: e.clone(), role: w.role, path: w.path.clone(), attempts: 0, attempts_max: w.attempts_max.max(1) });
    }
}

/// Whether an event waits for a delivery to role `role`'s endpoint (its provider not
/// partitioned: a partitioned provider starts no delivery; one under way still ends).
pub fn pending_for(net: &NetState, role: &str) -> bool {
    net.events.iter().any(|p| p.role == role && !net.partitioned.contains(p.event.provider))
}

/// Takes the event the next delivery of webhook `label` to role `role`'s endpoint carries, by
/// worker `to`: the oldest pending one, or with `webhook:reorder` armed for its provider the one
/// queued behind it. `None`: nothing pending for it.
pub fn take(world: &SharedWorld, role: &str, label: &str, to: &str) -> Option<Delivery> {
    let mut w = world.borrow_mut();
    let net = &mut w.net;
    let mine = |p: &Pending| p.role == role && p.event.webhook == label;
    let first = net.events.iter().position(|p| mine(p) && !net.partitioned.contains(p.event.provider))?;
    let provider = net.events[first].event.provider;
    let behind = net.events.iter().skip(first + 1).position(|p| mine(p) && p.event.provider == provider).map(|i| i + first + 1);
    let i = match behind {
        Some(b) if net.take(provider, |k| k == NetFaultKind::WebhookReorder).is_some() => b,
        _ => first,
    };
    let mut pending = net.events.remove(i);
    pending.attempts += 1;
    let again = net.take(provider, |k| k == NetFaultKind::WebhookDuplicate).is_some();
    let how = match (i == first, again) {
        (true, false) => String::new(),
        (false, false) => format!(", before the older {}", net.events[first].event.id),
        (true, true) => ", to be delivered again whatever the answer (within its deliveries)".into(),
        (false, true) => format!(", before the older {}, to be delivered again whatever the answer (within its deliveries)", net.events[first].event.id),
    };
    let line = format!("{} delivered to {to} (delivery {}){how}", pending.event.id, pending.attempts);
    net.log.push((provider, line));
    Some(Delivery { pending, again })
}

/// Ends `d` as its answer reaches the provider, or does not: the endpoint answered `status`
/// (`None`: no answer reached the provider, `why`). Records the row (at this logical time) and
/// the lane line; queues the event again unless a 2xx ended it (and `webhook:duplicate` did not
/// choose it), or gives up on it after its last delivery (`webhook:duplicate` too is bounded by
/// the webhook's deliveries).
pub fn answered(world: &SharedWorld, d: Delivery, status: Option<u16>, why: &str) {
    let mut w = world.borrow_mut();
    let t_ms = w.now_ms;
    let net = &mut w.net;
    let Delivery { pending, again } = d;
    let e = &pending.event;
    net.deliveries.push(Delivered {
        provider: e.provider,
        webhook: e.webhook,
        event: e.id.clone(),
        about: e.about.clone(),
        attempt: pending.attempts,
        status,
        body: e.body.clone(),
        t_ms,
    });
    let ok = status.is_some_and(|s| (200..300).contains(&s));
    let answer = match status {
        Some(s) => format!("answered {s}"),
        None => format!("not answered: {why}"),
    };
    let done = ok && !again;
    let next = match (done, pending.attempts >= pending.attempts_max) {
        (true, _) => String::new(),
        (false, true) => format!("; {} gives up on it after {} deliveries", e.provider, pending.attempts),
        (false, false) => "; queued again".into(),
    };
    net.log.push((e.provider, format!("{} {answer}{next}", e.id)));
    if !done && pending.attempts < pending.attempts_max {
        net.events.push(pending);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nemesis::net::NetFault;
    use crate::provider::api::{Api, Webhook};
    use crate::provider::Request;
    use serde_json::json;

    /// A provider whose `charge` route applies every request and sends webhook `paid` to role
    /// `w`, at most `max` deliveries per event.
    fn cards(max: u32) -> Api {
        super::super::test_cards(vec![Webhook {
            label: "paid",
            on: "charge",
            path: "/hooks".into(),
            role: "w",
            port_env: "HOOK_PORT".into(),
            body: json!({"id": "{{new evt_}}", "object": "{{effect}}", "amount": "{{req.amount}}"}),
            attempts_max: max,
        }])
    }

    /// Applies `n` charges through the shared front-end path; returns the world.
    fn charged(api: &Api, n: usize) -> SharedWorld {
        let world = crate::sim::world::World::new(&["w1".to_string()], Default::default());
        for i in 0..n {
            let req = Request::new("POST", "/charges").json(json!({"amount": 100 + i}));
            super::super::deliver(api, &world, req, "c1".into());
        }
        world
    }

    #[test]
    fn an_applied_effect_queues_its_event_with_the_rendered_body() {
        let api = cards(3);
        let world = charged(&api, 1);
        let d = take(&world, "w", "paid", "w1").expect("one event pending");
        assert_eq!((d.pending.event.id.as_str(), d.pending.event.about.as_str(), d.pending.attempts), ("evt_1", "ch_1", 1));
        assert_eq!(d.pending.event.body, json!({"id": "evt_1", "object": {"id": "ch_1"}, "amount": 100}));
        assert!(take(&world, "w", "paid", "w1").is_none(), "a delivery under way is not pending");
        assert!(take(&world, "x", "paid", "x1").is_none(), "another role's endpoint gets nothing");
    }

    #[test]
    fn a_failed_delivery_is_made_again_until_the_provider_gives_up() {
        let api = cards(2);
        let world = charged(&api, 1);
        let d = take(&world, "w", "paid", "w1").unwrap();
        answered(&world, d, Some(500), "");
        assert!(pending_for(&world.borrow().net, "w"), "a 500 queues the event again");
        let d = take(&world, "w", "paid", "w1").unwrap();
        assert_eq!(d.pending.attempts, 2);
        answered(&world, d, None, "connection closed");
        assert!(!pending_for(&world.borrow().net, "w"), "after its last delivery the provider gives up");
        let w = world.borrow();
        let rows: Vec<(u32, Option<u16>)> = w.net.deliveries.iter().map(|r| (r.attempt, r.status)).collect();
        assert_eq!(rows, vec![(1, Some(500)), (2, None)]);
        assert!(w.net.log.iter().any(|(_, l)| l == "evt_1 not answered: connection closed; cards gives up on it after 2 deliveries"), "{:?}", w.net.log);
    }

    #[test]
    fn a_2xx_ends_an_event_unless_it_is_to_be_delivered_twice() {
        let api = cards(5);
        let world = charged(&api, 1);
        let d = take(&world, "w", "paid", "w1").unwrap();
        answered(&world, d, Some(200), "");
        assert!(!pending_for(&world.borrow().net, "w"));
        let world = charged(&api, 1);
        world.borrow_mut().net.armed.push(NetFault::at("cards", NetFaultKind::WebhookDuplicate));
        let d = take(&world, "w", "paid", "w1").unwrap();
        assert!(d.again);
        answered(&world, d, Some(204), "");
        let d = take(&world, "w", "paid", "w1").expect("delivered again after its 2xx");
        assert_eq!((d.pending.attempts, d.again), (2, false));
    }

    #[test]
    fn reorder_delivers_the_event_behind_the_oldest_first() {
        let api = cards(5);
        let world = charged(&api, 2);
        world.borrow_mut().net.armed.push(NetFault::at("cards", NetFaultKind::WebhookReorder));
        assert_eq!(take(&world, "w", "paid", "w1").unwrap().pending.event.id, "evt_2");
        assert!(world.borrow().net.armed.is_empty(), "the fault is spent");
        assert_eq!(take(&world, "w", "paid", "w1").unwrap().pending.event.id, "evt_1");
    }

    #[test]
    fn a_partitioned_provider_delivers_nothing() {
        let api = cards(5);
        let world = charged(&api, 1);
        world.borrow_mut().net.partitioned.insert("cards");
        assert!(!pending_for(&world.borrow().net, "w"));
        assert!(take(&world, "w", "paid", "w1").is_none());
        world.borrow_mut().net.partitioned.clear();
        assert!(take(&world, "w", "paid", "w1").is_some());
    }
}
