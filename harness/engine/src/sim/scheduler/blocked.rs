//! Blocked-step detection: a worker is blocked when `pg_blocking_pids` of its backend is not
//! empty, as PostgreSQL's isolationtester asks; no decision is ever taken on a sleep.

use anyhow::Result;

use super::Run;
use crate::record::history::Entry;
use crate::sim::world::Status;

impl Run<'_> {
    pub(super) fn name_of_pid(&self, pid: i32) -> String {
        let w = self.world.borrow();
        w.mailboxes
            .iter()
            .find(|(_, s)| s.backend_pid == Some(pid) || s.backend_pids.contains(&pid))
            .map(|(n, _)| n.clone())
            .unwrap_or_else(|| format!("backend {pid}"))
    }

    pub(super) fn detect_blocked(&mut self, moving: &[String]) -> Result<()> {
        for w in moving.iter().filter(|w| self.concurrent.contains(w)) {
            // Each of a concurrent worker's calls in flight in PostgreSQL, on its own backend.
            let flights: Vec<(u64, i32, &'static str)> = self.with_slot(w, |s| {
                s.in_flight
                    .iter()
                    .filter(|f| f.blocked_by.is_none())
                    .filter_map(|f| Some((f.id, f.pid?, f.op)))
                    .collect()
            });
            for (id, pid, op) in flights {
                let pids = self.admin.blocking_pids(pid)?;
                if pids.is_empty() {
                    continue;
                }
                let mut by: Vec<String> = pids.iter().map(|p| self.name_of_pid(*p)).collect();
                by.sort();
                by.dedup();
                let still = self.with_slot(w, |s| {
                    let Some(f) = s.in_flight.iter_mut().find(|f| f.id == id) else {
                        return false;
                    };
                    f.blocked_by = Some(by.clone());
                    let at = s.at();
                    s.summarize(at);
                    true
                });
                if still {
                    tracing::info!(worker = %w, op, by = ?by, "blocked call detected (pg_blocking_pids)");
                    self.history.entries.push(Entry::Blocked {
                        t_ms: self.now(),
                        worker: w.clone(),
                        op: op.to_string(),
                        by,
                    });
                }
            }
        }
        for w in moving.iter().filter(|w| !self.concurrent.contains(w)) {
            let (pid, op) = {
                let mut world = self.world.borrow_mut();
                let s = world.mailbox(w);
                match (&s.status, s.backend_pid) {
                    (Status::Running { op, .. }, Some(pid)) if s.in_pg => (pid, *op),
                    _ => continue,
                }
            };
            let pids = self.admin.blocking_pids(pid)?;
            // The call may have completed meanwhile; only a still-running call is blocked.
            if pids.is_empty() || !matches!(self.status(w), Status::Running { .. }) {
                continue;
            }
            let mut by: Vec<String> = pids.iter().map(|p| self.name_of_pid(*p)).collect();
            by.sort();
            self.with_slot(w, |s| s.blocked_by = Some(by.clone()));
            tracing::info!(worker = %w, op, by = ?by, "blocked step detected (pg_blocking_pids)");
            self.history.entries.push(Entry::Blocked {
                t_ms: self.now(),
                worker: w.clone(),
                op: op.to_string(),
                by,
            });
        }
        Ok(())
    }

    /// Clears `blocked_by` of workers whose call completed or is no longer blocked in the
    /// server. True if any changed.
    pub(super) fn recheck_blocked(&mut self) -> Result<bool> {
        let mut changed = false;
        for w in self.concurrent.clone() {
            let blocked: Vec<(u64, i32)> = self.with_slot(&w, |s| {
                s.in_flight
                    .iter()
                    .filter(|f| f.blocked_by.is_some())
                    .filter_map(|f| Some((f.id, f.pid?)))
                    .collect()
            });
            for (id, pid) in blocked {
                if self.admin.blocking_pids(pid)?.is_empty() {
                    self.with_slot(&w, |s| {
                        if let Some(f) = s.in_flight.iter_mut().find(|f| f.id == id) {
                            f.blocked_by = None;
                        }
                        let at = s.at();
                        s.summarize(at);
                    });
                    changed = true;
                }
            }
        }
        let blocked: Vec<(String, Option<i32>, bool)> = {
            let w = self.world.borrow();
            w.mailboxes
                .iter()
                .filter(|(n, s)| s.blocked_by.is_some() && !self.concurrent.contains(n))
                .map(|(n, s)| {
                    (
                        n.clone(),
                        s.backend_pid,
                        matches!(s.status, Status::Running { .. }),
                    )
                })
                .collect()
        };
        for (w, pid, running) in blocked {
            let free = !running
                || match pid {
                    Some(pid) => self.admin.blocking_pids(pid)?.is_empty(),
                    None => true,
                };
            if free {
                self.with_slot(&w, |s| s.blocked_by = None);
                changed = true;
            }
        }
        Ok(changed)
    }
}
