//! The sluice SIP proxy: a sans-IO proxy core (RFC 3261 §16, transaction stateful) and the
//! tokio shell that drives it on real sockets.
