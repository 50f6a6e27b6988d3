//! A table of owned objects keyed by the `u32` handles the device hands out.

use std::collections::BTreeMap;

/// Objects by handle. Handles start at 1 and are not reused while the counter has not wrapped
/// (after 2³² creations), so a stale handle is `EINVAL` rather than another object.
#[derive(Debug)]
pub(crate) struct Table<T> {
    next: u32,
    map: BTreeMap<u32, T>,
}

impl<T> Default for Table<T> {
    fn default() -> Self {
        Table {
            next: 1,
            map: BTreeMap::new(),
        }
    }
}

impl<T> Table<T> {
    /// The handle the next [`Table::insert`] returns (a CQ is created with its handle as
    /// `cq_context`, before it is inserted).
    pub(crate) fn vacant(&self) -> u32 {
        let mut k = self.next;
        while k == 0 || self.map.contains_key(&k) {
            k = k.wrapping_add(1);
        }
        k
    }

    /// Stores `value` under [`Table::vacant`] and returns that handle.
    pub(crate) fn insert(&mut self, value: T) -> u32 {
        let k = self.vacant();
        self.map.insert(k, value);
        self.next = k.wrapping_add(1);
        k
    }

    /// The object of handle `k`.
    pub(crate) fn get(&self, k: u32) -> Option<&T> {
        self.map.get(&k)
    }

    /// Removes and returns the object of handle `k`.
    pub(crate) fn remove(&mut self, k: u32) -> Option<T> {
        self.map.remove(&k)
    }

    /// Every object with its handle, oldest first.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (u32, &T)> {
        self.map.iter().map(|(k, v)| (*k, v))
    }

    /// Removes every object, oldest first.
    pub(crate) fn drain(&mut self) -> impl Iterator<Item = T> {
        std::mem::take(&mut self.map).into_values()
    }
}

#[cfg(test)]
mod tests {
    use super::Table;

    #[test]
    fn handles_are_not_reused() {
        let mut t = Table::default();
        let a = t.insert('a');
        assert_eq!(a, 1);
        assert_eq!(t.vacant(), 2);
        let b = t.insert('b');
        assert_eq!(t.remove(a), Some('a'));
        assert_eq!(t.get(a), None);
        let c = t.insert('c');
        assert!(c != a && c != b);
        assert_eq!(t.iter().map(|(k, _)| k).collect::<Vec<_>>(), vec![b, c]);
        assert_eq!(t.drain().collect::<String>(), "bc");
        assert_eq!(t.get(b), None);
    }

    #[test]
    fn wraps_past_zero_and_skips_live_handles() {
        let mut t = Table {
            next: u32::MAX,
            ..Table::default()
        };
        assert_eq!(t.insert(0), u32::MAX);
        assert_eq!(t.insert(1), 1);
        t.next = u32::MAX;
        assert_eq!(t.insert(2), 2);
    }
}
