//! The timer table: sorted FIFO lanes of `(deadline, sequence)` with lazy cancellation.
//!
//! Most timers never fire (Timer A stops at the first provisional, B at the final response), so
//! cancelling must cost nothing: the owner of a timer remembers the sequence number it was
//! given and forgets it to cancel. An entry whose sequence its owner no longer holds is stale;
//! stale entries are dropped when they reach the front, and the whole table is compacted in
//! one O(n) pass when stale entries outnumber live ones, so memory stays proportional to the
//! live timers. Equal deadlines fire in insertion order (the sequence is the tie-breaker),
//! which keeps runs deterministic.
//!
//! Why lanes and not a heap: a transaction layer arms timers as `now + d` for a handful of
//! fixed durations (T1 doublings, T2, T4, 64·T1), and its clock never goes back, so the
//! timers of one duration arrive already sorted. Each lane is a FIFO kept sorted by
//! appending only what is not earlier than its tail (the best-fitting lane, as in patience
//! sorting); the earliest timer is the earliest lane front. Scheduling and popping are O(lanes)
//! over a few contiguous fronts instead of a heap's O(log n) cache misses: the 4-ary heap's
//! pop was the simulator's largest single cost (8 %). Whatever fits no lane once all lanes are
//! in use (a clock driven backwards, many distinct durations) goes to a heap, so the order is
//! exact for any input. The pop order is the heap's exactly: both yield ascending
//! `(deadline, sequence)`.

use std::cmp::Ordering;
use std::collections::VecDeque;

use dary_heap::QuaternaryHeap;

use sluice_time::Time;

/// Below this many entries compaction is not worth a pass.
const COMPACT_FLOOR: usize = 1024;

/// Sorted lanes at most. The RFC 3261 timers of one layer use about ten distinct durations.
const MAX_LANES: usize = 32;

/// A scheduled timer's identity: unique for the life of the queue, never zero.
pub(crate) type TimerSeq = u64;

#[derive(Clone, Copy, Debug)]
struct Entry<T> {
    at: Time,
    seq: TimerSeq,
    payload: T,
}

impl<T> Entry<T> {
    fn key(&self) -> (Time, TimerSeq) {
        (self.at, self.seq)
    }
}

impl<T> PartialEq for Entry<T> {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}

impl<T> Eq for Entry<T> {}

impl<T> PartialOrd for Entry<T> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<T> Ord for Entry<T> {
    /// Reversed, so that the overflow heap (a max-heap) yields the earliest deadline first
    /// and, among equal deadlines, the earliest scheduled.
    fn cmp(&self, other: &Self) -> Ordering {
        other.key().cmp(&self.key())
    }
}

/// Where the earliest entry is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Front {
    Lane(usize),
    Overflow,
}

/// Timers carrying a small `Copy` payload; liveness is decided by the owner through a
/// `(payload, seq) -> bool` predicate, so cancelling needs no access to the queue.
#[derive(Debug)]
pub(crate) struct TimerQueue<T> {
    /// Each lane ascending by `(at, seq)`; empty lanes are kept for reuse.
    lanes: Vec<VecDeque<Entry<T>>>,
    /// What fitted no lane.
    overflow: QuaternaryHeap<Entry<T>>,
    entries: usize,
    next_seq: TimerSeq,
    live: usize,
}

impl<T: Copy> TimerQueue<T> {
    pub(crate) fn new() -> Self {
        TimerQueue {
            lanes: Vec::new(),
            overflow: QuaternaryHeap::new(),
            entries: 0,
            next_seq: 0,
            live: 0,
        }
    }

    /// Schedules a timer; the returned sequence is what the owner keeps to keep it alive.
    pub(crate) fn schedule(&mut self, at: Time, payload: T) -> TimerSeq {
        self.next_seq += 1;
        let entry = Entry {
            at,
            seq: self.next_seq,
            payload,
        };
        // The lane whose tail is latest but not after `at` (its sequence is smaller, so the
        // lane stays sorted); else an empty lane; else a new one; else the heap.
        let mut best: Option<(usize, Time)> = None;
        let mut empty = None;
        for (i, lane) in self.lanes.iter().enumerate() {
            match lane.back() {
                Some(tail) if tail.at <= at && best.is_none_or(|(_, b)| tail.at > b) => {
                    best = Some((i, tail.at));
                }
                None if empty.is_none() => empty = Some(i),
                _ => {}
            }
        }
        match best.map(|(i, _)| i).or(empty) {
            Some(i) => self.lanes[i].push_back(entry),
            None if self.lanes.len() < MAX_LANES => self.lanes.push(VecDeque::from([entry])),
            None => self.overflow.push(entry),
        }
        self.entries += 1;
        self.live += 1;
        self.next_seq
    }

    /// The owner forgot a live timer's sequence: one fewer live entry.
    pub(crate) fn cancelled(&mut self) {
        self.live = self.live.saturating_sub(1);
    }

    /// The earliest entry, live or stale.
    fn front(&self) -> Option<(Front, Entry<T>)> {
        let mut min: Option<(Front, Entry<T>)> =
            self.overflow.peek().map(|e| (Front::Overflow, *e));
        for (i, lane) in self.lanes.iter().enumerate() {
            if let Some(e) = lane.front() {
                if min.is_none_or(|(_, m)| e.key() < m.key()) {
                    min = Some((Front::Lane(i), *e));
                }
            }
        }
        min
    }

    fn remove_front(&mut self, front: Front) {
        let removed = match front {
            Front::Lane(i) => self.lanes[i].pop_front().is_some(),
            Front::Overflow => self.overflow.pop().is_some(),
        };
        if removed {
            self.entries -= 1;
        }
    }

    /// The earliest live deadline, dropping stale entries on the way.
    pub(crate) fn next_deadline(&mut self, is_live: impl Fn(T, TimerSeq) -> bool) -> Option<Time> {
        while let Some((front, top)) = self.front() {
            if is_live(top.payload, top.seq) {
                return Some(top.at);
            }
            self.remove_front(front);
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
            let (front, top) = self.front()?;
            if !is_live(top.payload, top.seq) {
                self.remove_front(front);
                continue;
            }
            if top.at > now {
                return None;
            }
            self.remove_front(front);
            self.live = self.live.saturating_sub(1);
            return Some((top.at, top.payload, top.seq));
        }
    }

    /// Drops every stale entry when they dominate, so the table stays O(live timers).
    /// Amortised O(1) per cancellation: a pass over n entries happens only after n/2 went stale.
    pub(crate) fn maybe_compact(&mut self, is_live: impl Fn(T, TimerSeq) -> bool) {
        if self.entries > COMPACT_FLOOR && self.entries > 2 * self.live {
            for lane in &mut self.lanes {
                lane.retain(|e| is_live(e.payload, e.seq));
            }
            self.overflow.retain(|e| is_live(e.payload, e.seq));
            self.entries =
                self.lanes.iter().map(VecDeque::len).sum::<usize>() + self.overflow.len();
            self.live = self.entries;
        }
    }

    /// Live timers.
    pub(crate) fn live(&self) -> usize {
        self.live
    }

    /// Entries held, live or stale (the memory the queue uses).
    pub(crate) fn entries(&self) -> usize {
        self.entries
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

    proptest::proptest! {
        /// Any schedule (deadlines out of order, more distinct durations than lanes, timers
        /// cancelled at random, pops interleaved) fires in ascending (deadline, sequence)
        /// order, as the heap this replaced did.
        #[test]
        fn pops_in_deadline_then_sequence_order(
            ops in proptest::collection::vec((0u64..200, 0u64..5_000, 0u8..10), 1..600)
        ) {
            let mut q = TimerQueue::new();
            let cancelled = RefCell::new(BTreeSet::new());
            let live = |(): (), seq: TimerSeq| !cancelled.borrow().contains(&seq);
            let mut reference: BTreeSet<(Time, TimerSeq)> = BTreeSet::new();
            let mut now = 0u64;
            for (step, delay, action) in ops {
                now += step;
                match action {
                    // Pop what is due.
                    0 | 1 => {
                        let t = Time::from_millis(now);
                        while let Some((at, (), seq)) = q.pop_due(t, live) {
                            let expected = reference.pop_first();
                            proptest::prop_assert_eq!(Some((at, seq)), expected);
                        }
                        proptest::prop_assert!(reference.first().is_none_or(|&(at, _)| at > t));
                    }
                    // Cancel the latest live timer.
                    2 => {
                        if let Some(&(at, seq)) = reference.last() {
                            reference.remove(&(at, seq));
                            cancelled.borrow_mut().insert(seq);
                            q.cancelled();
                        }
                    }
                    // A deadline before `now`: a clock that went back.
                    3 => {
                        let at = Time::from_millis(now.saturating_sub(delay));
                        reference.insert((at, q.schedule(at, ())));
                    }
                    _ => {
                        let at = Time::from_millis(now + delay);
                        reference.insert((at, q.schedule(at, ())));
                    }
                }
                q.maybe_compact(live);
                proptest::prop_assert_eq!(q.live(), reference.len());
                proptest::prop_assert_eq!(q.next_deadline(live), reference.first().map(|&(at, _)| at));
            }
        }
    }
}
