//! Labels for identifiers, so that traces never show random ids.

use std::collections::BTreeMap;

use uuid::Uuid;

/// The label prefix of a UUID first seen in trace text ([`Labels::relabel_all`]).
const UNKNOWN_PREFIX: &str = "k";

/// The hyphenated UUIDs in `text` (8-4-4-4-12 hex digits, not inside a longer run of letters
/// and digits: `lock-<uuid>` and `<uuid>-retry` hold one), in order of appearance.
pub fn uuids_in(text: &str) -> Vec<&str> {
    const LEN: usize = 36;
    let b = text.as_bytes();
    let is_part = |c: u8| c.is_ascii_alphanumeric();
    let shaped = |w: &[u8]| w.iter().enumerate().all(|(i, c)| if matches!(i, 8 | 13 | 18 | 23) { *c == b'-' } else { c.is_ascii_hexdigit() });
    let mut out = Vec::new();
    let mut i = 0;
    while i + LEN <= b.len() {
        let bounded = (i == 0 || !is_part(b[i - 1])) && b.get(i + LEN).is_none_or(|c| !is_part(*c));
        if bounded && shaped(&b[i..i + LEN]) {
            out.push(&text[i..i + LEN]);
            i += LEN;
        } else {
            i += 1;
        }
    }
    out
}

/// Readable labels for identifiers, so that traces never show random ids.
///
/// Scenario names (`e1`, `p1`) are registered up front; other ids get a label the first time
/// they are seen, in order, with a prefix the workload chooses (`m1` for the first message on
/// a queue labelled `m`, `ob1` for the first outbox row a handler labels `ob`).
#[derive(Debug, Default)]
pub struct Labels {
    labels: BTreeMap<String, String>,
    /// The id each label was last given to (a redelivered copy takes its original's label).
    latest: BTreeMap<String, String>,
    counters: BTreeMap<&'static str, u32>,
    /// UUIDs first seen in trace text, with their `k<n>` labels ([`Labels::relabel_all`]): kept
    /// apart so that [`Labels::label`], [`Labels::get`] and [`Labels::id_of`] never see them.
    unknown: BTreeMap<String, String>,
}

impl Labels {
    /// `text` with every known id replaced by its label.
    pub fn relabel(&self, text: &str) -> String {
        if !text.contains('-') {
            return text.to_string();
        }
        let mut out = text.to_string();
        // The registered labels go first, so one wins over a `k<n>` given to the same id
        // before the workload registered it: by then that id is no longer in the text.
        for (id, label) in self.labels.iter().chain(&self.unknown) {
            if id.len() == 36 && out.contains(id.as_str()) {
                out = out.replace(id.as_str(), label);
            }
        }
        out
    }

    /// `text` with every known id replaced by its label, and every other UUID (hyphenated, 36
    /// characters) labelled `k<n>` in order of first sight: an id the workload never registered,
    /// in practice an idempotency key a handler derived from random ids (`key-per-attempt`'s
    /// `uuid_v5(operation, "attempt-2")`), which would otherwise make the same schedule print
    /// another trace on every run. Known ids keep their labels; the same unknown id gets the
    /// same `k<n>` each time it appears.
    pub fn relabel_all(&mut self, text: &str) -> String {
        self.relabel_all_after(text, 0);
        self.relabel(text)
    }

    /// How many UUIDs [`Labels::relabel_all`] labelled `k<n>` so far.
    pub fn unknown_count(&self) -> usize {
        self.unknown.len()
    }

    /// [`Labels::relabel_all`] with its `k<n>` labels numbered after `before` others (those
    /// of another [`Labels`], the trace's): labels every UUID of `text` not labelled yet.
    pub fn relabel_all_after(&mut self, text: &str, before: usize) {
        for id in uuids_in(text) {
            if !self.labels.contains_key(id) && !self.unknown.contains_key(id) {
                let n = before + self.unknown.len() + 1;
                self.unknown.insert(id.to_string(), format!("{UNKNOWN_PREFIX}{n}"));
            }
        }
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


#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "7ea6c87a-0d5e-57cb-97cf-4e206b835970";
    const B: &str = "e5e7504f-4dd8-51e0-9579-847f7a0dd990";

    #[test]
    fn unknown_uuids_get_labels_in_order_of_first_sight_and_known_ones_keep_theirs() {
        let mut names = Labels::default();
        names.set(B, "op1");
        let first = names.relabel_all(&format!("PUT /invoices/{A} from o2: inv1 applied under key {A}; op {B}"));
        assert_eq!(first, "PUT /invoices/k1 from o2: inv1 applied under key k1; op op1");
        let c = "133babce-64df-5871-ba60-19eab5e54c53";
        assert_eq!(names.relabel_all(&format!("{c} then {A}")), "k2 then k1");
    }

    #[test]
    fn only_whole_hyphenated_uuids_are_labelled() {
        let mut names = Labels::default();
        let longer = format!("{A}0");
        let text = format!("x{longer} 7ea6c87a0d5e57cb97cf4e206b835970 {}", &A[..35]);
        assert_eq!(names.relabel_all(&text), text);
        assert_eq!(names.relabel_all(&format!("lock-{A}-retry {B}-{A}")), "lock-k1-retry k2-k1");
    }

    #[test]
    fn a_generic_label_stays_out_of_the_workloads_labels_and_gives_way_to_them() {
        let mut names = Labels::default();
        assert_eq!(names.relabel_all(&format!("key {A}")), "key k1");
        assert!(names.get(A).is_none() && names.id_of("k1").is_none());
        assert_eq!(names.label("m", A), "m1");
        assert_eq!(names.relabel_all(&format!("key {A}")), "key m1");
    }
}
