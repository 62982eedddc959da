//! `sluice bench overload`: the single-proxy sweep of local controls ([`crate::local`]) or,
//! for hop-by-hop variants and experiments, the topology ([`crate::topology`]).

use crate::config::OverloadConfig;
use crate::console::Console;

pub fn bench_overload(args: &OverloadConfig, console: &dyn Console) -> Result<(), String> {
    if crate::topology::is_topology(args)? {
        crate::topology::bench(args, console)
    } else if args.link_delay_ms.is_some() || args.link_loss.is_some() || args.link_jitter_ms > 0.0
    {
        Err("link impairment (--link-*) puts relays on the hops of the hop-by-hop topology: add --ses N or hop-by-hop variants".into())
    } else {
        crate::local::bench(args, console)
    }
}
