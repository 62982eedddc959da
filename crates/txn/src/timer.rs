//! The timer table: a binary min-heap of `(deadline, sequence)` with lazy cancellation.
//!
//! Most timers never fire (Timer A stops at the first provisional, B at the final response), so
//! cancelling must cost nothing: the owner of a timer remembers the sequence number it was
//! given and forgets it to cancel. An entry whose sequence its owner no longer holds is stale;
//! stale entries are dropped when they reach the top of the heap, and the whole heap is
//! compacted in one O(n) pass when stale entries outnumber live ones, so memory stays
//! proportional to the live timers. Equal deadlines fire in insertion order (the sequence is
//! the tie-breaker), which keeps runs deterministic.

use std::cmp::Ordering;

use dary_heap::QuaternaryHeap;

use sluice_time::Time;

/// Below this many entries compaction is not worth a pass.
const COMPACT_FLOOR: usize = 1024;

/// A scheduled timer's identity: unique for the life of the queue, never zero.
pub(crate) type TimerSeq = u64;

#[derive(Clone, Copy, Debug)]
struct Entry<T> {
    at: Time,
    seq: TimerSeq,
    payload: T,
}

impl<T> PartialEq for Entry<T> {
    fn eq(&self, other: &Self) -> bool {
        self.at == other.at && self.seq == other.seq
    }
}

impl<T> Eq for Entry<T> {}

impl<T> PartialOrd for Entry<T> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<T> Ord for Entry<T> {
    /// Reversed, so that the heap (a max-heap) yields the earliest deadline first and,
    /// among equal deadlines, the earliest scheduled.
    fn cmp(&self, other: &Self) -> Ordering {
        other
            .at
            .cmp(&self.at)
            .then_with(|| other.seq.cmp(&self.seq))
    }
}

/// Timers carrying a small `Copy` payload; liveness is decided by the owner through a
/// `(payload, seq) -> bool` predicate, so cancelling needs no access to the heap.
#[derive(Debug)]
pub(crate) struct TimerQueue<T> {
    /// Four-ary: half the levels of a binary heap, and a node's children share a cache
    /// line or two. Tables of tens of thousands of timers made the binary heap's pop a
    /// tenth of a simulator run, mostly cache misses.
    heap: QuaternaryHeap<Entry<T>>,
    next_seq: TimerSeq,
    live: usize,
}

impl<T: Copy> TimerQueue<T> {
    pub(crate) fn new() -> Self {
        TimerQueue {
            heap: QuaternaryHeap::new(),
            next_seq: 0,
            live: 0,
        }
    }

    /// Schedules a timer; the returned sequence is what the owner keeps to keep it alive.
    pub(crate) fn schedule(&mut self, at: Time, payload: T) -> TimerSeq {
        self.next_seq += 1;
        self.heap.push(Entry {
            at,
            seq: self.next_seq,
            payload,
        });
        self.live += 1;
        self.next_seq
    }

    /// The owner forgot a live timer's sequence: one fewer live entry.
    pub(crate) fn cancelled(&mut self) {
        self.live = self.live.saturating_sub(1);
    }

    /// The earliest live deadline, dropping stale entries on the way.
    pub(crate) fn next_deadline(&mut self, is_live: impl Fn(T, TimerSeq) -> bool) -> Option<Time> {
        while let Some(top) = self.heap.peek() {
            if is_live(top.payload, top.seq) {
                return Some(top.at);
            }
            self.heap.pop();
        }
        None
    }

    /// Removes and returns the earliest live timer due at or before `now`. The caller must
    /// treat the timer as no longer armed (it is no longer counted as live).
    pub(crate) fn pop_due(
        &mut self,
        now: Time,
        is_live: impl Fn(T, TimerSeq) -> bool,
    ) -> Option<(Time, T, TimerSeq)> {
        loop {
            let top = *self.heap.peek()?;
            if !is_live(top.payload, top.seq) {
                self.heap.pop();
                continue;
            }
            if top.at > now {
                return None;
            }
            self.heap.pop();
            self.live = self.live.saturating_sub(1);
            return Some((top.at, top.payload, top.seq));
        }
    }

    /// Drops every stale entry when they dominate, so the heap stays O(live timers).
    /// Amortised O(1) per cancellation: a pass over n entries happens only after n/2 went stale.
    pub(crate) fn maybe_compact(&mut self, is_live: impl Fn(T, TimerSeq) -> bool) {
        if self.heap.len() > COMPACT_FLOOR && self.heap.len() > 2 * self.live {
            self.heap.retain(|e| is_live(e.payload, e.seq));
            self.live = self.heap.len();
        }
    }

    /// Live timers.
    pub(crate) fn live(&self) -> usize {
        self.live
    }

    /// Entries held, live or stale (the memory the queue uses).
    pub(crate) fn entries(&self) -> usize {
        self.heap.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::collections::BTreeSet;

    #[test]
    fn fires_in_deadline_then_insertion_order_and_skips_cancelled() {
        let mut q = TimerQueue::new();
        let cancelled = RefCell::new(BTreeSet::new());
        let live = |_: u32, seq: TimerSeq| !cancelled.borrow().contains(&seq);
        let a = q.schedule(Time::from_secs(2), 1u32);
        let _b = q.schedule(Time::from_secs(1), 2);
        let _c = q.schedule(Time::from_secs(2), 3);
        let d = q.schedule(Time::from_secs(1), 4);
        cancelled.borrow_mut().insert(d);
        q.cancelled();
        assert_eq!(q.next_deadline(live), Some(Time::from_secs(1)));
        assert_eq!(q.pop_due(Time::from_millis(999), live), None);
        let fired: Vec<u32> = std::iter::from_fn(|| q.pop_due(Time::from_secs(5), live))
            .map(|(_, p, _)| p)
            .collect();
        assert_eq!(fired, vec![2, 1, 3]);
        assert!(a < d);
        assert_eq!(q.live(), 0);
        assert_eq!(q.next_deadline(live), None);
    }

    #[test]
    fn compaction_bounds_stale_entries() {
        let mut q = TimerQueue::new();
        let keep = RefCell::new(BTreeSet::new());
        for i in 0..10_000u64 {
            let seq = q.schedule(Time::from_secs(100 + i), ());
            if i % 100 == 0 {
                keep.borrow_mut().insert(seq);
            } else {
                q.cancelled();
            }
            q.maybe_compact(|(), s| keep.borrow().contains(&s));
        }
        assert_eq!(q.live(), 100);
        assert!(q.entries() <= 2 * COMPACT_FLOOR + 2, "{}", q.entries());
    }
}
