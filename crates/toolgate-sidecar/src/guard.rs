//! What keeps the agent API a loopback API: a hostile web page that a
//! browser inside the pod visits (or a DNS-rebinding name that resolves to
//! 127.0.0.1) can make the browser send requests to the sidecar, but it
//! cannot make them carry a loopback `Host`, a same-origin `Origin` and a
//! JSON content type all at once without a CORS preflight the sidecar never
//! answers.

use std::net::IpAddr;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{Method, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::error::ApiError;

/// Refuses a request whose `Host` is not loopback (421), whose `Origin`
/// names another host (403), or which is a POST without
/// `Content-Type: application/json` (415). `local_hosts`: the names,
/// besides loopback addresses and `localhost`, the agent API answers to.
pub async fn local_json_only(
    State(local_hosts): State<Arc<Vec<String>>>,
    request: Request,
    next: Next,
) -> Response {
    match check(&local_hosts, &request) {
        Ok(()) => next.run(request).await,
        Err(e) => e.into_response(),
    }
}

fn check(local_hosts: &[String], request: &Request) -> Result<(), ApiError> {
    let headers = request.headers();
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .or_else(|| request.uri().authority().map(|a| a.as_str()))
        .ok_or_else(|| ApiError::HostNotAllowed("a Host header is required".into()))?;
    if !is_local(local_hosts, host_name(host)) {
        return Err(ApiError::HostNotAllowed(format!(
            "host `{}` is not this pod's loopback API",
            host.chars().take(64).collect::<String>()
        )));
    }
    if let Some(origin) = headers.get(header::ORIGIN) {
        let allowed = origin
            .to_str()
            .ok()
            .and_then(|o| url::Url::parse(o).ok())
            .is_some_and(|u| u.host_str().is_some_and(|h| is_local(local_hosts, h)));
        if !allowed {
            return Err(ApiError::OriginNotAllowed(
                "cross-origin requests are refused".into(),
            ));
        }
    }
    if request.method() == Method::POST {
        let json = headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
            .is_some_and(|essence| essence.trim().eq_ignore_ascii_case("application/json"));
        if !json {
            return Err(ApiError::UnsupportedMediaType(
                "POST bodies must be sent as Content-Type: application/json".into(),
            ));
        }
    }
    Ok(())
}

/// `host[:port]` or `[v6]:port` without the port and brackets.
fn host_name(authority: &str) -> &str {
    if let Some(rest) = authority.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    match authority.rsplit_once(':') {
        Some((h, port)) if port.bytes().all(|b| b.is_ascii_digit()) => h,
        _ => authority,
    }
}

fn is_local(local_hosts: &[String], host: &str) -> bool {
    let host = host.trim_end_matches('.');
    if host.eq_ignore_ascii_case("localhost") {
        return true;
    }
    if let Ok(ip) = host.parse::<IpAddr>() {
        return ip.is_loopback()
            || local_hosts
                .iter()
                .any(|h| h.parse::<IpAddr>().is_ok_and(|l| l == ip));
    }
    local_hosts.iter().any(|h| h.eq_ignore_ascii_case(host))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(method: Method, host: Option<&str>, extra: &[(&str, &str)]) -> Request {
        let mut b = Request::builder().method(method).uri("/v1/authorize");
        if let Some(h) = host {
            b = b.header(header::HOST, h);
        }
        for (k, v) in extra {
            b = b.header(*k, *v);
        }
        b.body(axum::body::Body::empty()).unwrap()
    }

    #[test]
    fn loopback_hosts_pass_and_others_are_misdirected() {
        let json = [("content-type", "application/json; charset=utf-8")];
        for host in [
            "127.0.0.1:15031",
            "localhost:15031",
            "[::1]:15031",
            "127.0.0.2",
            "LOCALHOST.",
        ] {
            assert!(
                check(&[], &req(Method::POST, Some(host), &json)).is_ok(),
                "{host}"
            );
        }
        for host in [
            "attacker.example",
            "attacker.example:15031",
            "10.0.0.1:15031",
            "127.0.0.1.nip.io",
        ] {
            let err = check(&[], &req(Method::POST, Some(host), &json)).unwrap_err();
            assert_eq!(err.code(), "host_not_allowed", "{host}");
        }
        assert_eq!(
            check(&[], &req(Method::GET, None, &[])).unwrap_err().code(),
            "host_not_allowed"
        );
        let pod = vec!["agent-0".to_owned(), "10.1.2.3".to_owned()];
        assert!(check(&pod, &req(Method::GET, Some("agent-0:15031"), &[])).is_ok());
        assert!(check(&pod, &req(Method::GET, Some("10.1.2.3:15031"), &[])).is_ok());
    }

    #[test]
    fn posts_must_be_json_and_same_origin() {
        let host = Some("127.0.0.1:15031");
        for ct in [
            "text/plain",
            "application/x-www-form-urlencoded",
            "multipart/form-data; boundary=x",
            "application/jsonx",
        ] {
            let err = check(&[], &req(Method::POST, host, &[("content-type", ct)])).unwrap_err();
            assert_eq!(err.code(), "unsupported_media_type", "{ct}");
        }
        assert_eq!(
            check(&[], &req(Method::POST, host, &[]))
                .unwrap_err()
                .code(),
            "unsupported_media_type"
        );
        let json = ("content-type", "application/json");
        let err = check(
            &[],
            &req(
                Method::POST,
                host,
                &[json, ("origin", "https://attacker.example")],
            ),
        )
        .unwrap_err();
        assert_eq!(err.code(), "origin_not_allowed");
        assert_eq!(
            check(&[], &req(Method::POST, host, &[json, ("origin", "null")]))
                .unwrap_err()
                .code(),
            "origin_not_allowed"
        );
        assert!(
            check(
                &[],
                &req(
                    Method::POST,
                    host,
                    &[json, ("origin", "http://127.0.0.1:15031")]
                )
            )
            .is_ok()
        );
        assert!(check(&[], &req(Method::GET, host, &[])).is_ok());
    }
}
