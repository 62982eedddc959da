//! One live run at a time within a test binary.
//!
//! The live runs emulate a proxy of fixed CPU cost per call: two of them at once on a
//! two-core machine starve each other's proxy and measure the machine, not the control.
//! Each live test holds [`one_live_run_at_a_time`] for its run.

use std::sync::{Mutex, MutexGuard, PoisonError};

pub fn one_live_run_at_a_time() -> MutexGuard<'static, ()> {
    static LIVE_RUN: Mutex<()> = Mutex::new(());
    // A failed test poisons the lock; the next run is still alone.
    LIVE_RUN.lock().unwrap_or_else(PoisonError::into_inner)
}
