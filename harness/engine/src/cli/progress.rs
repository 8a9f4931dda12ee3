//! Progress of long runs: an `indicatif` bar when stdout is a terminal, a plain line every
//! [`PLAIN_EVERY_S`] seconds in CI (`CI` set) or when output goes to a file or pipe.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};

use crate::explore::Stats;

/// Seconds between plain progress lines.
pub const PLAIN_EVERY_S: u64 = 5;

/// Whether to draw a bar: stdout is a terminal and `CI` is not set.
pub fn interactive() -> bool {
    std::io::stdout().is_terminal() && std::env::var_os("CI").is_none()
}

/// One scenario's progress: schedules done, schedules/s, failures so far in the run.
pub struct Progress {
    bar: Option<ProgressBar>,
    label: String,
    last: Instant,
    failures: usize,
}

impl Progress {
    /// Starts reporting for scenario `label`; `total` is the budget in schedules when known.
    /// `failures` is the number of scenarios that failed so far in this run.
    pub fn start(label: &str, total: Option<u64>, failures: usize) -> Self {
        let bar = interactive().then(|| {
            let bar = match total {
                Some(n) => ProgressBar::new(n),
                None => ProgressBar::new_spinner(),
            };
            let template = if total.is_some() {
                "{prefix} [{elapsed_precise}] {bar:30} {pos}/{len} schedules {msg}"
            } else {
                "{prefix} [{elapsed_precise}] {spinner} {pos} schedules {msg}"
            };
            if let Ok(style) = ProgressStyle::with_template(template) {
                bar.set_style(style);
            }
            bar.set_prefix(label.to_string());
            bar.enable_steady_tick(Duration::from_millis(200));
            bar
        });
        Progress { bar, label: label.to_string(), last: Instant::now(), failures }
    }

    /// Reports the stats after a schedule.
    pub fn update(&mut self, st: &Stats, started: Instant) {
        let rate = st.schedules as f64 / started.elapsed().as_secs_f64().max(1e-9);
        match &self.bar {
            Some(bar) => {
                bar.set_position(st.schedules);
                bar.set_message(format!("{rate:.1}/s, {} failed", self.failures));
            }
            None if self.last.elapsed() >= Duration::from_secs(PLAIN_EVERY_S) => {
                self.last = Instant::now();
                eprintln!("  … {}: {} schedules, {rate:.1}/s, {} failed so far", self.label, st.schedules, self.failures);
            }
            None => {}
        }
    }

    /// Removes the bar (the summary lines follow it).
    pub fn finish(self) {
        if let Some(bar) = self.bar {
            bar.finish_and_clear();
        }
    }
}
