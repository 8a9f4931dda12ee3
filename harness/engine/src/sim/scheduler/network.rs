//! The network decisions of a run: faults aimed at the workload's providers
//! ([`crate::nemesis::net`]) made as turmoil link operations, the one-way cuts hosts ask for
//! mid-step, held requests delivered by the logical clock, and the drain's final heal.

use anyhow::Result;

use super::Run;
use crate::nemesis::net::{NetFault, NetFaultKind};
use crate::record::history::{Entry, FaultEvent};
use crate::sim::net::Cut;

impl Run<'_> {
    /// Applies a network or provider fault: a partition or heal at once, a restart at once,
    /// the others armed for the provider's next request.
    pub(super) fn net_fault(&mut self, f: NetFault) -> Result<()> {
        self.fault(FaultEvent::Net { name: f.to_string(), text: f.announcement() }, vec![]);
        match f.kind {
            NetFaultKind::Partition => {
                self.world.borrow_mut().net.partitioned.insert(f.provider);
                self.partition(f.provider);
            }
            NetFaultKind::Heal => self.heal(f.provider),
            NetFaultKind::Restart => {
                self.sim.bounce(f.provider);
                let lost = {
                    let mut w = self.world.borrow_mut();
                    let before = w.net.held.len();
                    w.net.held.retain(|h| h.provider != f.provider);
                    before - w.net.held.len()
                };
                if lost > 0 {
                    self.world.borrow_mut().net.log.push((f.provider, format!("restarted: {lost} held request(s) lost")));
                }
                self.settle(None)?;
            }
            _ => self.world.borrow_mut().net.armed.push(f),
        }
        Ok(())
    }

    fn partition(&mut self, provider: &str) {
        for w in &self.workers {
            self.sim.partition(provider, w.as_str());
        }
    }

    fn heal(&mut self, provider: &'static str) {
        self.world.borrow_mut().net.partitioned.remove(provider);
        for w in &self.workers {
            self.sim.repair(provider, w.as_str());
        }
    }

    /// Makes the one-way cuts hosts asked for during the last step (turmoil
    /// `partition_oneway` also drops what is in flight on the link), to repair once the call
    /// is over ([`Run::repair_cuts`]).
    pub(super) fn make_cuts(&mut self) {
        let cuts = std::mem::take(&mut self.world.borrow_mut().net.to_cut);
        for c in cuts {
            self.sim.partition_oneway(c.from.as_str(), c.to.as_str());
            self.cuts.push(c);
        }
    }

    /// Repairs the one-way cuts of the calls now over; a provider still partitioned stays so.
    pub(super) fn repair_cuts(&mut self) {
        for Cut { from, to } in std::mem::take(&mut self.cuts) {
            self.sim.repair_oneway(from.as_str(), to.as_str());
            let still = self.world.borrow().net.partitioned.iter().any(|p| *p == from || *p == to);
            if still {
                self.sim.partition(from.as_str(), to.as_str());
            }
        }
    }

    /// Delivers the requests `net:delay` held whose time has come, in the order of their due
    /// times: each provider applies them now, at the clock move that reached their due time
    /// (their callers gave up long ago). A held request whose provider is partitioned now is
    /// lost on the link.
    pub(super) fn deliver_held(&mut self) {
        let now = self.clock.now_ms;
        let mut due: Vec<_> = {
            let mut w = self.world.borrow_mut();
            let (due, kept) = std::mem::take(&mut w.net.held).into_iter().partition(|h| h.due_ms <= now);
            w.net.held = kept;
            due
        };
        due.sort_by_key(|h| h.due_ms);
        for h in due {
            let partitioned = self.world.borrow().net.partitioned.contains(h.provider);
            let p = self.providers.iter().find(|p| p.name() == h.provider).cloned();
            crate::sim::net::deliver_held(p.as_deref(), &self.world, &h, partitioned);
        }
        self.collect_provider_log();
    }

    /// Moves the providers' lane lines into the history, ids replaced by labels.
    pub(super) fn collect_provider_log(&mut self) {
        let lines = std::mem::take(&mut self.world.borrow_mut().net.log);
        for (provider, text) in lines {
            let text = self.world.borrow_mut().names.relabel_all(&text);
            self.history.entries.push(Entry::Note { t_ms: self.now(), worker: provider.to_string(), text });
        }
    }

    /// The drain's first act: every partition is healed (Jepsen's final heal), each recorded
    /// as the `net:heal@<p>` decision would be.
    pub(super) fn heal_all(&mut self) -> Result<()> {
        let partitioned: Vec<&'static str> = self.world.borrow().net.partitioned.iter().copied().collect();
        for p in partitioned {
            self.net_fault(NetFault::at(p, NetFaultKind::Heal))?;
        }
        Ok(())
    }
}
