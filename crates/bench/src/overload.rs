//! `sluice bench overload`: the single-proxy sweep of local controls ([`crate::local`]) or,
//! for hop-by-hop variants and experiments, the topology ([`crate::topology`]).

use crate::config::OverloadConfig;
use crate::console::Console;

pub fn bench_overload(args: &OverloadConfig, console: &dyn Console) -> Result<(), String> {
    if crate::topology::is_topology(args)? {
        crate::topology::bench(args, console)
    } else {
        crate::local::bench(args, console)
    }
}
