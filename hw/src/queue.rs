//! A FIFO that drops its oldest entry when full.

use std::collections::VecDeque;

/// At most `capacity` entries, oldest first; a push onto a full queue drops the oldest and
/// counts it.
#[derive(Debug)]
pub(crate) struct BoundedQueue<T> {
    items: VecDeque<T>,
    capacity: usize,
    dropped: u64,
}

impl<T> BoundedQueue<T> {
    /// An empty queue of `capacity` entries (at least 1).
    pub(crate) fn new(capacity: usize) -> Self {
        BoundedQueue {
            items: VecDeque::new(),
            capacity: capacity.max(1),
            dropped: 0,
        }
    }

    /// Appends `item`, dropping the oldest entry first when the queue is full.
    pub(crate) fn push(&mut self, item: T) {
        if self.items.len() >= self.capacity {
            self.items.pop_front();
            self.dropped += 1;
        }
        self.items.push_back(item);
    }

    /// The oldest entry.
    pub(crate) fn pop(&mut self) -> Option<T> {
        self.items.pop_front()
    }

    /// How many entries were dropped because the queue was full.
    pub(crate) fn dropped(&self) -> u64 {
        self.dropped
    }
}

#[cfg(test)]
mod tests {
    use super::BoundedQueue;

    #[test]
    fn drops_the_oldest_when_full() {
        let mut q = BoundedQueue::new(2);
        q.push(1);
        q.push(2);
        q.push(3);
        assert_eq!(q.dropped(), 1);
        assert_eq!(q.pop(), Some(2));
        assert_eq!(q.pop(), Some(3));
        assert_eq!(q.pop(), None);
    }
}
