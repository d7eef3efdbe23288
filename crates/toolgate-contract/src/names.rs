//! Names the webhook writes into a pod and the sidecar (or the controller)
//! reads back: the container, its ports, the ConfigMaps it mounts and the
//! volumes and paths they are mounted at. Each is defined once, here.

/// Name of the injected sidecar container.
pub const SIDECAR_NAME: &str = "toolgate-sidecar";

/// Prefix of a profile's bundle ConfigMap name; see [`bundle_configmap`].
pub const BUNDLE_CONFIGMAP_PREFIX: &str = "toolgate-bundle-";
/// Key of the DSSE envelope inside the bundle ConfigMap.
pub const BUNDLE_KEY: &str = "bundle.json";
/// ConfigMap (one per namespace) holding the trusted public keys.
pub const TRUST_CONFIGMAP: &str = "toolgate-trust";
/// Key of the PEM inside [`TRUST_CONFIGMAP`].
pub const TRUST_FIELD: &str = "trust.pem";
/// The W3C trace-context fields, as header names and as `params._meta`
/// members of an MCP message: what every way in reads and passes on.
pub const TRACE_CONTEXT_FIELDS: [&str; 2] = ["traceparent", "tracestate"];
/// The Secret (in a tenant's namespace) holding the database URL its
/// injected sidecars read as [`DATABASE_URL`](crate::env::DATABASE_URL):
/// the controller writes it, the webhook points the sidecar at it (the
/// chart's `sidecar.databaseSecret`; this is the default name).
pub const DATABASE_SECRET: &str = "toolgate-database";
/// Key of the URL inside [`DATABASE_SECRET`].
pub const DATABASE_SECRET_KEY: &str = "url";
/// The one Secret (in a profile's namespace, and in the controller's for
/// the cluster's default channels) whose keys hold notification URLs and
/// signing secrets: the controller may read it by this name and no other.
pub const NOTIFY_SECRET: &str = "toolgate-notify";

/// Name of the bundle ConfigMap of profile `profile`: the controller writes
/// it, the webhook mounts it into the sidecar.
pub fn bundle_configmap(profile: &str) -> String {
    format!("{BUNDLE_CONFIGMAP_PREFIX}{profile}")
}

/// Port the sidecar's agent API listens on, on loopback.
pub const SIDECAR_PORT: u16 = 15031;
/// Port of the sidecar's probes and metrics, on the pod IP (the agent API
/// stays on loopback, where the kubelet cannot reach it).
pub const OPS_PORT: u16 = 15032;
/// Default listen address of the sidecar's agent API ([`SIDECAR_PORT`]).
pub const SIDECAR_LISTEN: &str = "127.0.0.1:15031";
/// Listen address of the injected sidecar's probes and metrics ([`OPS_PORT`]).
pub const OPS_LISTEN: &str = "0.0.0.0:15032";
/// What every app container gets as `TOOLGATE_URL`.
pub const SIDECAR_URL: &str = "http://127.0.0.1:15031";

/// Volume holding the signed bundle (ConfigMap `toolgate-bundle-<profile>`).
pub const VOLUME_BUNDLE: &str = "toolgate-bundle";
/// Volume holding the trust set (ConfigMap [`TRUST_CONFIGMAP`]).
pub const VOLUME_TRUST: &str = "toolgate-trust";
/// Volume holding per-run workspaces (emptyDir, sidecar only).
pub const VOLUME_WORKSPACE: &str = "toolgate-workspace";
/// Where the bundle volume is mounted in the sidecar.
pub const BUNDLE_DIR: &str = "/etc/toolgate/bundle";
/// Where the trust volume is mounted in the sidecar.
pub const TRUST_DIR: &str = "/etc/toolgate/trust";
/// Where the sidecar keeps `<tenant>/<run_id>` workspaces: the injected
/// sidecar's workspace volume is mounted here, and `toolgate sidecar`
/// defaults `--workspace-base` to it.
pub const WORKSPACE_BASE: &str = "/var/lib/toolgate/workspaces";

/// Why one `NAME=URL` entry of the MCP upstreams (the pod annotation
/// `toolgate.dev/mcp-upstreams`, the sidecar's
/// [`MCP_UPSTREAMS`](crate::env::MCP_UPSTREAMS)) is unusable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum McpUpstreamFault<'a> {
    /// No `=` in the entry.
    NotNameUrl,
    /// The server name (given) is not 1-64 characters of `[A-Za-z0-9_-]`.
    BadName(&'a str),
    /// The URL (given) is not `http://` or `https://`.
    BadUrl(&'a str),
}

/// One `NAME=URL` entry of the MCP upstreams (the webhook checks it, the
/// sidecar serves it): a server name usable as a path segment and
/// tool prefix (`[A-Za-z0-9_-]{1,64}`) and an `http(s)` URL.
pub fn parse_mcp_upstream(entry: &str) -> Result<(&str, &str), McpUpstreamFault<'_>> {
    let (name, url) = entry.split_once('=').ok_or(McpUpstreamFault::NotNameUrl)?;
    let name_ok = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if !name_ok {
        return Err(McpUpstreamFault::BadName(name));
    }
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        return Err(McpUpstreamFault::BadUrl(url));
    }
    Ok((name, url))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_addresses_use_the_ports() {
        assert!(SIDECAR_LISTEN.ends_with(&format!(":{SIDECAR_PORT}")));
        assert!(OPS_LISTEN.ends_with(&format!(":{OPS_PORT}")));
        assert_eq!(SIDECAR_URL, format!("http://{SIDECAR_LISTEN}"));
        assert_eq!(bundle_configmap("p"), "toolgate-bundle-p");
        assert_eq!(VOLUME_TRUST, TRUST_CONFIGMAP);
    }

    #[test]
    fn an_mcp_upstream_is_a_name_and_an_http_url() {
        assert_eq!(
            parse_mcp_upstream("fs=http://127.0.0.1:3000/mcp"),
            Ok(("fs", "http://127.0.0.1:3000/mcp"))
        );
        assert_eq!(parse_mcp_upstream("fs"), Err(McpUpstreamFault::NotNameUrl));
        assert_eq!(
            parse_mcp_upstream("a.b=https://x"),
            Err(McpUpstreamFault::BadName("a.b"))
        );
        assert_eq!(
            parse_mcp_upstream(&format!("{}=https://x", "n".repeat(65))),
            Err(McpUpstreamFault::BadName(&"n".repeat(65)))
        );
        assert_eq!(
            parse_mcp_upstream("fs=ftp://x"),
            Err(McpUpstreamFault::BadUrl("ftp://x"))
        );
    }
}
