//! Hardline CIDRs as a prefix table: which listed network, first in list
//! order, holds an address, in one hash probe per distinct prefix length
//! instead of one comparison per network.
//!
//! Blocklists of tens of thousands of networks are ordinary; the labels
//! (`hardline:cidrs:TEXT`) name the first network of the list that holds
//! the address, so the table keeps, per (length, masked address), the
//! lowest list index, and a lookup takes the lowest over every length.
//! Lists of [`LINEAR_UP_TO`] or fewer networks are searched one by one
//! (the oracle the tests compare the table with).

use std::collections::HashMap;
use std::net::IpAddr;

use ipnet::IpNet;

/// Lists this short are searched in order.
const LINEAR_UP_TO: usize = 16;

/// `by_len`'s entries by ascending prefix length.
fn sorted<K>(by_len: HashMap<u8, HashMap<K, usize>>) -> Vec<(u8, HashMap<K, usize>)> {
    let mut v: Vec<_> = by_len.into_iter().collect();
    v.sort_by_key(|(len, _)| *len);
    v
}

/// The hardline networks of a profile, each with its label.
#[derive(Debug, Clone, Default)]
pub(crate) struct CidrTable {
    entries: Vec<(IpNet, String)>,
    /// Per prefix length (ascending), masked IPv4 network → lowest index.
    v4: Vec<(u8, HashMap<u32, usize>)>,
    /// The same for IPv6.
    v6: Vec<(u8, HashMap<u128, usize>)>,
}

impl CidrTable {
    /// The table of `entries`, in list order.
    pub(crate) fn new(entries: Vec<(IpNet, String)>) -> CidrTable {
        let mut v4: HashMap<u8, HashMap<u32, usize>> = HashMap::new();
        let mut v6: HashMap<u8, HashMap<u128, usize>> = HashMap::new();
        if entries.len() > LINEAR_UP_TO {
            for (i, (net, _)) in entries.iter().enumerate() {
                match net {
                    IpNet::V4(n) => {
                        let key = u32::from(n.network());
                        v4.entry(n.prefix_len())
                            .or_default()
                            .entry(key)
                            .or_insert(i);
                    }
                    IpNet::V6(n) => {
                        let key = u128::from(n.network());
                        v6.entry(n.prefix_len())
                            .or_default()
                            .entry(key)
                            .or_insert(i);
                    }
                }
            }
        }
        CidrTable {
            entries,
            v4: sorted(v4),
            v6: sorted(v6),
        }
    }

    /// The label of the first listed network holding any of `ips`.
    pub(crate) fn first_holding(&self, ips: &[IpAddr]) -> Option<&str> {
        let index = if self.entries.len() <= LINEAR_UP_TO {
            self.linear(ips)
        } else {
            ips.iter().filter_map(|ip| self.probe(*ip)).min()
        };
        index.map(|i| self.entries[i].1.as_str())
    }

    /// The list searched in order (small lists; the tests' oracle).
    fn linear(&self, ips: &[IpAddr]) -> Option<usize> {
        self.entries
            .iter()
            .position(|(net, _)| ips.iter().any(|ip| net.contains(ip)))
    }

    fn probe(&self, ip: IpAddr) -> Option<usize> {
        match ip {
            IpAddr::V4(a) => {
                let bits = u32::from(a);
                self.v4
                    .iter()
                    .filter_map(|(len, nets)| nets.get(&mask32(bits, *len)).copied())
                    .min()
            }
            IpAddr::V6(a) => {
                let bits = u128::from(a);
                self.v6
                    .iter()
                    .filter_map(|(len, nets)| nets.get(&mask128(bits, *len)).copied())
                    .min()
            }
        }
    }
}

fn mask32(bits: u32, len: u8) -> u32 {
    match len {
        0 => 0,
        l => bits & (u32::MAX << (32 - u32::from(l.min(32)))),
    }
}

fn mask128(bits: u128, len: u8) -> u128 {
    match len {
        0 => 0,
        l => bits & (u128::MAX << (128 - u32::from(l.min(128)))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn table(nets: &[&str]) -> CidrTable {
        CidrTable::new(
            nets.iter()
                .map(|n| (n.parse().unwrap(), format!("hardline:cidrs:{n}")))
                .collect(),
        )
    }

    #[test]
    fn the_first_listed_network_wins_whatever_its_length() {
        let mut nets: Vec<String> = (0..40).map(|i| format!("10.{i}.0.0/16")).collect();
        nets.insert(3, "10.0.0.0/8".into());
        nets.push("169.254.169.254/32".into());
        nets.push("::/0".into());
        let refs: Vec<&str> = nets.iter().map(String::as_str).collect();
        let t = table(&refs);
        let ip = |s: &str| vec![s.parse::<IpAddr>().unwrap()];
        // 10.1.x is held by 10.1.0.0/16 (index 1) before 10.0.0.0/8 (3).
        assert_eq!(
            t.first_holding(&ip("10.1.2.3")),
            Some("hardline:cidrs:10.1.0.0/16")
        );
        // 10.30.x: the /8 is listed before 10.30.0.0/16.
        assert_eq!(
            t.first_holding(&ip("10.30.2.3")),
            Some("hardline:cidrs:10.0.0.0/8")
        );
        assert_eq!(
            t.first_holding(&ip("169.254.169.254")),
            Some("hardline:cidrs:169.254.169.254/32")
        );
        assert_eq!(t.first_holding(&ip("192.0.2.1")), None);
        assert_eq!(
            t.first_holding(&ip("2001:db8::1")),
            Some("hardline:cidrs:::/0")
        );
        // Any of several reached addresses.
        let both = vec!["192.0.2.1".parse().unwrap(), "10.39.0.1".parse().unwrap()];
        assert_eq!(t.first_holding(&both), Some("hardline:cidrs:10.0.0.0/8"));
    }

    fn net() -> impl Strategy<Value = IpNet> {
        prop_oneof![
            (any::<u32>(), 0u8..=32).prop_map(|(a, l)| {
                IpNet::V4(ipnet::Ipv4Net::new(a.into(), l).unwrap().trunc())
            }),
            (any::<u128>(), 0u8..=128).prop_map(|(a, l)| {
                IpNet::V6(ipnet::Ipv6Net::new(a.into(), l).unwrap().trunc())
            }),
            // Short prefixes of a few bits, so generated addresses hit them.
            (0u32..4, 0u8..=4).prop_map(|(a, l)| {
                IpNet::V4(ipnet::Ipv4Net::new((a << 30).into(), l).unwrap().trunc())
            }),
        ]
    }

    fn addr() -> impl Strategy<Value = IpAddr> {
        prop_oneof![
            any::<u32>().prop_map(|a| IpAddr::V4(a.into())),
            any::<u128>().prop_map(|a| IpAddr::V6(a.into())),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]
        #[test]
        fn the_table_answers_as_the_list_searched_in_order(
            nets in prop::collection::vec(net(), 17..200),
            probes in prop::collection::vec(prop::collection::vec(addr(), 1..3), 1..20),
        ) {
            let entries: Vec<(IpNet, String)> =
                nets.iter().map(|n| (*n, format!("hardline:cidrs:{n}"))).collect();
            let t = CidrTable::new(entries);
            for ips in &probes {
                // Also an address inside each of the first networks.
                prop_assert_eq!(t.first_holding(ips), t.linear(ips).map(|i| t.entries[i].1.as_str()));
            }
            for (net, _) in t.entries.iter().take(10) {
                let inside = vec![net.network()];
                prop_assert_eq!(
                    t.first_holding(&inside),
                    t.linear(&inside).map(|i| t.entries[i].1.as_str())
                );
            }
        }
    }
}
