//! The event queue: a binary heap ordered by `(time, sequence number)`.
//!
//! The sequence number is assigned at scheduling time, so simultaneous events are delivered
//! first-in first-out: the order is total and independent of the heap's internals.
//! Cancellation is lazy: [`EventQueue::cancel`] marks a handle dead and the event is dropped
//! when it reaches the front. Components that re-arm a timer often (a CPU's next segment end)
//! may instead keep a generation number in the event and ignore stale ones; both are O(log n).

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use super::time::SimTime;

/// Identifies a scheduled event so that it can be cancelled.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct TimerHandle(u64);

#[derive(Debug)]
struct Entry<E> {
    time: SimTime,
    seq: u64,
    event: E,
}

impl<E> PartialEq for Entry<E> {
    fn eq(&self, other: &Self) -> bool {
        self.time == other.time && self.seq == other.seq
    }
}
impl<E> Eq for Entry<E> {}
impl<E> PartialOrd for Entry<E> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl<E> Ord for Entry<E> {
    /// Reversed so that `BinaryHeap` (a max-heap) pops the earliest `(time, seq)` first.
    fn cmp(&self, other: &Self) -> Ordering {
        other.time.cmp(&self.time).then_with(|| other.seq.cmp(&self.seq))
    }
}

/// A priority queue of events with stable FIFO order among simultaneous events.
#[derive(Debug)]
pub struct EventQueue<E> {
    heap: BinaryHeap<Entry<E>>,
    next_seq: u64,
    /// Sorted list of cancelled sequence numbers still in the heap (usually tiny).
    cancelled: Vec<u64>,
    delivered: u64,
}

impl<E> Default for EventQueue<E> {
    fn default() -> Self {
        Self::new()
    }
}

impl<E> EventQueue<E> {
    /// An empty queue.
    pub fn new() -> Self {
        EventQueue { heap: BinaryHeap::with_capacity(1024), next_seq: 0, cancelled: Vec::new(), delivered: 0 }
    }

    /// Schedules `event` at `time`; returns a handle that can cancel it.
    #[inline]
    pub fn schedule(&mut self, time: SimTime, event: E) -> TimerHandle {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.heap.push(Entry { time, seq, event });
        TimerHandle(seq)
    }

    /// Cancels a scheduled event. Cancelling an event that already fired is a no-op.
    pub fn cancel(&mut self, handle: TimerHandle) {
        if handle.0 >= self.next_seq {
            return;
        }
        if let Err(pos) = self.cancelled.binary_search(&handle.0) {
            self.cancelled.insert(pos, handle.0);
        }
    }

    /// Removes and returns the earliest live event.
    #[inline]
    pub fn pop(&mut self) -> Option<(SimTime, E)> {
        while let Some(entry) = self.heap.pop() {
            if !self.cancelled.is_empty() {
                if let Ok(pos) = self.cancelled.binary_search(&entry.seq) {
                    self.cancelled.remove(pos);
                    continue;
                }
            }
            self.delivered += 1;
            return Some((entry.time, entry.event));
        }
        None
    }

    /// Time of the earliest scheduled event (possibly a cancelled one).
    pub fn peek_time(&self) -> Option<SimTime> {
        self.heap.peek().map(|e| e.time)
    }

    /// Number of events in the heap (including cancelled ones not yet dropped).
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// True when no event is scheduled.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    /// Number of events delivered by [`EventQueue::pop`] so far.
    pub fn delivered(&self) -> u64 {
        self.delivered
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn simultaneous_events_are_fifo() {
        let mut q = EventQueue::new();
        for i in 0..100u32 {
            q.schedule(SimTime(10), i);
        }
        q.schedule(SimTime(5), 1000);
        assert_eq!(q.pop(), Some((SimTime(5), 1000)));
        for i in 0..100u32 {
            assert_eq!(q.pop(), Some((SimTime(10), i)));
        }
        assert_eq!(q.pop(), None);
    }

    #[test]
    fn cancelled_events_are_skipped() {
        let mut q = EventQueue::new();
        let a = q.schedule(SimTime(1), 'a');
        q.schedule(SimTime(2), 'b');
        q.cancel(a);
        q.cancel(a);
        assert_eq!(q.pop(), Some((SimTime(2), 'b')));
        assert_eq!(q.pop(), None);
        assert_eq!(q.delivered(), 1);
    }

    proptest! {
        /// Popping yields non-decreasing times, and FIFO order within equal times.
        #[test]
        fn total_order(times in proptest::collection::vec(0u64..50, 0..300)) {
            let mut q = EventQueue::new();
            for (i, t) in times.iter().enumerate() {
                q.schedule(SimTime(*t), i);
            }
            let mut last: Option<(SimTime, usize)> = None;
            while let Some((t, i)) = q.pop() {
                prop_assert_eq!(SimTime(times[i]), t);
                if let Some((lt, li)) = last {
                    prop_assert!(lt < t || (lt == t && li < i));
                }
                last = Some((t, i));
            }
        }
    }
}
