//! What a pod may not do to the sidecar it is given. Pure checks on pod
//! JSON, no I/O: [`check_isolation`] at CREATE (called by
//! [`inject::plan`](crate::inject::plan)) and [`pod_update`] at UPDATE of a
//! pod or of its `pods/ephemeralcontainers` subresource.
//!
//! The attacker these checks have in mind may create and update pods in
//! their own namespace and nothing more. The sidecar is only worth
//! something if what it is told (its tenant, its bundle, its trust set) and
//! what it keeps (its workspace, its database credential) stay its own:
//!
//! - the agent API listens on the pod's loopback, so a pod on the node's
//!   network (`hostNetwork`) would expose it on the node's loopback;
//! - a shared process namespace (`shareProcessNamespace`, `hostPID`, or an
//!   ephemeral container targeting the sidecar) lets other containers read
//!   the sidecar's environment and files through `/proc/<pid>/…`;
//! - another container mounting the sidecar's volumes could rewrite the
//!   workspace behind the handle's checks or read the bundle it enforces;
//! - after creation, the only pod fields Kubernetes lets an update change
//!   that matter here are container images and ephemeral containers, which
//!   is exactly how one would swap the sidecar for an allow-all fake or
//!   reach into it. Everything else is compared too, in case an API server
//!   ever allows more.

use serde_json::{Map, Value};

use crate::WebhookError;
use toolgate_contract::names::{SIDECAR_NAME, VOLUME_BUNDLE, VOLUME_TRUST, VOLUME_WORKSPACE};

/// Volumes that belong to the sidecar alone.
pub const RESERVED_VOLUMES: [&str; 3] = [VOLUME_BUNDLE, VOLUME_TRUST, VOLUME_WORKSPACE];

/// The container lists of a pod spec, in the order they are checked.
pub const CONTAINER_GROUPS: [&str; 3] = ["initContainers", "containers", "ephemeralContainers"];

/// Pod-level settings that share the sidecar's network or process
/// namespace with something outside it, with why each is refused.
const HOST_SHARING: [(&str, &str); 3] = [
    (
        "hostNetwork",
        "a pod with the toolgate sidecar cannot use the node's network: the sidecar's agent API \
         listens on 127.0.0.1:15031, which would be the node's loopback, reachable from every \
         host-network pod on the node",
    ),
    (
        "hostPID",
        "a pod with the toolgate sidecar cannot share the node's process namespace: its \
         containers could read the sidecar's environment (its database credential) and files \
         through /proc",
    ),
    (
        "shareProcessNamespace",
        "a pod with the toolgate sidecar cannot share one process namespace between its \
         containers: they could read the sidecar's environment (its database credential) and \
         its workspace through /proc/<pid>/root",
    ),
];

/// One container named [`SIDECAR_NAME`] in `spec.<group>[index]`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Located<'a> {
    /// `containers` or `initContainers`.
    pub group: &'static str,
    /// Index in that list.
    pub index: usize,
    /// The container.
    pub container: &'a Value,
}

/// Every container named [`SIDECAR_NAME`] among `containers` and
/// `initContainers` (an ephemeral one is refused by [`check_container`]).
pub fn find_sidecars(spec: &Map<String, Value>) -> Vec<Located<'_>> {
    let mut found = Vec::new();
    for group in ["initContainers", "containers"] {
        for (index, container) in list(spec, group).iter().enumerate() {
            if name_of(container) == Some(SIDECAR_NAME) {
                found.push(Located {
                    group,
                    index,
                    container,
                });
            }
        }
    }
    found
}

/// Refuses a pod spec whose shape defeats the sidecar's isolation: host
/// network or process namespaces, a shared process namespace, and any
/// container other than the sidecar that mounts the sidecar's volumes (or,
/// for ephemeral containers, takes its name or targets it).
pub fn check_isolation(spec: &Map<String, Value>) -> Result<(), WebhookError> {
    for (key, why) in HOST_SHARING {
        if spec.get(key) == Some(&Value::Bool(true)) {
            return Err(refused(format!("spec.{key}"), why));
        }
    }
    for group in CONTAINER_GROUPS {
        for (index, container) in list(spec, group).iter().enumerate() {
            if group != "ephemeralContainers" && name_of(container) == Some(SIDECAR_NAME) {
                continue;
            }
            check_container(group, index, container).map_err(as_injection)?;
        }
    }
    Ok(())
}

/// Checks one container that is not the sidecar: it must not mount the
/// sidecar's volumes (by name, in `volumeMounts` or `volumeDevices`), and an
/// ephemeral container may neither take the sidecar's name nor target it.
/// Errors are [`WebhookError::SidecarImmutable`]; [`check_isolation`] turns
/// them into [`WebhookError::Injection`].
pub fn check_container(group: &str, index: usize, container: &Value) -> Result<(), WebhookError> {
    let at = format!("spec.{group}[{index}]");
    let name = name_of(container).unwrap_or_default();
    if group == "ephemeralContainers" {
        if name == SIDECAR_NAME {
            return Err(immutable(
                format!("{at}.name"),
                format!(
                    "`{SIDECAR_NAME}` is the name of the injected toolgate sidecar; an ephemeral \
                     container cannot take it"
                ),
            ));
        }
        if container.get("targetContainerName").and_then(Value::as_str) == Some(SIDECAR_NAME) {
            return Err(immutable(
                format!("{at}.targetContainerName"),
                format!(
                    "ephemeral container `{name}` cannot target `{SIDECAR_NAME}`: it would share \
                     the sidecar's process namespace and could read its environment and files"
                ),
            ));
        }
    }
    for key in ["volumeMounts", "volumeDevices"] {
        for (j, mount) in container
            .get(key)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            let volume = name_of(mount).unwrap_or_default();
            if RESERVED_VOLUMES.contains(&volume) {
                return Err(immutable(
                    format!("{at}.{key}[{j}].name"),
                    format!(
                        "container `{name}` cannot mount `{volume}`: the toolgate sidecar's \
                         volumes ({}) are the sidecar's alone",
                        RESERVED_VOLUMES.join(", ")
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// Checks an UPDATE of a pod (or of its `pods/ephemeralcontainers`
/// subresource). A pod whose stored version has no container named
/// [`SIDECAR_NAME`] was never injected and passes. Otherwise the update is
/// refused if it removes, moves, duplicates or changes that container in any
/// field (image, args, env, mounts, security context…), adds, changes or
/// removes one of the sidecar's volumes, turns on a host or shared process
/// namespace, or adds or changes a container (ephemeral ones included) that
/// mounts the sidecar's volumes, is named like it or targets it.
///
/// The stored container's name, not the `toolgate.dev/injected` annotation,
/// marks an injected pod: annotations can be edited, container names cannot.
pub fn pod_update(old: &Value, new: &Value) -> Result<(), WebhookError> {
    let old_spec = spec_of(old, "request.oldObject")?;
    let new_spec = spec_of(new, "request.object")?;
    let before = find_sidecars(old_spec);
    if before.is_empty() {
        return Ok(());
    }
    let after = find_sidecars(new_spec);
    match (before.as_slice(), after.as_slice()) {
        (_, []) => {
            return Err(immutable(
                format!("spec.{}", before[0].group),
                format!(
                    "the toolgate sidecar `{SIDECAR_NAME}` cannot be removed from a pod it was \
                     injected into"
                ),
            ));
        }
        ([was], [now]) if was.group == now.group => {
            if was.container != now.container {
                return Err(sidecar_changed(now, was.container));
            }
        }
        _ => {
            let at = after
                .iter()
                .find(|now| !before.iter().any(|was| was.group == now.group))
                .or(after.get(before.len()))
                .unwrap_or(&after[0]);
            return Err(immutable(
                format!("spec.{}[{}]", at.group, at.index),
                format!(
                    "containers named `{SIDECAR_NAME}` cannot be added or moved after injection: \
                     the pod has exactly the sidecar the webhook injected"
                ),
            ));
        }
    }
    for volume in RESERVED_VOLUMES {
        let was = named(list(old_spec, "volumes"), volume);
        let now = named(list(new_spec, "volumes"), volume);
        if !was.iter().map(|(_, v)| v).eq(now.iter().map(|(_, v)| v)) {
            let field = now.first().map_or_else(
                || "spec.volumes".to_owned(),
                |(i, _)| format!("spec.volumes[{i}]"),
            );
            return Err(immutable(
                field,
                format!(
                    "volume `{volume}` belongs to the toolgate sidecar and cannot be added, \
                     changed or removed after injection"
                ),
            ));
        }
    }
    for (key, why) in HOST_SHARING {
        let on = |spec: &Map<String, Value>| spec.get(key) == Some(&Value::Bool(true));
        if on(new_spec) && !on(old_spec) {
            return Err(immutable(format!("spec.{key}"), why));
        }
    }
    for group in CONTAINER_GROUPS {
        let old_list = list(old_spec, group);
        for (index, container) in list(new_spec, group).iter().enumerate() {
            if group != "ephemeralContainers" && name_of(container) == Some(SIDECAR_NAME) {
                continue;
            }
            // Unchanged containers were checked when they were admitted (or
            // predate toolgate); re-checking them would strand the pod.
            if old_list.contains(container) {
                continue;
            }
            check_container(group, index, container)?;
        }
    }
    Ok(())
}

/// The denial for a changed sidecar, naming what changed.
fn sidecar_changed(now: &Located<'_>, was: &Value) -> WebhookError {
    let empty = Map::new();
    let old = was.as_object().unwrap_or(&empty);
    let new = now.container.as_object().unwrap_or(&empty);
    let mut keys: Vec<&str> = old
        .keys()
        .chain(new.keys())
        .map(String::as_str)
        .filter(|k| old.get(*k) != new.get(*k))
        .collect();
    keys.sort_unstable();
    keys.dedup();
    let at = format!("spec.{}[{}]", now.group, now.index);
    let show = |v: Option<&Value>| match v {
        None => "nothing".to_owned(),
        Some(Value::String(s)) => format!("`{s}`"),
        Some(other) => format!("`{other}`"),
    };
    let (field, detail) = match keys.as_slice() {
        [key] => (
            format!("{at}.{key}"),
            format!("{key} {} → {}", show(old.get(*key)), show(new.get(*key))),
        ),
        _ => (at, format!("changed: {}", keys.join(", "))),
    };
    immutable(
        field,
        format!("the toolgate sidecar cannot be changed after injection ({detail})"),
    )
}

/// `spec` of a pod, or an error naming where it was expected.
pub(crate) fn spec_of<'a>(
    pod: &'a Value,
    what: &str,
) -> Result<&'a Map<String, Value>, WebhookError> {
    pod.get("spec")
        .and_then(Value::as_object)
        .ok_or_else(|| WebhookError::InvalidObject {
            field: format!("{what}.spec"),
            message: "a pod must have a spec object".into(),
        })
}

/// The array at `spec[key]`, empty when absent or not an array.
pub(crate) fn list<'a>(spec: &'a Map<String, Value>, key: &str) -> &'a [Value] {
    spec.get(key)
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// Entries of `items` named `name`, with their indices.
pub(crate) fn named<'a>(items: &'a [Value], name: &str) -> Vec<(usize, &'a Value)> {
    items
        .iter()
        .enumerate()
        .filter(|(_, item)| name_of(item) == Some(name))
        .collect()
}

pub(crate) fn name_of(item: &Value) -> Option<&str> {
    item.get("name").and_then(Value::as_str)
}

fn refused(field: String, message: &str) -> WebhookError {
    WebhookError::Injection {
        field,
        message: message.to_owned(),
    }
}

fn immutable(field: String, message: impl Into<String>) -> WebhookError {
    WebhookError::SidecarImmutable {
        field,
        message: message.into(),
    }
}

fn as_injection(error: WebhookError) -> WebhookError {
    match error {
        WebhookError::SidecarImmutable { field, message } => {
            WebhookError::Injection { field, message }
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn sidecar(image: &str) -> Value {
        json!({
            "name": SIDECAR_NAME,
            "image": image,
            "restartPolicy": "Always",
            "env": [{"name": "TOOLGATE_TENANT", "value": "agents"}],
            "volumeMounts": [{"name": VOLUME_WORKSPACE, "mountPath": "/var/lib/toolgate/workspaces"}]
        })
    }

    fn injected() -> Value {
        json!({
            "metadata": {"name": "agent-0", "namespace": "agents"},
            "spec": {
                "initContainers": [sidecar("toolgate:1")],
                "containers": [{"name": "agent", "image": "agent:1"}],
                "volumes": [
                    {"name": VOLUME_BUNDLE, "configMap": {"name": "toolgate-bundle-p"}},
                    {"name": VOLUME_TRUST, "configMap": {"name": "toolgate-trust"}},
                    {"name": VOLUME_WORKSPACE, "emptyDir": {}}
                ]
            }
        })
    }

    fn spec(pod: Value) -> Map<String, Value> {
        pod["spec"].as_object().unwrap().clone()
    }

    fn update_err(new: &Value) -> WebhookError {
        let err = pod_update(&injected(), new).unwrap_err();
        assert_eq!(err.code(), "sidecar_immutable", "{err}");
        assert_eq!(err.http_status(), 403);
        err
    }

    #[test]
    fn host_namespaces_are_refused_by_field() {
        for key in ["hostNetwork", "hostPID", "shareProcessNamespace"] {
            let mut pod = injected();
            pod["spec"][key] = json!(true);
            let err = check_isolation(&spec(pod.clone())).unwrap_err();
            assert_eq!(err.code(), "injection_refused");
            assert_eq!(err.field(), Some(format!("spec.{key}").as_str()));
            pod["spec"][key] = json!(false);
            check_isolation(&spec(pod)).unwrap();
        }
    }

    #[test]
    fn other_containers_cannot_mount_reach_or_impersonate_the_sidecar() {
        check_isolation(&spec(injected())).unwrap();
        let cases = [
            (
                "containers",
                json!({"name": "agent", "volumeMounts": [{"name": "cfg", "mountPath": "/c"}, {"name": VOLUME_WORKSPACE, "mountPath": "/w"}]}),
                "spec.containers[1].volumeMounts[1].name",
            ),
            (
                "initContainers",
                json!({"name": "init", "volumeMounts": [{"name": VOLUME_BUNDLE, "mountPath": "/b"}]}),
                "spec.initContainers[1].volumeMounts[0].name",
            ),
            (
                "containers",
                json!({"name": "raw", "volumeDevices": [{"name": VOLUME_TRUST, "devicePath": "/dev/x"}]}),
                "spec.containers[1].volumeDevices[0].name",
            ),
            (
                "ephemeralContainers",
                json!({"name": "debugger", "targetContainerName": SIDECAR_NAME}),
                "spec.ephemeralContainers[0].targetContainerName",
            ),
            (
                "ephemeralContainers",
                json!({"name": SIDECAR_NAME}),
                "spec.ephemeralContainers[0].name",
            ),
        ];
        for (group, container, field) in cases {
            let mut pod = injected();
            let list = pod["spec"]
                .as_object_mut()
                .unwrap()
                .entry(group)
                .or_insert(json!([]));
            list.as_array_mut().unwrap().push(container);
            let err = check_isolation(&spec(pod)).unwrap_err();
            assert_eq!(
                (err.code(), err.field()),
                ("injection_refused", Some(field))
            );
        }
    }

    #[test]
    fn sidecar_changes_are_refused_and_named() {
        let mut new = injected();
        new["spec"]["initContainers"][0]["image"] = json!("evil/allow-all:1");
        let err = update_err(&new);
        assert_eq!(err.field(), Some("spec.initContainers[0].image"));
        assert!(
            err.to_string()
                .contains("`toolgate:1` → `evil/allow-all:1`"),
            "{err}"
        );

        let mut new = injected();
        new["spec"]["initContainers"][0]["env"][0]["value"] = json!("victim");
        new["spec"]["initContainers"][0]["command"] = json!(["/bin/true"]);
        let err = update_err(&new);
        assert_eq!(err.field(), Some("spec.initContainers[0]"));
        assert!(err.to_string().contains("changed: command, env"), "{err}");

        let mut new = injected();
        new["spec"]["initContainers"] = json!([]);
        assert_eq!(update_err(&new).field(), Some("spec.initContainers"));

        let mut moved = injected();
        let sidecar = moved["spec"]["initContainers"][0].take();
        moved["spec"]["initContainers"] = json!([]);
        moved["spec"]["containers"]
            .as_array_mut()
            .unwrap()
            .push(sidecar);
        assert_eq!(update_err(&moved).field(), Some("spec.containers[1]"));

        let mut twice = injected();
        let copy = twice["spec"]["initContainers"][0].clone();
        twice["spec"]["containers"]
            .as_array_mut()
            .unwrap()
            .push(copy);
        assert_eq!(update_err(&twice).field(), Some("spec.containers[1]"));
    }

    #[test]
    fn sidecar_volumes_are_fixed() {
        let mut new = injected();
        new["spec"]["volumes"][2] = json!({"name": VOLUME_WORKSPACE, "hostPath": {"path": "/"}});
        assert_eq!(update_err(&new).field(), Some("spec.volumes[2]"));
        let mut new = injected();
        new["spec"]["volumes"].as_array_mut().unwrap().remove(0);
        assert_eq!(update_err(&new).field(), Some("spec.volumes"));
    }

    #[test]
    fn app_and_harmless_ephemeral_changes_pass() {
        let mut new = injected();
        new["spec"]["containers"][0]["image"] = json!("agent:2");
        new["metadata"]["labels"] = json!({"x": "y"});
        pod_update(&injected(), &new).unwrap();
        new["spec"]["ephemeralContainers"] =
            json!([{"name": "debugger", "image": "busybox", "targetContainerName": "agent"}]);
        pod_update(&injected(), &new).unwrap();
        let mut mounting = new.clone();
        mounting["spec"]["ephemeralContainers"]
            .as_array_mut()
            .unwrap()
            .push(json!({"name": "peek", "volumeMounts": [{"name": VOLUME_WORKSPACE, "mountPath": "/w"}]}));
        let err = pod_update(&new, &mounting).unwrap_err();
        assert_eq!(
            err.field(),
            Some("spec.ephemeralContainers[1].volumeMounts[0].name")
        );
        let mut host = injected();
        host["spec"]["hostPID"] = json!(true);
        assert_eq!(update_err(&host).field(), Some("spec.hostPID"));
    }

    #[test]
    fn pods_without_the_sidecar_are_not_judged() {
        let mut old = injected();
        old["spec"]["initContainers"] = json!([]);
        let mut new = old.clone();
        new["spec"]["hostNetwork"] = json!(true);
        new["spec"]["volumes"] = json!([]);
        pod_update(&old, &new).unwrap();
        let err = pod_update(&json!({}), &new).unwrap_err();
        assert_eq!(
            (err.code(), err.field()),
            ("invalid_object", Some("request.oldObject.spec"))
        );
    }
}
