//! The event queue: a binary heap ordered by `(time, sequence number)`.
//!
//! The sequence number is assigned at scheduling time, so simultaneous events are delivered
//! first-in first-out: the order is total and independent of the heap's internals.
//! Cancellation is lazy: [`EventQueue::cancel`] marks a handle dead and the event is dropped
//! when it reaches the front.
//!
//! **Slots** are for timers that are re-armed far more often than they fire (a core's end of
//! segment: every re-resolution of the core moves it). Each slot holds at most one event, in an
//! indexed heap beside the main one: [`EventQueue::set_slot`] replaces the slot's event in
//! O(log slots) instead of leaving a stale event in the main heap to be popped and ignored. A
//! slot's event takes its sequence number from the same counter as every other event, so the
//! delivery order is exactly the one a single heap would give with the replaced events left out.

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
    slots: Slots<E>,
}

const NOT_QUEUED: u32 = u32::MAX;

/// The slot events: an indexed binary min-heap of `(time, seq, slot)`, the keys inline so that
/// sifting touches one array.
#[derive(Debug)]
struct Slots<E> {
    /// Each slot's pending event (meaningful while the slot is queued).
    event: Vec<Option<E>>,
    /// Each slot's index in `heap`, or [`NOT_QUEUED`].
    pos: Vec<u32>,
    heap: Vec<SlotKey>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct SlotKey {
    time: SimTime,
    seq: u64,
    slot: u32,
}

impl<E> Slots<E> {
    #[inline]
    fn place(&mut self, i: usize, key: SlotKey) {
        self.heap[i] = key;
        self.pos[key.slot as usize] = i as u32;
    }

    fn sift_up(&mut self, mut i: usize) {
        let key = self.heap[i];
        while i > 0 {
            let parent = (i - 1) / 2;
            if self.heap[parent] <= key {
                break;
            }
            self.place(i, self.heap[parent]);
            i = parent;
        }
        self.place(i, key);
    }

    fn sift_down(&mut self, mut i: usize) {
        let key = self.heap[i];
        let n = self.heap.len();
        loop {
            let left = 2 * i + 1;
            if left >= n {
                break;
            }
            let right = left + 1;
            let child = if right < n && self.heap[right] < self.heap[left] { right } else { left };
            if key <= self.heap[child] {
                break;
            }
            self.place(i, self.heap[child]);
            i = child;
        }
        self.place(i, key);
    }

    fn set(&mut self, slot: u32, time: SimTime, seq: u64, event: E) {
        let s = slot as usize;
        if s >= self.event.len() {
            self.event.resize_with(s + 1, || None);
            self.pos.resize(s + 1, NOT_QUEUED);
        }
        self.event[s] = Some(event);
        let key = SlotKey { time, seq, slot };
        match self.pos[s] {
            NOT_QUEUED => {
                self.heap.push(key);
                let i = self.heap.len() - 1;
                self.sift_up(i);
            }
            i => {
                let i = i as usize;
                let earlier = key < self.heap[i];
                self.heap[i] = key;
                if earlier {
                    self.sift_up(i);
                } else {
                    self.sift_down(i);
                }
            }
        }
    }

    fn remove(&mut self, slot: u32) -> Option<(SimTime, E)> {
        let s = slot as usize;
        let i = *self.pos.get(s)? as usize;
        if i == NOT_QUEUED as usize {
            return None;
        }
        let time = self.heap[i].time;
        self.pos[s] = NOT_QUEUED;
        let last = self.heap.pop().expect("a queued slot is in the heap");
        if i < self.heap.len() {
            self.place(i, last);
            self.sift_down(i);
            self.sift_up(self.pos[last.slot as usize] as usize);
        }
        self.event[s].take().map(|e| (time, e))
    }

    fn peek(&self) -> Option<(SimTime, u64)> {
        self.heap.first().map(|k| (k.time, k.seq))
    }
}

impl<E> Default for EventQueue<E> {
    fn default() -> Self {
        Self::new()
    }
}

impl<E> EventQueue<E> {
    /// An empty queue.
    pub fn new() -> Self {
        EventQueue {
            heap: BinaryHeap::with_capacity(1024),
            next_seq: 0,
            cancelled: Vec::new(),
            delivered: 0,
            slots: Slots { event: Vec::new(), pos: Vec::new(), heap: Vec::new() },
        }
    }

    /// Sets slot `slot`'s event to `event` at `time`, replacing the one it held (which is then
    /// never delivered). Slots are small integers (a core's index); any number may be used.
    #[inline]
    pub fn set_slot(&mut self, slot: u32, time: SimTime, event: E) {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.slots.set(slot, time, seq, event);
    }

    /// Empties slot `slot` (its event, if any, is never delivered).
    #[inline]
    pub fn clear_slot(&mut self, slot: u32) {
        self.slots.remove(slot);
    }

    /// Drops cancelled events from the front of the main heap.
    fn skip_cancelled(&mut self) {
        while !self.cancelled.is_empty() {
            let Some(top) = self.heap.peek() else { return };
            let Ok(pos) = self.cancelled.binary_search(&top.seq) else { return };
            self.cancelled.remove(pos);
            self.heap.pop();
        }
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

    /// Removes and returns the earliest live event (of the main heap or of a slot).
    #[inline]
    pub fn pop(&mut self) -> Option<(SimTime, E)> {
        self.skip_cancelled();
        let from_slot = match (self.heap.peek(), self.slots.peek()) {
            (_, None) => false,
            (None, Some(_)) => true,
            (Some(main), Some(slot)) => slot < (main.time, main.seq),
        };
        let (time, event) = if from_slot {
            let slot = self.slots.heap[0].slot;
            self.slots.remove(slot).expect("the earliest slot has an event")
        } else {
            let entry = self.heap.pop()?;
            (entry.time, entry.event)
        };
        self.delivered += 1;
        Some((time, event))
    }

    /// Time of the earliest scheduled event (possibly a cancelled one).
    pub fn peek_time(&self) -> Option<SimTime> {
        let main = self.heap.peek().map(|e| e.time);
        let slot = self.slots.peek().map(|(t, _)| t);
        match (main, slot) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Number of events pending (including cancelled ones not yet dropped).
    pub fn len(&self) -> usize {
        self.heap.len() + self.slots.heap.len()
    }

    /// True when no event is scheduled.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty() && self.slots.heap.is_empty()
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

    #[test]
    fn a_slot_holds_one_event_and_orders_with_the_rest() {
        let mut q = EventQueue::new();
        q.schedule(SimTime(5), "main 5");
        q.set_slot(3, SimTime(1), "slot 3 at 1");
        q.set_slot(3, SimTime(7), "slot 3 at 7"); // replaces the event at 1
        q.set_slot(0, SimTime(5), "slot 0 at 5"); // after "main 5": scheduled later
        q.set_slot(9, SimTime(2), "slot 9 at 2");
        q.clear_slot(9);
        q.clear_slot(9);
        q.clear_slot(42); // never used
        assert_eq!(q.len(), 3);
        assert_eq!(q.peek_time(), Some(SimTime(5)));
        assert_eq!(q.pop(), Some((SimTime(5), "main 5")));
        assert_eq!(q.pop(), Some((SimTime(5), "slot 0 at 5")));
        assert_eq!(q.pop(), Some((SimTime(7), "slot 3 at 7")));
        assert_eq!(q.pop(), None);
        assert!(q.is_empty());
    }

    #[derive(Clone, Debug)]
    enum Op {
        Schedule(u64),
        SetSlot(u32, u64),
        ClearSlot(u32),
        Cancel(usize),
        Pop,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0u64..40).prop_map(Op::Schedule),
            (0u32..6, 0u64..40).prop_map(|(s, t)| Op::SetSlot(s, t)),
            (0u32..7).prop_map(Op::ClearSlot),
            (0usize..50).prop_map(Op::Cancel),
            Just(Op::Pop),
        ]
    }

    proptest! {
        /// Slots deliver exactly what one heap delivers when each re-armed slot's previous
        /// event is filtered out as stale (the generation-number pattern they replace).
        #[test]
        fn slots_match_a_single_heap_with_stale_events_ignored(ops in proptest::collection::vec(op(), 0..200)) {
            let mut q: EventQueue<(u64, Option<(u32, u32)>)> = EventQueue::new();
            // The reference: one heap; a slot event carries (slot, generation).
            let mut r: EventQueue<(u64, Option<(u32, u32)>)> = EventQueue::new();
            let mut gen = [0u32; 7];
            let mut handles = Vec::new();
            let mut now = 0u64;
            let mut id = 0u64;
            let ref_pop = |r: &mut EventQueue<(u64, Option<(u32, u32)>)>, gen: &[u32; 7]| loop {
                match r.pop() {
                    Some((_, (_, Some((s, g))))) if gen[s as usize] != g => continue,
                    other => break other,
                }
            };
            for o in ops {
                id += 1;
                match o {
                    Op::Schedule(dt) => {
                        handles.push((q.schedule(SimTime(now + dt), (id, None)), r.schedule(SimTime(now + dt), (id, None))));
                    }
                    Op::SetSlot(s, dt) => {
                        gen[s as usize] += 1;
                        q.set_slot(s, SimTime(now + dt), (id, Some((s, gen[s as usize]))));
                        r.schedule(SimTime(now + dt), (id, Some((s, gen[s as usize]))));
                    }
                    Op::ClearSlot(s) => {
                        gen[s as usize] += 1;
                        q.clear_slot(s);
                    }
                    Op::Cancel(i) => {
                        if let Some(&(a, b)) = handles.get(i) {
                            q.cancel(a);
                            r.cancel(b);
                        }
                    }
                    Op::Pop => {
                        let got = q.pop();
                        let want = ref_pop(&mut r, &gen);
                        prop_assert_eq!(got.map(|(t, (i, _))| (t, i)), want.map(|(t, (i, _))| (t, i)));
                        if let Some((t, (_, slot))) = got {
                            now = t.0;
                            if let Some((s, _)) = slot {
                                gen[s as usize] += 1; // delivered: the slot is empty now
                            }
                        }
                    }
                }
            }
            loop {
                let got = q.pop();
                let want = ref_pop(&mut r, &gen);
                prop_assert_eq!(got.as_ref().map(|(t, (i, _))| (*t, *i)), want.as_ref().map(|(t, (i, _))| (*t, *i)));
                match got {
                    Some((_, (_, Some((s, _))))) => gen[s as usize] += 1,
                    Some(_) => {}
                    None => break,
                }
            }
        }

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
