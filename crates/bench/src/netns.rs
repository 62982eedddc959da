//! Testbeds of several hosts on one machine, built with iproute2's `ip` (root needed) and
//! torn down when dropped; only the namespaces they create receive traffic.
//! - [`Testbed`]: the proxy under test in a network namespace of its own, joined to the
//!   bench's namespace (where the generator runs) by a veth pair, so that calls cross a
//!   network device with its own addresses instead of loopback.
//! - [`Lan`]: a namespace per host (callers, each proxy, callees), all on one bridge in a
//!   namespace of its own; the bench's threads enter a host's namespace ([`enter`]) before
//!   they make its sockets, so one process runs every host.

use std::net::{IpAddr, Ipv4Addr};
use std::process::Command;

/// Where the generator and the proxy under test live.
#[derive(Clone, Debug)]
pub struct Hosts {
    /// The generator's (UAC and UAS) address.
    pub generator: IpAddr,
    /// The proxy's address.
    pub proxy: IpAddr,
    /// The namespace the proxy runs in (`None`: the bench's own).
    pub proxy_netns: Option<String>,
}

impl Hosts {
    /// Everything on loopback, in the bench's namespace.
    pub fn loopback() -> Hosts {
        Hosts {
            generator: IpAddr::V4(Ipv4Addr::LOCALHOST),
            proxy: IpAddr::V4(Ipv4Addr::LOCALHOST),
            proxy_netns: None,
        }
    }

    /// `command` (a shell command line) run in the proxy's namespace.
    pub fn in_proxy_netns(&self, command: &str) -> String {
        match &self.proxy_netns {
            Some(ns) => format!("ip netns exec {ns} {command}"),
            None => command.to_owned(),
        }
    }
}

/// A namespace and a veth pair this process created; dropping it deletes both.
#[derive(Debug)]
pub struct Testbed {
    netns: String,
    /// The bench's end of the pair.
    device: String,
    hosts: Hosts,
}

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("--netns needs iproute2's `ip` (apt-get install iproute2): {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {} (--netns needs root)",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

impl Testbed {
    /// Creates the namespace `sluice-dut-<pid>` and a veth pair into it: the bench's end
    /// 10.77.N.1/30, the proxy's 10.77.N.2/30, with N the process id modulo 250, so that
    /// benches running at once rarely share a subnet (`ip` refuses the second namespace
    /// of a process id).
    pub fn create() -> Result<Testbed, String> {
        remove_orphans();
        let pid = std::process::id();
        let netns = format!("sluice-dut-{pid}");
        // Interface names are at most 15 bytes.
        let device = format!("slg{}", pid % 10_000_000);
        let peer = format!("sld{}", pid % 10_000_000);
        let subnet = u8::try_from(pid % 250).unwrap_or(0);
        let generator = Ipv4Addr::new(10, 77, subnet, 1);
        let proxy = Ipv4Addr::new(10, 77, subnet, 2);
        ip(&["netns", "add", &netns])?;
        // From here on, dropping the testbed undoes what was made.
        let bed = Testbed {
            netns: netns.clone(),
            device: device.clone(),
            hosts: Hosts {
                generator: IpAddr::V4(generator),
                proxy: IpAddr::V4(proxy),
                proxy_netns: Some(netns.clone()),
            },
        };
        ip(&[
            "link", "add", &device, "type", "veth", "peer", "name", &peer, "netns", &netns,
        ])?;
        ip(&["addr", "add", &format!("{generator}/30"), "dev", &device])?;
        ip(&["link", "set", &device, "up"])?;
        ip(&[
            "-n",
            &netns,
            "addr",
            "add",
            &format!("{proxy}/30"),
            "dev",
            &peer,
        ])?;
        ip(&["-n", &netns, "link", "set", &peer, "up"])?;
        ip(&["-n", &netns, "link", "set", "lo", "up"])?;
        Ok(bed)
    }

    pub fn hosts(&self) -> &Hosts {
        &self.hosts
    }
}

/// Hosts on one Ethernet segment: each host a namespace `sluice-<host>-<pid>` with an
/// `eth0` at 10.78.0.N/24 (N from 1, in the order given), its veth peer on a bridge in the
/// namespace `sluice-lan-<pid>`. No device or route is added to the bench's namespace.
#[derive(Debug)]
pub struct Lan {
    /// Every namespace made, the bridge's first: each is deleted on drop.
    namespaces: Vec<String>,
    hosts: Vec<(String, Ipv4Addr)>,
}

impl Lan {
    pub fn create(hosts: &[&str]) -> Result<Lan, String> {
        if hosts.len() > 250 {
            return Err(format!("a LAN of {} hosts: at most 250", hosts.len()));
        }
        remove_orphans();
        let pid = std::process::id();
        let bridge_ns = format!("sluice-lan-{pid}");
        ip(&["netns", "add", &bridge_ns])?;
        let mut lan = Lan {
            namespaces: vec![bridge_ns.clone()],
            hosts: Vec::new(),
        };
        ip(&["-n", &bridge_ns, "link", "add", "br0", "type", "bridge"])?;
        ip(&["-n", &bridge_ns, "link", "set", "br0", "up"])?;
        for (i, host) in hosts.iter().enumerate() {
            let netns = format!("sluice-{host}-{pid}");
            ip(&["netns", "add", &netns])?;
            lan.namespaces.push(netns.clone());
            let port = format!("h{i}");
            let addr = Ipv4Addr::new(10, 78, 0, i as u8 + 1);
            ip(&[
                "-n", &bridge_ns, "link", "add", &port, "type", "veth", "peer", "name", "eth0",
                "netns", &netns,
            ])?;
            ip(&["-n", &bridge_ns, "link", "set", &port, "master", "br0"])?;
            ip(&["-n", &bridge_ns, "link", "set", &port, "up"])?;
            ip(&[
                "-n",
                &netns,
                "addr",
                "add",
                &format!("{addr}/24"),
                "dev",
                "eth0",
            ])?;
            ip(&["-n", &netns, "link", "set", "eth0", "up"])?;
            ip(&["-n", &netns, "link", "set", "lo", "up"])?;
            lan.hosts.push((netns, addr));
        }
        Ok(lan)
    }

    /// The namespace and address of the `i`th host given to [`Lan::create`].
    pub fn host(&self, i: usize) -> Option<(&str, IpAddr)> {
        self.hosts
            .get(i)
            .map(|(ns, addr)| (ns.as_str(), IpAddr::V4(*addr)))
    }
}

impl Drop for Lan {
    fn drop(&mut self) {
        // Deleting a host's namespace deletes its eth0, and with it the peer on the bridge.
        for ns in self.namespaces.iter().rev() {
            let _ = ip(&["netns", "del", ns]);
        }
    }
}

/// Moves the calling thread into the network namespace `netns` (made by `ip netns add`):
/// the sockets it makes from then on, and the threads it starts, are that namespace's.
pub fn enter(netns: &str) -> Result<(), String> {
    let path = format!("/run/netns/{netns}");
    let file = std::fs::File::open(&path).map_err(|e| format!("{path}: {e}"))?;
    nix::sched::setns(&file, nix::sched::CloneFlags::CLONE_NEWNET)
        .map_err(|e| format!("entering the network namespace {netns}: {e}"))
}

/// Runs `f` with the calling thread in `netns` (if given), then moves it back: what `f`
/// binds, and the threads it starts, stay in `netns`.
pub fn within<T>(netns: Option<&str>, f: impl FnOnce() -> Result<T, String>) -> Result<T, String> {
    let Some(netns) = netns else { return f() };
    let home = std::fs::File::open("/proc/thread-self/ns/net")
        .map_err(|e| format!("/proc/thread-self/ns/net: {e}"))?;
    enter(netns)?;
    let result = f();
    nix::sched::setns(&home, nix::sched::CloneFlags::CLONE_NEWNET)
        .map_err(|e| format!("back from the network namespace {netns}: {e}"))?;
    result
}

/// A bench stopped by a signal does not drop its testbed: the namespaces of benches whose
/// process is gone are deleted before a new one is made (and with them their veth pairs).
fn remove_orphans() {
    for ns in orphans(&list_namespaces()) {
        let _ = ip(&["netns", "del", &ns]);
    }
}

fn list_namespaces() -> String {
    Command::new("ip")
        .args(["netns", "list"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
}

/// The `sluice-<role>-<pid>` namespaces in `ip netns list` output whose process has ended.
fn orphans(listing: &str) -> Vec<String> {
    listing
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter_map(|ns| {
            let (_, pid) = ns.strip_prefix("sluice-")?.rsplit_once('-')?;
            let pid = pid.parse::<u32>().ok()?;
            let alive = std::path::Path::new(&format!("/proc/{pid}")).exists();
            (!alive).then(|| ns.to_owned())
        })
        .collect()
}

impl Drop for Testbed {
    fn drop(&mut self) {
        // Deleting the namespace deletes the peer in it, and with it the bench's end.
        let _ = ip(&["netns", "del", &self.netns]);
        let _ = ip(&["link", "del", &self.device]);
    }
}

#[cfg(test)]
mod tests {
    use super::{orphans, Hosts};

    #[test]
    fn only_the_namespaces_of_ended_benches_are_orphans() {
        // This process is alive; no process has the largest pid Linux allows plus one.
        let me = std::process::id();
        let listing = format!(
            "sluice-dut-{me} (id: 3)\nsluice-dut-4194305 (id: 4)\nother-4194305\nsluice-dut-x\n\
             sluice-se2-4194305\nsluice-se2-{me}\n"
        );
        assert_eq!(
            orphans(&listing),
            vec![
                "sluice-dut-4194305".to_owned(),
                "sluice-se2-4194305".to_owned()
            ]
        );
    }

    #[test]
    fn commands_run_in_the_proxys_namespace_only_when_it_has_one() {
        let mut hosts = Hosts::loopback();
        assert_eq!(hosts.in_proxy_netns("sluice proxy"), "sluice proxy");
        hosts.proxy_netns = Some("sluice-dut-7".into());
        assert_eq!(
            hosts.in_proxy_netns("'/bin/sluice' proxy --listen 10.77.0.2:5060"),
            "ip netns exec sluice-dut-7 '/bin/sluice' proxy --listen 10.77.0.2:5060"
        );
    }
}
