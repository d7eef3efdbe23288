//! Whether a request that changes something comes from the console's own
//! pages: its origin is the console's, scheme, host and port.

use axum::http::{HeaderMap, HeaderValue};

/// Whether a state-changing request comes from our own pages: browsers say
/// where a request comes from, in `Sec-Fetch-Site` (trusted when sent) or
/// else `Origin`, which must be the console's own origin: `scheme` (how
/// people reach it: `https` behind TLS, `http` only for plain-HTTP
/// development), and the host and port the request was sent to (`Host`),
/// all three compared. A cross-site one is refused even before its form
/// token is checked. A client that sends neither is not a browser a page
/// could drive, and still needs the form token.
pub fn same_origin(headers: &HeaderMap, scheme: &str) -> bool {
    let text = |name| {
        headers
            .get(name)
            .and_then(|v: &HeaderValue| v.to_str().ok())
    };
    if let Some(site) = text("sec-fetch-site") {
        return site == "same-origin";
    }
    if headers.get_all(axum::http::header::ORIGIN).iter().count() > 1 {
        return false;
    }
    let Some(origin) = text(axum::http::header::ORIGIN.as_str()) else {
        return true;
    };
    let Some((origin_scheme, origin_host)) = origin.split_once("://") else {
        return false; // "null", or nonsense
    };
    let Some(host) = text(axum::http::header::HOST.as_str()) else {
        return false;
    };
    origin_scheme.eq_ignore_ascii_case(scheme)
        && authority(origin_host, scheme).is_some_and(|o| Some(o) == authority(host, scheme))
}

/// `host[:port]` as (lowercase host, port), the scheme's port when none is
/// written; `None` for anything else (a path, user info, a bad port).
fn authority(text: &str, scheme: &str) -> Option<(String, u16)> {
    if text.is_empty() || text.contains(['/', '@', '?', '#', ' ']) {
        return None;
    }
    let (host, port) = match text.rsplit_once(':') {
        // An IPv6 address without a port: "[::1]".
        Some((_, tail)) if text.starts_with('[') && text.ends_with(']') && tail.ends_with(']') => {
            (text, None)
        }
        Some((host, port)) => (host, Some(port)),
        None => (text, None),
    };
    let port = match port {
        Some(p) if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) => p.parse().ok()?,
        Some(_) => return None,
        None => match scheme {
            "https" => 443,
            "http" => 80,
            _ => return None,
        },
    };
    (!host.is_empty()).then(|| (host.to_ascii_lowercase(), port))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, v.parse().unwrap());
        }
        h
    }

    #[test]
    fn cross_site_posts_are_refused() {
        let https = |pairs: &[(&'static str, &str)]| same_origin(&headers(pairs), "https");
        assert!(https(&[
            ("host", "console.example"),
            ("origin", "https://console.example")
        ]));
        // The scheme's own port, written or not.
        assert!(https(&[
            ("host", "Console.example:443"),
            ("origin", "https://console.example")
        ]));
        assert!(https(&[
            ("host", "console.example:8443"),
            ("origin", "https://console.example:8443")
        ]));
        assert!(same_origin(
            &headers(&[("host", "[::1]:8080"), ("origin", "http://[::1]:8080")]),
            "http"
        ));
        assert!(!https(&[
            ("host", "console.example"),
            ("origin", "https://evil.example")
        ]));
        // Same host, another port or scheme: another origin.
        assert!(!https(&[
            ("host", "console.example"),
            ("origin", "https://console.example:8443")
        ]));
        assert!(!https(&[
            ("host", "console.example:8443"),
            ("origin", "https://console.example:9443")
        ]));
        assert!(!https(&[
            ("host", "console.example"),
            ("origin", "http://console.example")
        ]));
        assert!(!https(&[
            ("host", "console.example:443"),
            ("origin", "http://console.example:443")
        ]));
        assert!(!same_origin(
            &headers(&[
                ("host", "127.0.0.1:8080"),
                ("origin", "http://127.0.0.1:8081")
            ]),
            "http"
        ));
        assert!(!https(&[
            ("host", "console.example"),
            ("origin", "https://console.example.evil.example")
        ]));
        assert!(!https(&[
            ("host", "console.example"),
            ("origin", "https://console.example@evil.example")
        ]));
        assert!(!https(&[("origin", "https://console.example")]));
        assert!(!https(&[("sec-fetch-site", "cross-site")]));
        assert!(https(&[
            ("sec-fetch-site", "same-origin"),
            ("origin", "null")
        ]));
        assert!(!https(&[("sec-fetch-site", "same-site")]));
        assert!(!https(&[("host", "console.example"), ("origin", "null")]));
        assert!(https(&[("host", "console.example")]));
    }
}
