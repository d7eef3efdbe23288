//! The headers of the HTTP gateway: what of the agent's request reaches the
//! upstream (the protocol's own, never its `Authorization`), the gateway's
//! credential for the upstream, the routing and `Mcp-Param-*` headers made
//! from the forwarded body, and the check of the agent's against its body.

use axum::http::HeaderMap;
use serde_json::Value;
use toolgate_mcp::gateway::Gateway;
use toolgate_mcp::message;

use super::{InProcess, Upstream};
use crate::error::ApiError;

/// What the upstream is told the request accepts and carries: the
/// gateway's own values, never the agent's text (`Accept: …;x=SECRET`).
const ACCEPT: &str = "application/json, text/event-stream";
const CONTENT_TYPE: &str = "application/json";
/// Longest upstream credential read from `--mcp-credentials-dir`.
const MAX_CREDENTIAL_BYTES: u64 = 8 * 1024;
/// Headers of the agent's request that the upstream gets.
pub(super) fn forward_headers(from: &HeaderMap) -> reqwest::header::HeaderMap {
    use reqwest::header::{ACCEPT as ACCEPT_H, CONTENT_TYPE as CONTENT_TYPE_H, HeaderValue};
    let mut out = reqwest::header::HeaderMap::new();
    out.insert(ACCEPT_H, HeaderValue::from_static(ACCEPT));
    out.insert(CONTENT_TYPE_H, HeaderValue::from_static(CONTENT_TYPE));
    // The session id was checked against those the upstream issued; the
    // protocol version is a date or nothing.
    let version =
        header(from, "mcp-protocol-version").filter(|v| toolgate_mcp::protocol::is_version(v));
    let session = header(from, "mcp-session-id");
    for (name, value) in [
        ("mcp-protocol-version", version),
        ("mcp-session-id", session),
    ] {
        if let Some(value) = value.and_then(|v| HeaderValue::from_str(v).ok()) {
            out.insert(name, value);
        }
    }
    out
}

impl Upstream {
    /// The headers `upstream` gets for a request of the agent that came
    /// with `from`: the forwarded ones and the gateway's own credential.
    pub(super) fn headers(&self, from: &HeaderMap) -> Result<reqwest::header::HeaderMap, ApiError> {
        let mut out = forward_headers(from);
        let Some(path) = &self.credential else {
            return Ok(out);
        };
        let unusable = |why: String| {
            ApiError::McpUpstream(format!("{}: credential {why}", self.gateway.server()))
        };
        // Read at every request, so a rotated Secret applies at once; a
        // missing file means this upstream takes no credential.
        let text = match std::fs::File::open(path) {
            Ok(file) => {
                let mut text = String::new();
                std::io::Read::read_to_string(
                    &mut std::io::Read::take(file, MAX_CREDENTIAL_BYTES + 1),
                    &mut text,
                )
                .map_err(|e| unusable(format!("unreadable ({})", e.kind())))?;
                text
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
            Err(e) => return Err(unusable(format!("unreadable ({})", e.kind()))),
        };
        if text.len() as u64 > MAX_CREDENTIAL_BYTES {
            return Err(unusable("larger than 8 KiB".into()));
        }
        let value = reqwest::header::HeaderValue::from_str(text.trim_end_matches(['\r', '\n']))
            .map_err(|_| unusable("is not a header value".into()))?;
        out.insert(reqwest::header::AUTHORIZATION, value);
        Ok(out)
    }
}

pub(super) fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// `Mcp-Method` / `Mcp-Name` and the `Mcp-Param-*` headers of a
/// 2026-07-28 request, from the message the upstream gets (the client's own
/// are never passed on).
pub(super) fn set_routing_headers(
    headers: &mut reqwest::header::HeaderMap,
    message: &Value,
    gateway: &Gateway<InProcess>,
) {
    let routing = message::routing_headers(message)
        .into_iter()
        .map(|(name, value)| (name.to_owned(), value));
    for (name, value) in routing.chain(gateway.param_headers(message)) {
        if let (Ok(name), Ok(value)) = (
            reqwest::header::HeaderName::from_bytes(name.as_bytes()),
            reqwest::header::HeaderValue::from_str(&value),
        ) {
            headers.insert(name, value);
        }
    }
}

/// `Mcp-Method` / `Mcp-Name` that contradict the body, or (protocol
/// 2026-07-28, `modern`) that are missing where the body calls for them.
pub(super) fn header_mismatch(
    headers: &HeaderMap,
    message: &Value,
    modern: bool,
) -> Option<String> {
    for name in ["mcp-method", "mcp-name"] {
        if headers.get(name).is_some() && header(headers, name).is_none() {
            return Some(format!("{name} header is not visible ASCII"));
        }
    }
    let version = message
        .pointer("/params/_meta")
        .and_then(|m| m.get(toolgate_mcp::protocol::PROTOCOL_VERSION))
        .and_then(Value::as_str);
    if let (Some(h), Some(v)) = (header(headers, "mcp-protocol-version"), version)
        && h != v
    {
        return Some(format!(
            "MCP-Protocol-Version header `{h}` does not match the request's `{v}`"
        ));
    }
    let method = message.get("method").and_then(Value::as_str);
    match (header(headers, "mcp-method"), method) {
        (Some(h), _) if Some(h) != method => {
            return Some(format!(
                "Mcp-Method header `{h}` does not match the body's method"
            ));
        }
        (None, Some(m)) if modern => {
            return Some(format!("Mcp-Method header missing for `{m}`"));
        }
        _ => {}
    }
    let name = message::routed_name(message);
    match (header(headers, "mcp-name"), &name) {
        (Some(h), _) if message::header_name(h).as_deref() != name => {
            Some(format!("Mcp-Name header `{h}` does not match the body"))
        }
        (None, Some(_)) if modern => Some("Mcp-Name header missing".into()),
        _ => None,
    }
}
