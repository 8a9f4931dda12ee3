//! A worker's life as the scheduler makes it: killed where it stands or once a call is applied
//! (`c1:crash`, `c1:crash@<op>:applied`), stopped gracefully (`c1:stop`), ended when its process
//! exits by itself, and started again (`c1:restart`, the drain's restarts). Ending a host drops
//! its sockets, so PostgreSQL rolls back what it had open; its backends are terminated or reset
//! for the next holder.

use anyhow::Result;

use super::{back_at_receive, inapplicable, Inapplicable, Run};
use crate::record::history::Entry;
use crate::sim::world::Status;
use crate::spec::CrashPoint;

impl Run<'_> {
    /// `crash@<op>:applied`: runs `w` to call `op`, grants it with its reply withheld (an
    /// external worker's PostgreSQL proxy reads the reply and never relays it), then kills `w`.
    /// A call that blocks, or whose reply cannot be withheld, is noted and `w` killed anyway.
    pub(super) fn crash_applied(&mut self, w: &str, op: &str) -> Result<()> {
        self.run_until(
            w,
            &format!("call `{op}`"),
            |s| matches!(s.status, Status::Parked { op: o, .. } if o == op),
        )?;
        let external = self.is_external(w);
        self.with_slot(w, |s| s.withhold = external);
        self.step(w, Some(op))?;
        self.with_slot(w, |s| s.withhold = false);
        if external && !matches!(self.status(w), Status::Waiting { .. }) {
            // Granted already, so the decision goes on: the kill lands where the worker is.
            let why = match self.with_slot(w, |s| s.blocked_by.clone()) {
                Some(_) => format!("`{op}` is blocked in the server: {w} is killed with it in flight"),
                None => format!("the reply to `{op}` was not withheld (only a PostgreSQL reply can be): {w} is killed after it"),
            };
            self.with_slot(w, |s| s.notes.push(why));
            self.collect(None);
        }
        self.crash(w)
    }

    pub(super) fn crash(&mut self, w: &str) -> Result<()> {
        self.kill(w, false)
    }

    /// Names `cp` as the crash point parked worker `w` stands at, when it stands there only as
    /// the boundary after its last call (no point marked in its code): the crash is then
    /// recorded, and traced, at `cp`.
    pub(super) fn aim(&mut self, w: &str, cp: CrashPoint) {
        self.with_slot(w, |s| {
            if let Status::Parked { at, .. } | Status::Waiting { at } = &mut s.status {
                *at = Some(cp);
            }
        });
    }

    /// `c1:stop`: asks handler `w` to stop ([`crate::sim::cx::Cx::stop_requested`]), runs it
    /// until it is back at its receive (its current message finished, what it held released
    /// or acknowledged as its code decides), and ends it there. A worker waiting at its receive
    /// makes that receive first: the signal lands during a poll, and what the poll returns is
    /// the worker's to release. Errors (inapplicable): not an in-process handler, crashed, or
    /// it does not get back to its receive.
    pub(super) fn stop(&mut self, w: &str) -> Result<()> {
        if !matches!(self.kind(w), Some(crate::spec::RoleKind::Handler { .. }))
            || self.is_external(w)
        {
            return Err(inapplicable(format!(
                "{w} is not an in-process handler: only those stop gracefully"
            )));
        }
        if self.status(w) == Status::Crashed {
            return Err(inapplicable(format!("{w} is not running")));
        }
        self.with_slot(w, |s| s.stop_requested = true);
        // Settling ends the worker as soon as it is back at its receive ([`Scheduler::fire_stops`]).
        if self.with_slot(w, |s| back_at_receive(s)) {
            self.step(w, None)?;
        }
        match self.run_until(w, "its next receive", |s| s.status == Status::Crashed) {
            Err(e) if e.downcast_ref::<Inapplicable>().is_some() => {
                // Blocked, or waiting on another worker: the signal stays, and the worker ends
                // when it gets back to its receive.
                self.with_slot(w, |s| {
                    s.notes.push(format!(
                        "stop requested: {w} ends when it gets back to its receive ({e:#})"
                    ))
                });
                self.collect(None);
                Ok(())
            }
            r => r,
        }
    }

    /// Ends the first worker asked to stop that is back at its receive (called as the
    /// scheduler settles, like the armed crashes).
    pub(super) fn fire_stops(&mut self) -> Result<()> {
        let due = self
            .workers
            .iter()
            .find(|w| self.with_slot(w, |s| s.stop_requested && back_at_receive(s)))
            .cloned();
        match due {
            Some(w) => self.kill(&w, true),
            None => Ok(()),
        }
    }

    /// Ends worker `w`'s host: a crash, or a graceful stop between messages.
    pub(super) fn kill(&mut self, w: &str, graceful: bool) -> Result<()> {
        self.end_host(w, graceful, None)?;
        self.settle(None)
    }

    /// Ends the host of the first worker whose process exited by itself
    /// ([`crate::sim::world::Mailbox::exited`]), as a crash it caused itself; returns whether
    /// there was one.
    pub(super) fn end_exited(&mut self) -> Result<bool> {
        let exited = self.workers.iter().find_map(|w| self.with_slot(w, |s| s.exited.take()).map(|e| (w.clone(), e)));
        let Some((w, (how, log_tail))) = exited else { return Ok(false) };
        if self.status(&w) == Status::Crashed {
            return Ok(true);
        }
        // What it did before it exited comes first in the history.
        self.collect(None);
        self.end_host(&w, false, Some(crate::record::history::Exited { how, log_tail }))?;
        Ok(true)
    }

    /// Ends worker `w`'s host and records it: killed (`graceful` false), stopped, or `exited`
    /// by itself.
    pub(super) fn end_host(&mut self, w: &str, graceful: bool, exited: Option<crate::record::history::Exited>) -> Result<()> {
        let status = self.status(w);
        let (at, op) = match &status {
            Status::Crashed => return Err(inapplicable(format!("{w} is already crashed"))),
            // A process that exited was at no crash point and in no call of its own choosing.
            _ if exited.is_some() => (None, None),
            Status::Parked { at, .. } => (*at, None),
            Status::Running { op, at } => (*at, Some(op.to_string())),
            _ => (None, None),
        };
        // The host's connection, if no call was under way, comes back reset as a fresh session
        // (its transaction rolled back): no lock, setting or temporary table of the ended
        // process survives, as when its backend exits, and a restart takes it instead of
        // forking a new backend.
        let shelf = self.pg_kept.clone();
        let left = shelf.catching(|| self.sim.crash(w));
        let recycled = crate::namespace::worker_pg::reset(left);
        let recycled_pids: Vec<i32> = recycled.iter().map(|c| c.pid).collect();
        shelf.give(recycled);
        let pids = self.with_slot(w, |s| {
            s.status = Status::Crashed;
            s.granted = false;
            s.blocked_by = None;
            s.in_pg = false;
            s.in_net = false;
            s.completed.clear();
            s.completed_epochs.clear();
            s.units.clear();
            s.in_flight.clear();
            s.pending = 0;
            s.notes.clear();
            s.idle = false;
            s.stop_requested = false;
            let mut pids = std::mem::take(&mut s.backend_pids);
            pids.extend(s.backend_pid.take());
            pids.sort_unstable();
            pids.dedup();
            pids
        });
        match graceful {
            true => tracing::info!(worker = w, t_ms = self.now(), "graceful stop"),
            false if exited.is_some() => tracing::info!(worker = w, t_ms = self.now(), "exited by itself"),
            false => {
                tracing::info!(worker = w, at = ?at, op = ?op, t_ms = self.now(), "crash injected")
            }
        }
        self.quiet.forget(w);
        self.history.entries.push(Entry::Crash {
            t_ms: self.now(),
            worker: w.to_string(),
            at,
            op,
            graceful,
            exited,
        });
        self.polls.db_changed();
        for pid in pids.into_iter().filter(|p| !recycled_pids.contains(p)) {
            self.admin.terminate_backend(pid)?;
        }
        Ok(())
    }

    pub(super) fn restart(&mut self, w: &str) -> Result<()> {
        if self.status(w) != Status::Crashed {
            return Err(inapplicable(format!("{w} is not crashed")));
        }
        self.sim.bounce(w);
        self.with_slot(w, |s| {
            s.status = Status::Starting;
            // The new host's first call waits for a decision of its own.
            s.granted = false;
            s.armed_failures.clear();
            s.armed_crashes.clear();
            s.last_call = None;
        });
        self.history.entries.push(Entry::Restart {
            t_ms: self.now(),
            worker: w.to_string(),
        });
        self.settle(None)
    }
}
