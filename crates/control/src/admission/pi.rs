//! Dual-loop PI overload control, De Cicco, Cofano & Mascolo, "Local SIP Overload
//! Control: Controller Design and Optimization by Extremum Seeking" (journal version),
//! §IV-B, eqs. (7)–(8), with the implementation choices of §V and the gains of §VI-C.
//!
//! INVITEs (new ones and retransmissions) wait in a drop-tail FIFO of at most `q_M`
//! messages, drained by a worker at the rate `u(t)` the first loop computes; of the
//! INVITEs drained, the fraction `α(t)` the second loop computes is answered 503 and
//! the rest forwarded. (Eq. (9) charges the CPU `u(1 − γα)`, i.e. `α` applies to the
//! drained INVITEs, which is where [`DualLoopPi::take`] applies it.)
//!
//! **Queue loop**, eq. (7): `u = K_pq e_q + K_iq ∫ e_q` with the set-point
//! `q_T = T̄_q ρ_M r̃`, `r̃` the measured INVITE arrival rate through the first-order
//! low-pass `1/(1 + τ s)`. Rates are kept in INVITEs/s here, so `ρ_M` cancels: `ρ_M r̃`
//! is the filtered arrival rate and `u` the drain rate in INVITEs/s (the paper's
//! dimensionless `u` times `ρ_M`). The paper prints `e_q = q_T − q`; but `u` *drains*
//! the queue (`q̇ = ρ_M (r − u − o)`, §IV-B), so with that sign a queue above its
//! set-point would lower the drain rate and grow without bound (checked: the toy loop
//! of the tests fills its queue). The error therefore enters with the sign of the
//! plant, `e_q = q − q_T`, as the CPU loop's `e_c = C̃ − C_T` does; the closed loop is
//! then `s² + K_pq s + K_iq`, stable for positive gains.
//!
//! **CPU loop**, eq. (8): `α = K_pc e_c + K_ic ∫ e_c`, `e_c = C̃ − C_T`, with `C̃` the CPU
//! load through `1/(1 + τ_c s)`.
//!
//! **Discretisation** (§V): both loops and both measurements run every 10 ms (the
//! paper's `T_c` and `T_m`). The filters use the exact zero-order-hold step
//! `x ← x + (1 − e^{−Δt/τ})(sample − x)` with the actual elapsed `Δt`, so a late tick
//! is a longer step rather than several. The arrival-rate sample of a tick is the
//! INVITE arrivals since the previous tick over `Δt`. Integrals are rectangular.
//!
//! **Anti-windup** (§V says only that both loops have one; §VI-C says it "disconnects
//! the integral mode when the actuator is saturated"): conditional integration — a
//! step does not integrate when the output is clamped and integrating would push it
//! further into the clamp ([`PiLoop`]). `α` is clamped to `[0, 1]`, `u` to
//! `[0, max_drain_rate]`. Ours, not the paper's: a worker that does not keep up with
//! `u` (busy with other messages, or a CPU slower than `u` asks) is a saturation of
//! the drain the output clamp cannot see, so a tick that finds the drain budget full
//! while INVITEs wait does not integrate `u` upwards.
//!
//! **Set-point cap** (ours): `q_T` is held at or below `q_M / 2`. The paper's `q_T` grows
//! with the arrival rate, and past `q_M` it cannot be reached: the queue loop would then
//! stop draining a full queue.
//!
//! **Work-conserving below the target** (ours): the queue loop drains at `u` so that
//! `q_T = T̄_q r̃` INVITEs wait, which is `T̄_q` (50 ms) of delay for every call even when
//! the server is idle (measured: setup p50 about 50 ms at 1x live, 0.2 ms without
//! control). Nothing is gained by pacing while the CPU loop rejects nothing: the CPU is
//! under `C_T` and every drained INVITE is forwarded anyway. So while `α = 0` and
//! `C̃ < C_T` the drain is unlimited, and the queue loop's integral is set each tick so
//! that `u` equals the filtered arrival rate: when the CPU reaches `C_T` the loop takes
//! over from the rate the worker was draining at, with no bump. `work_conserving =
//! false` is the paper's controller.
//!
//! While unpaced the worker also takes INVITEs in their arrival order among the other
//! messages: the paper's worker takes one only when no other message waits (Kamailio
//! handles those synchronously, §V), which below the target paces nothing and only
//! delays every INVITE behind the responses and in-dialog requests (measured: setup p50
//! 90 ms above no control's at 0.83x on an RE of 3,000 messages/s, with nothing rejected).
//!
//! **The work mark** (ours): sluice's PI also watches its queues' work, as the local
//! threshold does (`threshold.work_mark_ms`): each queued INVITE counted with its
//! session's later messages, at the smoothed service time, against 250 ms (half of T1)
//! held to half the time the INVITE queue takes to drain. It does two things.
//!
//! * *A burst is not overload.* While it drains unpaced, the PI takes over only when the
//!   CPU is past `C_T` and the queues have reached the mark (until they hold less than
//!   three quarters of it); until then the CPU loop is held at zero. A Poisson burst well
//!   below capacity keeps a slow server fully busy for longer than the 100 ms CPU filter,
//!   and on the CPU alone that already rejects a third of the INVITEs drained, where no
//!   control would have served the same burst within T1 (see below). Under overload the
//!   queues pass the mark within a fraction of a second, and the CPU loop then acts with
//!   its whole proportional term at once. A driver that samples the CPU itself (the
//!   proxy at native speed, where a message is served as it is read and the backlog
//!   waits in the socket's buffer, out of any queue's sight) gets the CPU alone, as
//!   published: a server that fast serves thousands of messages in 100 ms, and Poisson
//!   bursts below capacity do not hold it busy that long.
//! * *New INVITEs are answered 503 as they arrive* while the queues hold the mark, until
//!   they hold less than three quarters of it. The CPU loop holds `C_T` on average, but in
//!   front of a fast server with a short queue behind long links, the sessions it admits
//!   bring their responses and ACKs back a round trip later, together, into a full queue;
//!   and past `β C_T`, where even answering every INVITE 503 costs more than `C_T`, the
//!   INVITE queue fills and its INVITEs wait seconds, past every caller's T1.
//!
//! `work_mark_ms = 0` is the paper's controller in this respect.
//!
//! **Draining**: the budget accrues continuously at `u` and is capped at one tick's
//! worth (at least one INVITE), so an idle worker cannot bank a burst. See
//! [`DrainController`] for the driver sequence.
//!
//! **What it cannot do as published: tell a burst from overload on a slow server.** The
//! CPU loop acts on the load filtered over `τ_c = 0.1 s`, and with `K_pc = 3.5` a
//! stretch of that length at full load already rejects a third of the INVITEs drained.
//! A server of a few hundred messages/s serves a few dozen messages in that time, and
//! Poisson arrivals well below capacity keep it fully busy for that long often: on 17 of
//! 65 sampled topologies below `C_T` the PI as published turned away 2–9 % of the calls
//! no control carries (servers of 100–650 messages/s at 0.6–0.83x, and of 1,000–3,400
//! messages/s at 0.86–0.89x, where the load is within the filter's noise of `C_T`). A
//! longer filter averages the bursts out but slows the loop on the same servers, whose
//! INVITE queue then fills with seconds of work before the first rejection. On those 17
//! topologies and on the 61 overloaded ones (1x–10x) with a server under 700
//! messages/s, goodput within 2 % of no control's below `C_T`, and at least 0.9 of
//! `g_opt(r)` in overload:
//!
//! | `τ_c` | no harm (of 17) | overload held (of 61) |
//! |---|---|---|
//! | 0.1 s (the paper's) | 0 | 49 |
//! | 0.5 s | 13 | 32 |
//! | 1 s | 15 | 24 |
//!
//! No single `τ_c` serves both, so `τ_c` stays the paper's and the work mark tells the
//! two apart instead. On 200 sampled topologies (seed 1, the `sampled-topologies`
//! experiment), as published (with the INVITE retransmissions processed, as the paper's
//! Kamailio does) and with the work mark and the proxy's `drop_waiting_retransmissions`:
//!
//! | claim | as published | with the work mark |
//! |---|---|---|
//! | no harm below `C_T` (of 65) | 46 | 65 (worst 0.804 against 0.803) |
//! | setup p50 within 5 ms of no control's (of 65) | 63 | 65 |
//! | 0.9 of `g_opt(r)` from 1x (of 122) | 107 (worst 0.42 against 0.73) | 122 (worst 0.91 of `g_opt` > 0.05) |
//!
//! As published the overloaded misses were slow servers collapsing at 4.3–5.2x, their
//! INVITE queue full of retransmitted copies and seconds of work, and fast servers with
//! short queues behind links of 33–47 ms (0.52–0.93 of the requirement).
//!
//! Defaults: `T̄_q = 50 ms`, `τ = τ_c = 0.1 s` (§IV-B); 10 ms sampling and
//! `q_M = 800` INVITEs (§V); gains `θ̄_1 = [K_pc, K_ic, K_pq, K_iq] = [3.5, 10.3, 19.2,
//! 130.5]` (§VII, from the Extremum Seeking run of §VI-C). The paper does not state the
//! `C_T` of the tuned controller; the conference version ran 0.8 and 0.9, default 0.9.
//! `max_drain_rate` is unbounded by default; a driver that knows the server's capacity
//! `ρ_M` and cost ratio `β` can set it to `β ρ_M`, the rate at which the CPU could
//! answer every INVITE with a 503.

use super::cpu::CpuMeter;
use super::threshold::WorkMark;
use super::{fraction_or, AdmissionMetrics, DrainController, LocalAdmission};
use crate::estimation::sane_interval;
use crate::types::{AdmissionVerdict, Completion, MessageClass, MessageSummary, QueueOccupancy};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use sluice_time::Time;
use std::time::Duration;

/// Rounding slack when comparing accrued budget against one whole INVITE.
const BUDGET_EPS: f64 = 1e-9;

/// The largest queue set-point, as a share of `q_M`. The paper's `q_T = T̄_q r̃` grows
/// with the arrival rate; once it passes `q_M` the queue can never reach it, `e_q` stays
/// negative and the queue loop drives the drain rate to zero while the full queue drops
/// every new INVITE (seen live: 15,000 INVITEs/s with `T̄_q` = 50 ms and `q_M` = 800 gave
/// no goodput at all). Half the queue keeps the loop in its linear range with room for
/// bursts; below `q_M / (2 T̄_q)` INVITEs/s (8,000/s at the defaults) nothing changes.
const QUEUE_TARGET_MAX_SHARE: f64 = 0.5;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct PiConfig {
    /// `C_T`, the target CPU load, in `(0, 1]`.
    pub target_cpu: f64,
    /// `T̄_q`, the target queueing time behind `q_T = T̄_q ρ_M r̃`.
    #[serde(rename = "target_queueing_delay_ms", with = "crate::serde_millis")]
    #[schemars(with = "u64")]
    pub target_queueing_delay: Duration,
    /// `τ`, time constant of the arrival-rate low-pass filter.
    #[serde(rename = "rate_filter_ms", with = "crate::serde_millis")]
    #[schemars(with = "u64")]
    pub rate_filter: Duration,
    /// `τ_c`, time constant of the CPU-load low-pass filter.
    #[serde(rename = "cpu_filter_ms", with = "crate::serde_millis")]
    #[schemars(with = "u64")]
    pub cpu_filter: Duration,
    /// Sampling time of both loops and both measurements (`T_c = T_m`).
    #[serde(rename = "sample_interval_ms", with = "crate::serde_millis")]
    #[schemars(with = "u64")]
    pub sample_interval: Duration,
    /// `K_pc`, proportional gain of the CPU loop (dimensionless).
    pub k_pc: f64,
    /// `K_ic`, integral gain of the CPU loop, 1/s.
    pub k_ic: f64,
    /// `K_pq`, proportional gain of the queue loop, 1/s.
    pub k_pq: f64,
    /// `K_iq`, integral gain of the queue loop, 1/s².
    pub k_iq: f64,
    /// Upper clamp of the drain rate `u`, INVITEs/s; unset means unbounded.
    pub max_drain_rate: Option<f64>,
    /// How the fraction `α` of drained INVITEs is picked for a 503.
    pub reject_selection: RejectSelection,
    /// Drain as fast as the worker can while the CPU loop rejects nothing and the CPU is
    /// under `C_T` (ours; see the module docs). `false`: the paper's queue loop always
    /// paces the drain.
    pub work_conserving: bool,
    /// The work its queues may hold, each queued INVITE counted with its session's later
    /// messages, held to half the time the INVITE queue takes to drain (ours; see the
    /// module docs): from it new INVITEs are answered 503 as they arrive, as the local
    /// threshold does (`threshold.work_mark_ms`), and a work-conserving PI takes over from
    /// the unpaced drain only once its queues hold it. Unset: 250 ms, half of T1; 0: the
    /// paper's PI, which watches the CPU alone behind the INVITE queue's capacity.
    #[serde(
        rename = "work_mark_ms",
        with = "crate::serde_millis::option",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(with = "Option<u64>")]
    pub work_mark: Option<Duration>,
}

/// How [`DualLoopPi`] applies its reject ratio `α` to the INVITEs it drains. The paper says
/// only that a fraction `α` is rejected (§IV-B).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum RejectSelection {
    /// Each INVITE independently with probability `α`. The number rejected in a 10 ms
    /// sample is then binomial, and that noise reaches the CPU load the loop controls.
    Random,
    /// Deterministically spread: `α` accrues per INVITE and one is rejected whenever a whole
    /// rejection has accrued, so every run of `n` INVITEs rejects `⌊nα⌋` or `⌈nα⌉` of them.
    /// Same mean as `random`, without the binomial noise in the CPU load.
    #[default]
    Spread,
}

impl Default for PiConfig {
    fn default() -> Self {
        Self {
            target_cpu: 0.9,
            target_queueing_delay: Duration::from_millis(50),
            rate_filter: Duration::from_millis(100),
            cpu_filter: Duration::from_millis(100),
            sample_interval: Duration::from_millis(10),
            k_pc: 3.5,
            k_ic: 10.3,
            k_pq: 19.2,
            k_iq: 130.5,
            max_drain_rate: None,
            reject_selection: RejectSelection::Spread,
            work_conserving: true,
            work_mark: None,
        }
    }
}

impl PiConfig {
    /// The gains as the Extremum Seeking parameter vector `θ = [K_pc, K_ic, K_pq, K_iq]`.
    pub fn gains(&self) -> [f64; 4] {
        [self.k_pc, self.k_ic, self.k_pq, self.k_iq]
    }

    /// The same config with the gains of `θ = [K_pc, K_ic, K_pq, K_iq]`.
    #[must_use]
    pub fn with_gains(&self, theta: [f64; 4]) -> Self {
        let [k_pc, k_ic, k_pq, k_iq] = theta;
        Self {
            k_pc,
            k_ic,
            k_pq,
            k_iq,
            ..self.clone()
        }
    }
}

/// A discrete PI controller with output clamps and conditional-integration
/// anti-windup: `out = clamp(K_p e + I, lo, hi)`, `I ← I + K_i e Δt`, except that a step
/// pushing the output into a clamp integrates only as far as the clamp (and not at all
/// once there), so the integral cannot wind up while the actuator is saturated.
#[derive(Clone, Debug)]
pub struct PiLoop {
    kp: f64,
    ki: f64,
    lo: f64,
    hi: f64,
    integral: f64,
    output: f64,
}

impl PiLoop {
    /// Gains that are not finite count as zero; `hi` below `lo` is raised to it.
    pub fn new(kp: f64, ki: f64, lo: f64, hi: f64) -> Self {
        let finite = |x: f64| if x.is_finite() { x } else { 0.0 };
        let lo = if lo.is_nan() { 0.0 } else { lo };
        let hi = if hi.is_nan() { lo } else { hi.max(lo) };
        Self {
            kp: finite(kp),
            ki: finite(ki),
            lo,
            hi,
            integral: 0.0,
            output: 0.0_f64.clamp(lo, hi),
        }
    }

    /// One sample: the error `e` held for `dt` seconds. Returns the clamped output.
    pub fn step(&mut self, error: f64, dt: f64) -> f64 {
        self.step_held(error, dt, false)
    }

    /// As [`Self::step`]; `hold_increase` also treats the actuator as saturated from
    /// above, so the integral may fall but not rise.
    pub fn step_held(&mut self, error: f64, dt: f64, hold_increase: bool) -> f64 {
        if !error.is_finite() || !dt.is_finite() || dt <= 0.0 {
            return self.output;
        }
        let increment = self.ki * error * dt;
        let candidate = self.integral + increment;
        let unclamped = self.kp * error + candidate;
        if unclamped.is_nan() {
            return self.output;
        }
        if hold_increase && increment > 0.0 {
            // Saturated from above by the caller's say-so: no upward integration.
        } else if unclamped > self.hi && increment > 0.0 {
            // Integrate only up to the point where the output reaches the clamp.
            let edge = self.hi - self.kp * error;
            self.integral = self.integral.max(candidate.min(edge));
        } else if unclamped < self.lo && increment < 0.0 {
            let edge = self.lo - self.kp * error;
            self.integral = self.integral.min(candidate.max(edge));
        } else {
            self.integral = candidate;
        }
        self.output = (self.kp * error + self.integral).clamp(self.lo, self.hi);
        self.output
    }

    /// Sets the integral so that the output for `error` is `output` (within the clamps),
    /// for a bumpless hand-over to the loop while something else drives the actuator.
    pub fn track(&mut self, error: f64, output: f64) {
        if !error.is_finite() || !output.is_finite() {
            return;
        }
        self.output = output.clamp(self.lo, self.hi);
        self.integral = self.output - self.kp * error;
    }

    /// Integral and output back to zero (within the clamps), as at start.
    pub fn reset(&mut self) {
        self.integral = 0.0;
        self.output = 0.0_f64.clamp(self.lo, self.hi);
    }

    pub fn output(&self) -> f64 {
        self.output
    }

    pub fn integral(&self) -> f64 {
        self.integral
    }
}

/// `x ← x + (1 − e^{−Δt/τ})(sample − x)`: the exact step of `1/(1 + τ s)` for a sample
/// held over `Δt`. A zero `τ` passes the sample through.
fn low_pass(state: f64, sample: f64, dt: f64, tau: f64) -> f64 {
    if tau <= 0.0 {
        return sample;
    }
    let a = 1.0 - (-dt / tau).exp();
    state + a * (sample - state)
}

#[derive(Clone, Debug)]
pub struct DualLoopPi {
    target_cpu: f64,
    target_delay: f64,
    tau_rate: f64,
    tau_cpu: f64,
    interval: Duration,
    max_queue: usize,
    queue_loop: PiLoop,
    cpu_loop: PiLoop,
    meter: CpuMeter,
    last_tick: Time,
    next_tick: Time,
    arrivals: u64,
    rate: f64,
    cpu: f64,
    queue: u32,
    queue_target: f64,
    credit: f64,
    credit_at: Time,
    rng: ChaCha8Rng,
    selection: RejectSelection,
    work_conserving: bool,
    /// Draining without the queue loop's pacing (see the module docs).
    unpaced: bool,
    /// New INVITEs are answered 503 at arrival while the queues hold this much work, and
    /// while unpaced the loops take over only once they do; none when the CPU alone
    /// decides.
    work_mark: WorkMark,
    /// `spread`: rejections accrued and not yet made.
    reject_credit: f64,
    /// Session-starting INVITEs answered 503, at the drain or at arrival.
    rejected: u64,
    rejected_at_arrival: u64,
    forwarded: u64,
}

impl DualLoopPi {
    /// Timers start at `now`; `seed` selects the stream of the reject draws. `max_queue` is
    /// `q_M`, the capacity of the INVITE queue the driver keeps (it caps the queue loop's
    /// set-point), so the queue itself is the one source of it. A queued INVITE counts
    /// as `session_length` messages of work towards the work mark.
    pub fn new(
        config: &PiConfig,
        max_queue: usize,
        session_length: f64,
        seed: u64,
        now: Time,
    ) -> Self {
        let interval = sane_interval(config.sample_interval);
        let max_drain = match config.max_drain_rate {
            Some(m) if m.is_finite() && m >= 0.0 => m,
            _ => f64::INFINITY,
        };
        Self {
            target_cpu: fraction_or(config.target_cpu, 0.9),
            target_delay: config.target_queueing_delay.as_secs_f64(),
            tau_rate: config.rate_filter.as_secs_f64(),
            tau_cpu: config.cpu_filter.as_secs_f64(),
            interval,
            max_queue,
            queue_loop: PiLoop::new(config.k_pq, config.k_iq, 0.0, max_drain),
            cpu_loop: PiLoop::new(config.k_pc, config.k_ic, 0.0, 1.0),
            meter: CpuMeter::new(now),
            last_tick: now,
            next_tick: now + interval,
            arrivals: 0,
            rate: 0.0,
            cpu: 0.0,
            queue: 0,
            queue_target: 0.0,
            credit: 0.0,
            credit_at: now,
            rng: ChaCha8Rng::seed_from_u64(seed),
            selection: config.reject_selection,
            work_conserving: config.work_conserving,
            unpaced: config.work_conserving,
            work_mark: WorkMark::new(config.work_mark, max_queue, session_length),
            reject_credit: 0.0,
            rejected: 0,
            rejected_at_arrival: 0,
            forwarded: 0,
        }
    }

    /// `α`, the fraction of drained INVITEs answered 503.
    pub fn reject_fraction(&self) -> f64 {
        self.cpu_loop.output()
    }

    /// `u`, the commanded drain rate, INVITEs/s.
    pub fn drain_rate(&self) -> f64 {
        self.queue_loop.output()
    }

    /// `C̃`, the filtered CPU load.
    pub fn filtered_cpu(&self) -> f64 {
        self.cpu
    }

    /// `ρ_M r̃`, the filtered INVITE arrival rate, INVITEs/s.
    pub fn filtered_arrival_rate(&self) -> f64 {
        self.rate
    }

    /// `q_T`, INVITEs.
    pub fn queue_target(&self) -> f64 {
        self.queue_target
    }

    pub fn queue_loop(&self) -> &PiLoop {
        &self.queue_loop
    }

    pub fn cpu_loop(&self) -> &PiLoop {
        &self.cpu_loop
    }

    /// Session-starting INVITEs answered 503 so far, at the drain or at arrival.
    pub fn rejected(&self) -> u64 {
        self.rejected
    }

    /// Of those, the ones turned away at arrival by the work mark.
    pub fn rejected_at_arrival(&self) -> u64 {
        self.rejected_at_arrival
    }

    /// Drained session-starting INVITEs forwarded so far.
    pub fn forwarded(&self) -> u64 {
        self.forwarded
    }

    fn budget_cap(&self) -> f64 {
        (self.drain_rate() * self.interval.as_secs_f64()).max(1.0)
    }

    /// Brings the drain budget up to `now` at the current rate.
    fn accrue(&mut self, now: Time) {
        if now <= self.credit_at {
            return;
        }
        let dt = now.saturating_since(self.credit_at).as_secs_f64();
        let cap = self.budget_cap();
        let grown = self.credit + self.drain_rate() * dt;
        self.credit = if grown.is_finite() {
            grown.min(cap)
        } else {
            cap
        };
        self.credit_at = now;
    }

    fn tick(&mut self, now: Time) {
        let dt = now.saturating_since(self.last_tick).as_secs_f64();
        self.last_tick = now;
        if dt <= 0.0 {
            return;
        }
        self.accrue(now);
        let worker_behind = self.queue > 0 && self.credit + BUDGET_EPS >= self.budget_cap();
        // Measurements.
        if let Some(c) = self.meter.close(now) {
            self.cpu = low_pass(self.cpu, c, dt, self.tau_cpu);
        }
        let sample = self.arrivals as f64 / dt;
        self.arrivals = 0;
        self.rate = low_pass(self.rate, sample, dt, self.tau_rate);
        // CPU loop, eq. (8); while unpaced, only once the queues have reached the work mark
        // (ours: see the module docs). Held at zero until then, so that it acts with its
        // whole proportional term the moment it takes over. Once it has, it keeps control
        // until it rejects nothing again, however soon the mark lets go.
        // A driver that samples the CPU itself (the proxy at native speed) serves each
        // message as it reads it, and the backlog waits in the socket's buffer where no
        // queue shows it: there the CPU alone decides, as in the paper.
        let burst_served = self.unpaced
            && self.work_mark.is_set()
            && !self.meter.is_external()
            && !self.work_mark.is_rejecting();
        if burst_served {
            self.cpu_loop.reset();
        } else {
            self.cpu_loop.step(self.cpu - self.target_cpu, dt);
        }
        // Queue loop, eq. (7), with the set-point held below the queue's capacity (ours:
        // see the module docs).
        self.queue_target =
            (self.target_delay * self.rate).min(QUEUE_TARGET_MAX_SHARE * self.max_queue as f64);
        let q = f64::from(self.queue);
        self.unpaced = self.work_conserving
            && self.reject_fraction() <= 0.0
            && (self.cpu < self.target_cpu || burst_served);
        if self.unpaced {
            // Bumpless hand-over: u = r̃ whenever the loop takes over.
            self.queue_loop.track(q - self.queue_target, self.rate);
        } else {
            self.queue_loop
                .step_held(q - self.queue_target, dt, worker_behind);
        }
        // The budget cap follows the new rate.
        self.credit = self.credit.min(self.budget_cap());
    }

    /// Whether the drain is unpaced now (work-conserving, below the CPU target or serving
    /// a burst).
    pub fn unpaced(&self) -> bool {
        self.unpaced
    }
}

impl LocalAdmission for DualLoopPi {
    /// Counts INVITEs for the arrival rate; the drop-tail queue is the driver's. Turns
    /// new INVITEs away while the queues hold the work mark.
    fn on_arrival(
        &mut self,
        now: Time,
        queue_len: usize,
        message: &MessageSummary,
    ) -> AdmissionVerdict {
        if message.class == MessageClass::Invite {
            self.arrivals += 1;
        }
        if self.work_mark.exceeded(now, queue_len, message) && message.is_session_start() {
            self.rejected += 1;
            self.rejected_at_arrival += 1;
            return AdmissionVerdict::Reject;
        }
        AdmissionVerdict::Admit
    }
    fn on_queue(&mut self, now: Time, queue: QueueOccupancy) {
        self.queue = queue.invites;
        self.work_mark.on_queue(now, queue);
    }
    fn on_processed(&mut self, now: Time, completion: &Completion) {
        self.meter.on_processed(completion.service_time);
        self.work_mark.on_processed(now, completion);
    }
    fn on_cpu_sample(&mut self, _now: Time, busy_fraction: f64) {
        self.meter.on_sample(busy_fraction);
    }
    fn handle_timeout(&mut self, now: Time) {
        if now >= self.next_tick {
            self.tick(now);
            self.next_tick = now + self.interval;
        }
    }
    fn poll_timeout(&self) -> Option<Time> {
        Some(self.next_tick)
    }
    fn metrics(&self) -> AdmissionMetrics {
        AdmissionMetrics {
            rejected: self.rejected,
            control_value: Some(self.reject_fraction()),
            cpu_load: Some(self.cpu),
            drain_rate: Some(self.drain_rate()),
            queue_target: Some(self.queue_target),
            latency: None,
        }
    }
}

impl DrainController for DualLoopPi {
    fn drain_budget(&mut self, now: Time) -> u32 {
        if self.unpaced {
            return u32::MAX;
        }
        self.accrue(now);
        (self.credit + BUDGET_EPS)
            .floor()
            .clamp(0.0, f64::from(u32::MAX)) as u32
    }

    fn take(&mut self, now: Time, message: &MessageSummary) -> Option<AdmissionVerdict> {
        if !self.unpaced {
            self.accrue(now);
            if self.credit + BUDGET_EPS < 1.0 {
                return None;
            }
            self.credit = (self.credit - 1.0).max(0.0);
        }
        if !message.is_session_start() {
            return Some(AdmissionVerdict::Admit);
        }
        let alpha = self.reject_fraction();
        let reject = match self.selection {
            RejectSelection::Random => {
                alpha >= 1.0 || (alpha > 0.0 && self.rng.gen::<f64>() < alpha)
            }
            RejectSelection::Spread => {
                // The credit stays below one whole rejection (α ≤ 1), so nothing is banked
                // for after α has fallen.
                self.reject_credit += alpha;
                if self.reject_credit + BUDGET_EPS >= 1.0 {
                    self.reject_credit = (self.reject_credit - 1.0).max(0.0);
                    true
                } else {
                    false
                }
            }
        };
        if reject {
            self.rejected += 1;
            Some(AdmissionVerdict::Reject)
        } else {
            self.forwarded += 1;
            Some(AdmissionVerdict::Admit)
        }
    }

    fn in_arrival_order(&self) -> bool {
        self.unpaced
    }

    fn next_drain(&self, now: Time) -> Option<Time> {
        if self.unpaced {
            return Some(now);
        }
        let at = now.max(self.credit_at);
        let u = self.drain_rate();
        let dt = at.saturating_since(self.credit_at).as_secs_f64();
        let credit = (self.credit + u * dt).min(self.budget_cap());
        if credit + BUDGET_EPS >= 1.0 {
            return Some(at);
        }
        if u <= 0.0 || !u.is_finite() {
            return None;
        }
        // Round up to the next nanosecond so the budget is whole when the driver wakes.
        let wait = ((1.0 - credit) / u * 1e9).ceil();
        Some(Time::from_nanos(
            at.as_nanos()
                .saturating_add(wait.min(u64::MAX as f64) as u64),
        ))
    }

    fn max_queue(&self) -> usize {
        self.max_queue
    }
}

#[cfg(test)]
mod tests;
