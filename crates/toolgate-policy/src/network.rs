//! Network targets: the one reading of a URL or host argument that the
//! policy judges and a client connects to.
//!
//! URL parsers disagree. `http://ok.example\@169.254.169.254/` is host
//! `ok.example` to a WHATWG parser and `169.254.169.254` to curl; `http://0/`
//! is `0.0.0.0` to one and a name to another; `2130706433`, `0x7f.1` and
//! `127.1` are loopback to some. A policy that reads a URL one way while the
//! tool reads it another judges a call that never runs. So a target is
//! accepted only in a spelling every common client reads alike, and
//! refused ([`Reason::UrlAmbiguous`]) otherwise:
//!
//! - the URL holds no whitespace, control or invisible formatting
//!   character and no `\` anywhere;
//! - it is `scheme://authority[/?#…]`, the scheme in the profile's allowed
//!   set (`http`, `https` and `egress.allowSchemes`; else
//!   [`Reason::UrlSchemeNotAllowed`]);
//! - the authority is ASCII with no userinfo and no percent-encoding: only
//!   a host and an optional decimal port;
//! - the host is a dotted-quad IPv4 address with no leading zeros, a
//!   bracketed IPv6 address without zone, or a DNS name of letters, digits
//!   and hyphens with no empty label, no trailing dot and a last label that
//!   is not a number;
//! - a WHATWG parse of the same text (the `url` crate) finds the same host.
//!
//! The address a literal reaches is then checked in every form a client can
//! reach it by ([`reached_addresses`]): `0.0.0.0/8` and `::` connect to the
//! local host, and IPv4-mapped, IPv4-compatible, NAT64 and 6to4 IPv6
//! addresses carry an IPv4 address a CIDR rule on IPv4 must see.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use serde_json::{Map, Value};

use crate::error::PolicyError;
use crate::model::Egress;
use crate::verdict::Reason;

/// Schemes every network tool may use; `egress.allowSchemes` adds more.
pub const DEFAULT_SCHEMES: [&str; 2] = ["http", "https"];

/// Argument read as a URL by every network tool, besides `urlArgs`.
pub const URL_ARG: &str = "url";
/// Argument read as a host (`name`, `name:port`, `[v6]:port`) by every
/// network tool, besides `hostArgs`.
pub const HOST_ARG: &str = "host";

/// Where a call connects, read once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// An address literal.
    Ip(IpAddr),
    /// A DNS name, lowercase, without a trailing dot.
    Host(String),
}

/// Which arguments of a tool name network targets.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct TargetArgs {
    pub(crate) urls: Vec<String>,
    pub(crate) hosts: Vec<String>,
}

impl TargetArgs {
    /// The built-in `url` and `host` for network tools, then the declared
    /// ones (each name once).
    pub(crate) fn new(network: bool, url_args: &[String], host_args: &[String]) -> Self {
        let merge = |builtin: &str, declared: &[String]| {
            let mut names: Vec<String> = Vec::new();
            let builtin = network.then(|| builtin.to_owned());
            for name in builtin.into_iter().chain(declared.iter().cloned()) {
                if !names.contains(&name) {
                    names.push(name);
                }
            }
            names
        };
        Self {
            urls: merge(URL_ARG, url_args),
            hosts: merge(HOST_ARG, host_args),
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.urls.is_empty() && self.hosts.is_empty()
    }

    /// Every target the arguments name, strings and the strings of
    /// (nested) arrays alike; the first refusal otherwise (a value that is
    /// neither, an ambiguous spelling).
    pub(crate) fn targets(
        &self,
        args: &Map<String, Value>,
        schemes: &[String],
    ) -> Result<Vec<Target>, Reason> {
        fn each(
            value: &Value,
            read: &mut dyn FnMut(&str) -> Result<(), Reason>,
        ) -> Result<(), Reason> {
            match value {
                Value::String(s) => read(s),
                Value::Array(items) => items.iter().try_for_each(|v| each(v, read)),
                Value::Null => Ok(()),
                _ => Err(Reason::NetworkTargetInvalid),
            }
        }
        let mut out = Vec::new();
        for name in &self.urls {
            if let Some(value) = args.get(name) {
                each(value, &mut |s| {
                    out.push(url_target(s, schemes)?);
                    Ok(())
                })?;
            }
        }
        for name in &self.hosts {
            if let Some(value) = args.get(name) {
                each(value, &mut |s| {
                    out.push(host_target(s)?);
                    Ok(())
                })?;
            }
        }
        Ok(out)
    }
}

/// `egress.allowSchemes`, checked and lowercased: each a scheme name
/// (letters, then letters, digits, `+`, `-`, `.`).
pub(crate) fn compile_schemes(egress: Option<&Egress>) -> Result<Vec<String>, PolicyError> {
    let schemes = egress
        .map(|e| e.allow_schemes.as_slice())
        .unwrap_or_default();
    schemes
        .iter()
        .enumerate()
        .map(|(i, scheme)| {
            if is_scheme(scheme) {
                Ok(scheme.to_ascii_lowercase())
            } else {
                Err(PolicyError::InvalidValue {
                    field: format!("spec.egress.allowSchemes[{i}]"),
                    message: format!("`{scheme}` is not a URL scheme"),
                })
            }
        })
        .collect()
}

/// A URL scheme's syntax: a letter, then letters, digits, `+`, `-`, `.`.
fn is_scheme(text: &str) -> bool {
    text.starts_with(|c: char| c.is_ascii_alphabetic())
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'))
}

/// Invisible formatting characters (bidi controls, zero-width marks) that
/// make a URL read differently on screen than on the wire.
fn is_format(c: char) -> bool {
    matches!(c, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2060}'..='\u{2064}' | '\u{2066}'..='\u{2069}' | '\u{feff}')
}

/// The target of `url`, read as described in the module docs.
pub fn url_target(url: &str, schemes: &[String]) -> Result<Target, Reason> {
    if url
        .chars()
        .any(|c| c == '\\' || c.is_whitespace() || c.is_control() || is_format(c))
    {
        return Err(Reason::UrlAmbiguous);
    }
    let Some((scheme, _)) = url.split_once(':').filter(|(s, _)| is_scheme(s)) else {
        return Err(Reason::NetworkTargetInvalid);
    };
    let scheme = scheme.to_ascii_lowercase();
    if !DEFAULT_SCHEMES.contains(&scheme.as_str()) && !schemes.contains(&scheme) {
        return Err(Reason::UrlSchemeNotAllowed);
    }
    // `http:host` and `http:/host` are read as `http://host` by some and
    // as a path by others.
    let rest = url[scheme.len() + 1..]
        .strip_prefix("//")
        .ok_or(Reason::UrlAmbiguous)?;
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    // `http:///host` is `host` to a WHATWG parser and no host to others.
    if authority.is_empty() || !authority.is_ascii() {
        return Err(Reason::UrlAmbiguous);
    }
    let target = authority_target(authority)?;
    // The WHATWG reading (what browsers and the `url` crate see) must agree.
    let whatwg = url::Url::parse(url).map_err(|_| Reason::UrlAmbiguous)?;
    let agrees = match (whatwg.host(), &target) {
        (Some(url::Host::Ipv4(a)), Target::Ip(IpAddr::V4(b))) => a == *b,
        (Some(url::Host::Ipv6(a)), Target::Ip(IpAddr::V6(b))) => a == *b,
        // Special schemes lowercase the name; others keep it as written.
        (Some(url::Host::Domain(d)), Target::Host(h)) => d.eq_ignore_ascii_case(h),
        _ => false,
    };
    if !agrees || !whatwg.username().is_empty() || whatwg.password().is_some() {
        return Err(Reason::UrlAmbiguous);
    }
    Ok(target)
}

/// The target of a host argument: `name`, `name:port`, `a.b.c.d[:port]`,
/// `[v6]` or `[v6]:port` (a bare IPv6 address is ambiguous with a port).
pub fn host_target(host: &str) -> Result<Target, Reason> {
    if host
        .bytes()
        .any(|b| !(0x21..0x7f).contains(&b) || b == b'\\')
    {
        return Err(Reason::UrlAmbiguous);
    }
    // A bare IPv6 address reads two ways: `::ffff:7f00:1:8080` is one
    // address to an IPv6 parser and `[::ffff:127.0.0.1]:8080` to code that
    // splits the port at the last colon. Only the bracketed form is taken.
    if host.parse::<Ipv6Addr>().is_ok() {
        return Err(Reason::UrlAmbiguous);
    }
    authority_target(host)
}

/// `host[:port]` of an authority with nothing else: no userinfo, no
/// percent-encoding, one spelling of the host.
fn authority_target(authority: &str) -> Result<Target, Reason> {
    if authority.is_empty() {
        return Err(Reason::NetworkTargetInvalid);
    }
    if authority.contains(['@', '%']) {
        return Err(Reason::UrlAmbiguous);
    }
    let (host, port) = if let Some(inner) = authority.strip_prefix('[') {
        let (v6, after) = inner.split_once(']').ok_or(Reason::UrlAmbiguous)?;
        let addr: Ipv6Addr = v6.parse().map_err(|_| Reason::UrlAmbiguous)?;
        let port = match after {
            "" => None,
            p => Some(p.strip_prefix(':').ok_or(Reason::UrlAmbiguous)?),
        };
        check_port(port)?;
        return Ok(Target::Ip(IpAddr::V6(addr)));
    } else {
        match authority.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        }
    };
    check_port(port)?;
    canonical_host(host)
}

/// A port as every parser reads it: 1 to 65535 in decimal, no leading zero.
fn check_port(port: Option<&str>) -> Result<(), Reason> {
    let Some(port) = port else { return Ok(()) };
    let canonical = !port.is_empty()
        && !port.starts_with('0')
        && port.bytes().all(|b| b.is_ascii_digit())
        && port.parse::<u16>().is_ok();
    if canonical {
        Ok(())
    } else {
        Err(Reason::UrlAmbiguous)
    }
}

/// A host in its one spelling: a canonical dotted quad or a DNS name whose
/// last label is not numeric (which some parsers take for an address).
fn canonical_host(host: &str) -> Result<Target, Reason> {
    if host.is_empty() {
        return Err(Reason::NetworkTargetInvalid);
    }
    if let Ok(v4) = host.parse::<Ipv4Addr>() {
        // Rust's parser takes only four decimal parts without leading zeros.
        return Ok(Target::Ip(IpAddr::V4(v4)));
    }
    let labels: Vec<&str> = host.split('.').collect();
    let label_ok = |l: &&str| {
        !l.is_empty()
            && l.len() <= 63
            && l.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    let last = labels.last().copied().unwrap_or_default();
    let numeric_last = last.bytes().all(|b| b.is_ascii_digit())
        || (last.len() > 2 && last[..2].eq_ignore_ascii_case("0x"));
    if host.len() > 253 || !labels.iter().all(label_ok) || numeric_last {
        return Err(Reason::UrlAmbiguous);
    }
    Ok(Target::Host(host.to_ascii_lowercase()))
}

/// Every address a connection to `ip` may reach, `ip` first: the local host
/// for `0.0.0.0/8` and `::`, and the IPv4 address an IPv4-mapped,
/// IPv4-compatible, NAT64 (`64:ff9b::/96`) or 6to4 (`2002::/16`) address
/// carries.
pub fn reached_addresses(ip: IpAddr) -> Vec<IpAddr> {
    let mut out = vec![ip];
    match ip {
        IpAddr::V4(v4) => {
            if v4.octets()[0] == 0 {
                out.push(IpAddr::V4(Ipv4Addr::LOCALHOST));
            }
        }
        IpAddr::V6(v6) => {
            let s = v6.segments();
            let low = Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
            if v6.is_unspecified() {
                out.push(IpAddr::V6(Ipv6Addr::LOCALHOST));
            } else if let Some(v4) = v6.to_ipv4_mapped() {
                out.push(IpAddr::V4(v4));
            } else if s[..6] == [0; 6] && !v6.is_loopback() {
                // IPv4-compatible (deprecated, still routed by some stacks).
                out.push(IpAddr::V4(low));
            } else if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0]
                || s[..3] == [0x64, 0xff9b, 1]
                || s[..6] == [0, 0, 0, 0, 0xffff, 0]
            {
                // NAT64 (RFC 6052's /96, and RFC 8215's local-use prefix
                // with it) and SIIT's IPv4-translated form.
                out.push(IpAddr::V4(low));
            } else if s[0] == 0x2002 {
                let v4 =
                    Ipv4Addr::new((s[1] >> 8) as u8, s[1] as u8, (s[2] >> 8) as u8, s[2] as u8);
                out.push(IpAddr::V4(v4));
            }
            for extra in out.clone().into_iter().skip(1) {
                if let IpAddr::V4(v4) = extra
                    && v4.octets()[0] == 0
                {
                    out.push(IpAddr::V4(Ipv4Addr::LOCALHOST));
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> Target {
        Target::Ip(s.parse().unwrap())
    }

    #[test]
    fn one_reading_urls_are_accepted() {
        let none: Vec<String> = Vec::new();
        for (url, target) in [
            (
                "http://api.example.com/x",
                Target::Host("api.example.com".into()),
            ),
            (
                "HTTPS://API.Example.com:8443/x?y#z",
                Target::Host("api.example.com".into()),
            ),
            ("http://10.0.0.1/", ip("10.0.0.1")),
            ("http://[::1]:80/", ip("::1")),
            (
                "http://ok.example/@169.254.169.254",
                Target::Host("ok.example".into()),
            ),
            ("http://ok.example#@evil", Target::Host("ok.example".into())),
        ] {
            assert_eq!(url_target(url, &none), Ok(target), "{url}");
        }
    }

    #[test]
    fn urls_read_two_ways_are_refused() {
        let none: Vec<String> = Vec::new();
        for url in [
            "http://ok.example\\@169.254.169.254/",
            "http://ok.example@169.254.169.254/",
            "http://user:pw@ok.example/",
            "http://0/",
            "http://2130706433/",
            "http://0x7f.1/",
            "http://127.1/",
            "http://0177.0.0.1/",
            "http://ok.example./",
            "http://ok.example%2e/",
            "http://%6fk.example/",
            "http://ok.example:/",
            "http://ok.example:080/",
            "http://ok.example:99999/",
            "http://ok .example/",
            "http://ok.example\t/",
            "http://ok.exa\nmple/",
            "http:ok.example",
            "http:/ok.example/",
            "http://[::1%25eth0]/",
            "http://xn--80ak6aa92e.com\u{0430}/",
            "http://\u{0430}pple.com/",
            "http://foo.123/",
        ] {
            assert_eq!(url_target(url, &none), Err(Reason::UrlAmbiguous), "{url:?}");
        }
    }

    #[test]
    fn schemes_outside_the_set_are_refused() {
        let wss = vec!["wss".to_owned()];
        for url in [
            "gopher://ok.example/",
            "ftp://ok.example/",
            "file:///etc/passwd",
            "wss://ok.example/",
            "mailto:x@ok.example",
        ] {
            assert_eq!(
                url_target(url, &[]),
                Err(Reason::UrlSchemeNotAllowed),
                "{url}"
            );
        }
        assert_eq!(
            url_target("wss://ok.example/", &wss),
            Ok(Target::Host("ok.example".into()))
        );
    }

    #[test]
    fn hosts_take_one_spelling() {
        assert_eq!(host_target("127.0.0.1:8080"), Ok(ip("127.0.0.1")));
        assert_eq!(host_target("[::1]:443"), Ok(ip("::1")));
        assert_eq!(host_target("::1"), Err(Reason::UrlAmbiguous));
        assert_eq!(
            host_target("API.github.com"),
            Ok(Target::Host("api.github.com".into()))
        );
        for bad in ["2130706433", "0x7f.1", "a@b", "a.b.", " a.b", "a..b"] {
            assert_eq!(host_target(bad), Err(Reason::UrlAmbiguous), "{bad}");
        }
    }

    #[test]
    fn every_address_form_reaches_its_ipv4() {
        let metadata: IpAddr = "169.254.169.254".parse().unwrap();
        for form in [
            "::ffff:169.254.169.254",
            "::169.254.169.254",
            "64:ff9b::a9fe:a9fe",
            "64:ff9b:1::a9fe:a9fe",
            "::ffff:0:169.254.169.254",
            "2002:a9fe:a9fe::1",
        ] {
            let reached = reached_addresses(form.parse().unwrap());
            assert!(reached.contains(&metadata), "{form}: {reached:?}");
        }
        let local: IpAddr = "127.0.0.1".parse().unwrap();
        assert!(reached_addresses("0.0.0.0".parse().unwrap()).contains(&local));
        assert!(reached_addresses("0.1.2.3".parse().unwrap()).contains(&local));
        assert!(reached_addresses("::".parse().unwrap()).contains(&"::1".parse().unwrap()));
        assert_eq!(reached_addresses("::1".parse().unwrap()).len(), 1);
    }
}
