//! Labels for identifiers, so that traces never show random ids.

use std::collections::BTreeMap;

use uuid::Uuid;

/// Readable labels for identifiers, so that traces never show random ids.
///
/// Scenario names (`e1`, `p1`) are registered up front; other ids get a label the first time
/// they are seen, in order, with a prefix the workload chooses (`m1` for the first message on
/// a queue labelled `m`, `ob1` for the first outbox row a handler labels `ob`).
#[derive(Debug, Default)]
pub struct Names {
    labels: BTreeMap<String, String>,
    /// The id each label was last given to (a redelivered copy takes its original's label).
    latest: BTreeMap<String, String>,
    counters: BTreeMap<&'static str, u32>,
}

impl Names {
    /// `text` with every known id replaced by its label.
    pub fn relabel(&self, text: &str) -> String {
        if !text.contains('-') {
            return text.to_string();
        }
        let mut out = text.to_string();
        for (id, label) in &self.labels {
            if id.len() == 36 && out.contains(id.as_str()) {
                out = out.replace(id.as_str(), label);
            }
        }
        out
    }

    /// Registers a fixed label.
    pub fn set(&mut self, id: impl ToString, label: &str) {
        self.labels.insert(id.to_string(), label.to_string());
        self.latest.insert(label.to_string(), id.to_string());
    }

    /// The label of `id`, assigning `<prefix><n>` on first sight.
    pub fn label(&mut self, prefix: &'static str, id: impl ToString) -> String {
        let id = id.to_string();
        if let Some(l) = self.labels.get(&id) {
            return l.clone();
        }
        let n = self.counters.entry(prefix).or_insert(0);
        *n += 1;
        let l = format!("{prefix}{n}");
        self.labels.insert(id.clone(), l.clone());
        self.latest.insert(l.clone(), id);
        l
    }

    /// The label of `id` if it has one.
    pub fn get(&self, id: impl ToString) -> Option<String> {
        self.labels.get(&id.to_string()).cloned()
    }

    /// The id most recently labelled `label` (e.g. the SQS MessageId of `m1`, or of its
    /// redelivered copy), if any.
    pub fn id_of(&self, label: &str) -> Option<&str> {
        self.latest.get(label).map(String::as_str)
    }

    /// The label of a UUID, or its first 8 hex digits when unknown.
    pub fn uuid(&self, id: &Uuid) -> String {
        self.get(id).unwrap_or_else(|| id.simple().to_string()[..8].to_string())
    }
}

