//! Addresses in the configuration as `host:port`, where the host may be a name: names are
//! resolved once, when the configuration is read (the proxy then runs on addresses, as
//! the papers' servers do; a name that later moves needs a reload or restart).

use std::net::{SocketAddr, ToSocketAddrs};

use serde::{Deserialize, Deserializer};

/// Resolves `host:port`. An IP literal is taken as it is; a name takes its first IPv4
/// address if it has one (loopback and most SIP peers are reached over IPv4; `localhost`
/// often lists `::1` first), else its first address.
pub fn resolve(text: &str) -> Result<SocketAddr, String> {
    if let Ok(addr) = text.parse::<SocketAddr>() {
        return Ok(addr);
    }
    if text
        .rsplit_once(':')
        .is_none_or(|(host, port)| host.is_empty() || port.parse::<u16>().is_err())
    {
        return Err(format!(
            "`{text}` is not host:port (such as 127.0.0.1:5060 or sip.example.net:5060)"
        ));
    }
    let addrs: Vec<SocketAddr> = text
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve `{text}`: {e}"))?
        .collect();
    addrs
        .iter()
        .find(|a| a.is_ipv4())
        .or_else(|| addrs.first())
        .copied()
        .ok_or_else(|| format!("`{text}` resolves to no address"))
}

fn one<'de, D: Deserializer<'de>>(d: D) -> Result<SocketAddr, D::Error> {
    let text = String::deserialize(d)?;
    resolve(&text).map_err(serde::de::Error::custom)
}

/// `#[serde(deserialize_with)]` for a `SocketAddr` field.
pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<SocketAddr, D::Error> {
    one(d)
}

/// `#[serde(deserialize_with)]` for an `Option<SocketAddr>` field.
pub fn deserialize_option<'de, D: Deserializer<'de>>(d: D) -> Result<Option<SocketAddr>, D::Error> {
    Option::<String>::deserialize(d)?
        .map(|t| resolve(&t).map_err(serde::de::Error::custom))
        .transpose()
}

/// `#[serde(deserialize_with)]` for a `Vec<SocketAddr>` field.
pub fn deserialize_vec<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<SocketAddr>, D::Error> {
    Vec::<String>::deserialize(d)?
        .iter()
        .map(|t| resolve(t).map_err(serde::de::Error::custom))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_pass_names_resolve_and_nonsense_is_named() {
        assert_eq!(
            resolve("127.0.0.1:5060").unwrap(),
            "127.0.0.1:5060".parse().unwrap()
        );
        assert_eq!(
            resolve("[::1]:5060").unwrap(),
            "[::1]:5060".parse().unwrap()
        );
        let local = resolve("localhost:5070").unwrap();
        assert!(local.ip().is_loopback() && local.port() == 5070, "{local}");
        let e = resolve("localhost").unwrap_err();
        assert!(e.contains("not host:port"), "{e}");
        let e = resolve("no-such-host.invalid:5060").unwrap_err();
        assert!(
            e.contains("cannot resolve `no-such-host.invalid:5060`"),
            "{e}"
        );
    }

    #[test]
    fn a_config_may_name_hosts() {
        let config: crate::ProxyConfig = toml::from_str(
            "listen = \"localhost:5060\"\nnext_hop = \"localhost:5070\"\n\
             [overload]\nrole = \"se\"\nnext_hops = [\"localhost:5070\"]\n",
        )
        .unwrap();
        assert_eq!(config.listen, "127.0.0.1:5060".parse().unwrap());
        assert_eq!(config.overload.next_hops, vec![config.next_hop.unwrap()]);
        let e =
            toml::from_str::<crate::ProxyConfig>("next_hop = \"nowhere.invalid:1\"\n").unwrap_err();
        assert!(e.to_string().contains("cannot resolve"), "{e}");
    }
}
