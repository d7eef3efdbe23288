//! RBAC coverage of the mock API: every request a reconciler makes in a
//! `tower-test` scenario must be allowed by a rule of `rbac.yaml` (the file
//! the Helm chart's RBAC is checked against), so a new API call cannot ship
//! without the permission it needs.
//!
//! [`ApiServer::expect`](super::ApiServer::expect) maps each request to an
//! [`Access`] (API group, resource[/subresource], verb), records it and fails
//! the scenario when no rule covers it.

use std::sync::OnceLock;

use http::Method;
use serde::Deserialize;

/// `crates/toolgate-controller/rbac.yaml`, read at compile time.
pub const RBAC_YAML: &str = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/rbac.yaml"));

/// One rule of `rbac.yaml`. Exactly these three keys (the chart test
/// requires the same), so `resourceNames` or `nonResourceURLs` fail to parse.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Rule {
    pub api_groups: Vec<String>,
    pub resources: Vec<String>,
    pub verbs: Vec<String>,
}

/// Parses rules in the `rbac.yaml` format.
pub fn parse_rules(text: &str) -> Vec<Rule> {
    serde_yaml::from_str(text).expect("rbac.yaml is a list of {apiGroups, resources, verbs}")
}

/// The rules of `rbac.yaml`.
pub fn rules() -> &'static [Rule] {
    static RULES: OnceLock<Vec<Rule>> = OnceLock::new();
    RULES.get_or_init(|| parse_rules(RBAC_YAML))
}

/// What one API request needs, in RBAC terms.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Access {
    /// `""` for the core group.
    pub api_group: String,
    /// `configmaps`, `policyprofiles/status`, …
    pub resource: String,
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, `deletecollection`.
    pub verb: String,
}

impl std::fmt::Display for Access {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let group = if self.api_group.is_empty() {
            "core"
        } else {
            &self.api_group
        };
        write!(f, "{} {}/{}", self.verb, group, self.resource)
    }
}

fn is_watch(query: &str) -> bool {
    query
        .split('&')
        .any(|kv| matches!(kv, "watch=true" | "watch=1"))
}

/// Maps a request to the access it needs: `/api/v1/…` is the core group,
/// `/apis/{group}/{version}/…` a named one; `namespaces/{ns}/` is skipped;
/// the segments after the resource are the object name and a subresource.
/// GET on a collection is `list` (`watch` with `watch=true`), GET on an item
/// `get`, POST `create`, PUT `update`, PATCH `patch`, DELETE `delete` (on a
/// collection `deletecollection`).
pub fn access(method: &Method, path: &str, query: &str) -> Result<Access, String> {
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (api_group, rest) = match segments.as_slice() {
        ["api", _version, rest @ ..] => ("", rest),
        ["apis", group, _version, rest @ ..] => (*group, rest),
        _ => return Err(format!("not a Kubernetes resource path: {path}")),
    };
    let rest = match rest {
        // `namespaces/{ns}/{resource}…`; `namespaces` or `namespaces/{ns}`
        // alone is the Namespace resource itself.
        ["namespaces", _ns, tail @ ..] if !tail.is_empty() => tail,
        other => other,
    };
    let (resource, name, subresource) = match rest {
        [resource] => (*resource, None, None),
        [resource, name] => (*resource, Some(*name), None),
        [resource, name, sub] => (*resource, Some(*name), Some(*sub)),
        _ => return Err(format!("cannot map {path} to a resource")),
    };
    if resource.is_empty() || resource == "watch" {
        return Err(format!("unsupported path {path}"));
    }
    let item = name.is_some();
    let verb = match *method {
        Method::GET if is_watch(query) => "watch",
        Method::GET if item => "get",
        Method::GET => "list",
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE if item => "delete",
        Method::DELETE => "deletecollection",
        ref other => return Err(format!("unsupported method {other}")),
    };
    Ok(Access {
        api_group: api_group.to_owned(),
        resource: match subresource {
            Some(sub) => format!("{resource}/{sub}"),
            None => resource.to_owned(),
        },
        verb: verb.to_owned(),
    })
}

fn matches(list: &[String], value: &str) -> bool {
    list.iter().any(|v| v == value || v == "*")
}

/// Whether some rule allows `access` (`*` is honoured as Kubernetes does,
/// though `rbac.yaml` must not use it).
pub fn covered(rules: &[Rule], access: &Access) -> bool {
    rules.iter().any(|r| {
        matches(&r.api_groups, &access.api_group)
            && matches(&r.resources, &access.resource)
            && matches(&r.verbs, &access.verb)
    })
}

/// The accesses no rule covers, sorted and deduplicated.
pub fn uncovered<'a>(
    rules: &[Rule],
    accesses: impl IntoIterator<Item = &'a Access>,
) -> Vec<Access> {
    let mut out: Vec<Access> = accesses
        .into_iter()
        .filter(|a| !covered(rules, a))
        .cloned()
        .collect();
    out.sort();
    out.dedup();
    out
}

/// The request's access; panics when `rbac.yaml` does not cover it.
pub fn check_request(method: &Method, path: &str, query: &str) -> Access {
    let a = access(method, path, query).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        covered(rules(), &a),
        "request {method} {path}?{query} needs RBAC `{a}`, which crates/toolgate-controller/rbac.yaml does not grant"
    );
    a
}

/// The access `verb` on `resource` of API group `group` (`""`: core).
pub fn triple(group: &str, resource: &str, verb: &str) -> Access {
    Access {
        api_group: group.into(),
        resource: resource.into(),
        verb: verb.into(),
    }
}

/// Asserts that `rbac.yaml` grants every one of `accesses` (the harness
/// checks each request as it comes; this says so of a scenario as a whole).
pub fn assert_granted(accesses: &[Access]) {
    assert!(!accesses.is_empty(), "the scenario made no request");
    assert_eq!(uncovered(rules(), accesses), Vec::<Access>::new());
}

/// Runs `fut` while answering every request with `respond(method, path, body)`.
pub async fn serve<T>(
    server: &mut super::ApiServer,
    fut: impl std::future::Future<Output = T>,
    mut respond: impl FnMut(&Method, &str, &serde_json::Value) -> (u16, serde_json::Value),
) -> T {
    let mut fut = std::pin::pin!(tokio::time::timeout(
        std::time::Duration::from_secs(10),
        fut
    ));
    loop {
        tokio::select! {
            out = &mut fut => return out.expect("scenario step timed out"),
            r = server.next("any request") => {
                let (code, body) = respond(&r.method, &r.path, &r.body);
                r.respond(code, body);
            }
        }
    }
}

/// A `404 NotFound` Status.
pub fn not_found() -> (u16, serde_json::Value) {
    (
        404,
        serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404, "message": "not found"}),
    )
}
