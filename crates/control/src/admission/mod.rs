//! Local admission at the RE's receive stage: the baselines of Shen, Schulzrinne &
//! Nahum 2008, §4.3, against which the feedback algorithms are compared.
//!
//! - [`AdmitAll`] (`none`): no control. The RE's bounded FIFO queue belongs to the
//!   driver, and the driver drops whatever arrives when it is full ("simple drop").
//! - [`ThresholdRejection`] (`threshold`): reject new INVITEs between a high and a low
//!   queue watermark.

mod threshold;

pub use threshold::{ThresholdConfig, ThresholdRejection};

use crate::types::{AdmissionVerdict, MessageSummary};
use sluice_time::Time;

/// The RE's receive-stage policy.
pub trait LocalAdmission {
    /// A message arrived; `queue_len` is the number of messages already queued.
    fn on_arrival(
        &mut self,
        now: Time,
        queue_len: usize,
        message: &MessageSummary,
    ) -> AdmissionVerdict;
    fn handle_timeout(&mut self, now: Time);
    fn poll_timeout(&self) -> Option<Time>;
}

/// No control: admit everything; a full queue drops (in the driver).
#[derive(Clone, Copy, Debug, Default)]
pub struct AdmitAll;

impl LocalAdmission for AdmitAll {
    fn on_arrival(
        &mut self,
        _now: Time,
        _queue_len: usize,
        _message: &MessageSummary,
    ) -> AdmissionVerdict {
        AdmissionVerdict::Admit
    }
    fn handle_timeout(&mut self, _now: Time) {}
    fn poll_timeout(&self) -> Option<Time> {
        None
    }
}

/// Any local admission policy, chosen from a config.
#[derive(Clone, Debug)]
pub enum AnyLocalAdmission {
    AdmitAll(AdmitAll),
    Threshold(ThresholdRejection),
}

impl LocalAdmission for AnyLocalAdmission {
    fn on_arrival(
        &mut self,
        now: Time,
        queue_len: usize,
        message: &MessageSummary,
    ) -> AdmissionVerdict {
        match self {
            Self::AdmitAll(a) => a.on_arrival(now, queue_len, message),
            Self::Threshold(t) => t.on_arrival(now, queue_len, message),
        }
    }
    fn handle_timeout(&mut self, now: Time) {
        match self {
            Self::AdmitAll(a) => a.handle_timeout(now),
            Self::Threshold(t) => t.handle_timeout(now),
        }
    }
    fn poll_timeout(&self) -> Option<Time> {
        match self {
            Self::AdmitAll(a) => a.poll_timeout(),
            Self::Threshold(t) => t.poll_timeout(),
        }
    }
}
