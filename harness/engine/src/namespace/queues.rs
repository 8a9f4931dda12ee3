//! A namespace's queues as the workers and the harness address them.

/// Real visibility timeout given to SQS, s. Long, so that only the logical clock expires
/// messages (by ChangeMessageVisibility to 0).
pub const REAL_VISIBILITY_S: i32 = 3600;

/// Where the schedule's queues are: URL and trace label prefix, by queue name.
#[derive(Debug, Clone, Default)]
pub struct QueueUrls {
    /// (queue name, URL, label prefix), in the workload's order.
    pub queues: Vec<(&'static str, String, &'static str)>,
    /// The names of the FIFO queues among them ([`crate::spec::QueueSpec::fifo`]).
    pub fifo: Vec<&'static str>,
    /// The names of the outbound queues among them ([`crate::spec::QueueSpec::outbound`]).
    pub outbound: Vec<&'static str>,
}

impl QueueUrls {
    /// The URL of queue `q`. Panics on a queue the workload did not declare (a workload bug,
    /// reported with the known names).
    pub fn url(&self, q: &str) -> &str {
        &self.entry(q).1
    }

    /// The label prefix of queue `q`'s messages.
    pub fn prefix(&self, q: &str) -> &'static str {
        self.entry(q).2
    }

    /// Whether queue `q` is a FIFO queue.
    pub fn is_fifo(&self, q: &str) -> bool {
        self.fifo.contains(&q)
    }

    /// The declared name of queue `q`, as a static string.
    pub fn name(&self, q: &str) -> &'static str {
        self.entry(q).0
    }

    fn entry(&self, q: &str) -> &(&'static str, String, &'static str) {
        self.queues.iter().find(|e| e.0 == q).unwrap_or_else(|| {
            let known: Vec<&str> = self.queues.iter().map(|e| e.0).collect();
            panic!("the workload declares no queue `{q}` (queues: {})", known.join(", "))
        })
    }
}
