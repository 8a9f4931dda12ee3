//! A reorder buffer: results that threads finish in any order leave it in index order, each
//! as soon as it and every one before it are in. The slots hand over generated cases this
//! way, and [`super::explore_each`] its explorations, so that what a consumer sees does not
//! depend on how many threads ran.

use std::collections::BTreeMap;

/// Results waiting for those before them.
pub(super) struct InOrder<T> {
    waiting: BTreeMap<u64, T>,
    next: u64,
}

impl<T> InOrder<T> {
    /// An empty buffer expecting index 0 first.
    pub(super) fn new() -> InOrder<T> {
        InOrder { waiting: BTreeMap::new(), next: 0 }
    }

    /// The next index expected: every one below it has left the buffer or never comes.
    pub(super) fn next(&self) -> u64 {
        self.next
    }

    /// Takes the result of `index` and returns, in index order, every result now due: the
    /// run of consecutive indices from the next one expected. Indices for which `absent`
    /// holds never come (another shard's cases) and are not waited for.
    pub(super) fn put(&mut self, index: u64, item: T, absent: impl Fn(u64) -> bool) -> Vec<(u64, T)> {
        self.waiting.insert(index, item);
        let mut due = Vec::new();
        loop {
            while absent(self.next) {
                self.next += 1;
            }
            let Some(item) = self.waiting.remove(&self.next) else { break };
            due.push((self.next, item));
            self.next += 1;
        }
        due
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_leave_in_index_order_as_soon_as_those_before_are_in() {
        let mut b = InOrder::new();
        assert!(b.put(2, "c", |_| false).is_empty());
        assert!(b.put(1, "b", |_| false).is_empty());
        assert_eq!(b.put(0, "a", |_| false), vec![(0, "a"), (1, "b"), (2, "c")]);
        assert_eq!(b.put(3, "d", |_| false), vec![(3, "d")]);
    }

    #[test]
    fn absent_indices_are_not_waited_for() {
        // Odd indices belong to another shard.
        let mut b = InOrder::new();
        assert!(b.put(2, "c", |i| i % 2 == 1).is_empty());
        assert_eq!(b.put(0, "a", |i| i % 2 == 1), vec![(0, "a"), (2, "c")]);
    }
}
