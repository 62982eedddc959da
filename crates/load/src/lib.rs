//! The sluice load generator: sans-IO UAC and UAS call state machines over the transaction
//! layer, and the tokio shell that drives them on real sockets.
