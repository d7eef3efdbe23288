//! Every Kubernetes name two toolgate components must agree on:
//! annotations, labels, the finalizer, and the object names derived from
//! database ids, defined once, here. The names the webhook and the sidecar
//! share (container, ports, ConfigMaps, volumes) are the contract's,
//! re-exported below.

/// Pod annotation (or label) `"false"`: opt the pod out of injection.
pub const ANNOTATION_INJECT: &str = "toolgate.dev/inject";
/// Pod annotation naming the PolicyProfile the pod's sidecar enforces; also
/// the label naming the profile on its bundle ConfigMap.
pub const ANNOTATION_PROFILE: &str = "toolgate.dev/profile";
/// Deprecated pod annotation that once chose the tenant. The tenant is the
/// pod's namespace; a pod whose annotation names anything else is refused.
pub const ANNOTATION_TENANT: &str = "toolgate.dev/tenant";
/// Pod annotation: MCP upstreams `NAME=URL,…` the sidecar serves as governed
/// MCP endpoints at `/mcp/NAME` (`TOOLGATE_MCP_UPSTREAMS`).
pub const ANNOTATION_MCP_UPSTREAMS: &str = "toolgate.dev/mcp-upstreams";
/// Pod annotation set on injected pods. Together with a sidecar container
/// equal to the one the webhook injects it makes a reinvocation a no-op;
/// alone it proves nothing.
pub const ANNOTATION_INJECTED: &str = "toolgate.dev/injected";
/// Pod annotation recording which profile was injected.
pub const ANNOTATION_PROFILE_INJECTED: &str = "toolgate.dev/profile-injected";
/// Pod annotation overriding the sidecar's CPU request.
pub const ANNOTATION_CPU_REQUEST: &str = "toolgate.dev/sidecar-cpu-request";
/// Pod annotation overriding the sidecar's CPU limit.
pub const ANNOTATION_CPU_LIMIT: &str = "toolgate.dev/sidecar-cpu-limit";
/// Pod annotation overriding the sidecar's memory request.
pub const ANNOTATION_MEMORY_REQUEST: &str = "toolgate.dev/sidecar-memory-request";
/// Pod annotation overriding the sidecar's memory limit.
pub const ANNOTATION_MEMORY_LIMIT: &str = "toolgate.dev/sidecar-memory-limit";

/// Bundle ConfigMap annotation: policy version of the bundle.
pub const ANN_VERSION: &str = "toolgate.dev/policy-version";
/// Bundle ConfigMap annotation: policy version of the candidate the bundle
/// shadows, when it carries one.
pub const ANN_CANDIDATE_VERSION: &str = "toolgate.dev/candidate-version";
/// Bundle ConfigMap annotation: `sha256:` digest of the bundle document.
pub const ANN_DIGEST: &str = "toolgate.dev/bundle-digest";
/// Bundle ConfigMap annotation: bundle sequence.
pub const ANN_SEQUENCE: &str = "toolgate.dev/sequence";
/// Bundle ConfigMap annotation: issue instant.
pub const ANN_ISSUED_AT: &str = "toolgate.dev/issued-at";
/// Bundle ConfigMap annotation: expiry instant.
pub const ANN_EXPIRES_AT: &str = "toolgate.dev/expires-at";
/// Bundle ConfigMap annotation: key id that signed the bundle.
pub const ANN_KEY_ID: &str = "toolgate.dev/key-id";
/// Database Secret annotation naming the PostgreSQL role it logs in as.
pub const ANN_TENANT_ROLE: &str = "toolgate.dev/tenant-role";

/// Label: profile name on the bundle ConfigMap.
pub const LABEL_PROFILE: &str = "toolgate.dev/profile";
/// Label on mirrored request Approvals.
pub const LABEL_APPROVAL_KIND: &str = "toolgate.dev/approval-kind";
/// Standard label: who manages an object the controller creates.
pub const LABEL_MANAGED_BY: &str = "app.kubernetes.io/managed-by";
/// Standard label: the application an object belongs to.
pub const LABEL_PART_OF: &str = "app.kubernetes.io/part-of";
/// Value of [`LABEL_PART_OF`].
pub const PART_OF: &str = "toolgate";

/// Finalizer the controller puts on every PolicyProfile.
pub const FINALIZER: &str = "toolgate.dev/cleanup";

/// The names the webhook and the sidecar share: the contract's, in one place.
pub use toolgate_contract::names::{
    BUNDLE_CONFIGMAP_PREFIX, BUNDLE_KEY, OPS_LISTEN, OPS_PORT, SIDECAR_LISTEN, SIDECAR_NAME,
    SIDECAR_PORT, SIDECAR_URL, TRUST_CONFIGMAP, TRUST_FIELD, WORKSPACE_BASE, bundle_configmap,
};
/// The check of one `NAME=URL` entry of [`ANNOTATION_MCP_UPSTREAMS`]: the
/// contract's, which the sidecar applies to `TOOLGATE_MCP_UPSTREAMS`.
pub use toolgate_contract::names::{McpUpstreamFault, parse_mcp_upstream};

/// `s` lowercased, every character outside `[a-z0-9-]` replaced by `-`:
/// the alphabet of a Kubernetes object name.
fn dns_chars(s: &str) -> String {
    s.to_ascii_lowercase()
        .chars()
        .map(|c| {
            if c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' {
                c
            } else {
                '-'
            }
        })
        .collect()
}

fn sha256_hex(s: &str) -> String {
    toolgate_policy::digest::sha256_hex(s.as_bytes())
}

/// Whether `s` is one RFC 1123 label, length aside: lowercase letters,
/// digits and inner dashes.
fn label_chars(s: &str) -> bool {
    let ok = |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    let b = s.as_bytes();
    !b.is_empty()
        && b.iter().all(|&c| ok(c) || c == b'-')
        && b.first().copied().is_some_and(ok)
        && b.last().copied().is_some_and(ok)
}

/// Whether `name` can name a namespace (an RFC 1123 label of at most 63
/// characters). A tenant is its namespace's name, so this is also whether
/// a tenant has a namespace.
pub fn is_namespace_name(name: &str) -> bool {
    name.len() <= 63 && label_chars(name)
}

/// Whether `name` can name an object such as an Approval (an RFC 1123
/// subdomain of at most 253 characters; no length limit per label).
pub fn is_object_name(name: &str) -> bool {
    !name.is_empty() && name.len() <= 253 && name.split('.').all(label_chars)
}

/// The prefix of every mirrored request's name: reserved for the
/// controller (the webhook refuses anyone else's Approval named so, which
/// could otherwise squat a pending approval's name).
pub const APPROVAL_NAME_PREFIX: &str = "apr-";

/// Object name for database approval `id`: `apr-` + the id lowercased,
/// every character outside `[a-z0-9-]` replaced by `-`; when that loses
/// information, a short hash of the original id keeps names distinct.
pub fn approval_name(id: &str) -> String {
    let mapped = dns_chars(id);
    let lossy = mapped != id;
    let mut clean = mapped.trim_matches('-').to_owned();
    clean.truncate(200);
    let clean = clean.trim_end_matches('-');
    if lossy {
        format!("{APPROVAL_NAME_PREFIX}{clean}-{}", &sha256_hex(id)[..8]).replace("--", "-")
    } else {
        format!("{APPROVAL_NAME_PREFIX}{clean}")
    }
}

/// Object name `kubectl toolgate cancel` uses for `run_id`: deterministic,
/// so cancelling twice finds the first request; always hashed, so ids that
/// differ only in punctuation stay distinct.
pub fn cancellation_name(run_id: &str) -> String {
    let clean: String = dns_chars(run_id).chars().take(40).collect();
    let hash = sha256_hex(run_id);
    let clean = clean.trim_matches('-');
    if clean.is_empty() {
        format!("cancel-{}", &hash[..10])
    } else {
        format!("cancel-{clean}-{}", &hash[..10])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cancellation_names_are_valid_deterministic_and_distinct() {
        let a = cancellation_name("Session_42/Å");
        assert_eq!(a, cancellation_name("Session_42/Å"));
        assert!(a.starts_with("cancel-session-42-"), "{a}");
        assert_ne!(cancellation_name("run-1"), cancellation_name("run_1"));
        assert!(cancellation_name("////").starts_with("cancel-"));
        for name in [a, cancellation_name(&"x".repeat(300))] {
            assert!(name.len() <= 63, "{name}");
            assert!(
                name.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            );
            assert!(!name.ends_with('-'));
        }
    }
}
