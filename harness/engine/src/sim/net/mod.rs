//! The simulated network between the workers and the workload's providers
//! ([`crate::provider`]): the provider hosts ([`host`]), the workers' HTTP client
//! ([`client`]), and the state the nemesis arms faults in ([`NetState`]).
//!
//! The links are turmoil's. Every message takes exactly [`LATENCY_MS`] of turmoil time, so
//! that the provider interleavings depend only on the schedule. Providers do no I/O, so no
//! real time passes while a request is on the simulated network.

pub(crate) mod client;
pub(crate) mod host;

use std::collections::BTreeSet;

use crate::nemesis::net::{NetFault, NetFaultKind};
use crate::provider::Request;

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
}

impl NetState {
    /// Takes the first armed fault for `provider` that `pick` accepts.
    pub fn take(&mut self, provider: &str, pick: impl Fn(NetFaultKind) -> bool) -> Option<NetFaultKind> {
        let i = self.armed.iter().position(|f| f.provider == provider && pick(f.kind))?;
        Some(self.armed.remove(i).kind)
    }
}
