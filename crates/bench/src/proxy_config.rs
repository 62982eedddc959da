//! The proxy's configuration for a bench: emulated costs for a capacity and `β`.

use sluice_proxy::ProxyConfig;

/// Other messages a call sends through the proxy besides its INVITE, forwarded (100, 180,
/// 200, ACK, BYE, 200) and rejected (the ACK for its stateless 503, which the processor
/// ends at an ordinary message's cost), for `β` and the capacity.
pub const OTHERS_FORWARDED: f64 = 6.0;
pub const OTHERS_REJECTED: f64 = 1.0;

/// `C_T` of the `g_opt(r)` curve: the PI's default target.
pub const TARGET_CPU: f64 = 0.9;

/// Calls/s the emulated costs allow when every call is forwarded.
pub fn emulated_capacity(c: &ProxyConfig) -> f64 {
    let per_call = c.cost_forward().as_secs_f64() + OTHERS_FORWARDED * c.cost_other().as_secs_f64();
    if per_call > 0.0 {
        1.0 / per_call
    } else {
        f64::INFINITY
    }
}

/// Emulated costs for `capacity` calls/s with every message other than an INVITE costing
/// `cost_other_us`, and a rejected call `1/β` of a forwarded one.
pub fn set_costs(
    c: &mut ProxyConfig,
    capacity: f64,
    cost_other_us: u64,
    beta: f64,
) -> Result<(), String> {
    if !(capacity > 0.0 && capacity.is_finite() && beta > 1.0 && beta.is_finite()) {
        return Err(format!(
            "need capacity > 0 and beta > 1 (got {capacity}, {beta})"
        ));
    }
    let call_us = 1e6 / capacity;
    let other = cost_other_us as f64;
    let invite_us = call_us - OTHERS_FORWARDED * other;
    if invite_us < 1.0 {
        return Err(format!(
            "cost_other_us {cost_other_us} leaves nothing for the INVITE at {capacity} calls/s"
        ));
    }
    // β = (invite + 6 other) / (reject + the ACK of its 503)
    let reject_us = call_us / beta - OTHERS_REJECTED * other;
    if reject_us < 0.0 {
        return Err(format!(
            "beta {beta} is too high for cost_other_us {cost_other_us}"
        ));
    }
    c.cost_forward_us = invite_us;
    c.cost_other_us = Some(other);
    c.cost_reject_us = reject_us;
    Ok(())
}
