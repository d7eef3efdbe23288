//! Reading and judging the pod as the API server sent it: its tenant, its
//! profile name, and a `toolgate-sidecar` container that is already there.

use super::*;

/// The tenant of a pod: its namespace as the request names it (the pod's
/// `metadata.namespace` only when the request has none). A pod that names
/// another namespace than the request, or a `toolgate.dev/tenant`
/// annotation other than the namespace, is refused: the tenant is where
/// the pod runs, never what its author writes.
pub fn resolve_tenant<'a>(
    pod_namespace: Option<&'a str>,
    request_namespace: Option<&'a str>,
    tenant_annotation: Option<&str>,
) -> Result<&'a str, WebhookError> {
    let pod_namespace = pod_namespace.filter(|ns| !ns.is_empty());
    let namespace = match (request_namespace.filter(|ns| !ns.is_empty()), pod_namespace) {
        (Some(request), Some(pod)) if request != pod => {
            return Err(WebhookError::Injection {
                field: "metadata.namespace".into(),
                message: format!(
                    "the pod names namespace `{pod}` but the request is for namespace `{request}`"
                ),
            });
        }
        (Some(ns), _) | (None, Some(ns)) => ns,
        (None, None) => {
            return Err(WebhookError::Injection {
                field: "metadata.namespace".into(),
                message: "neither the pod nor the request names a namespace".into(),
            });
        }
    };
    if let Some(value) = tenant_annotation
        && value.trim() != namespace
    {
        return Err(WebhookError::Injection {
            field: format!("metadata.annotations[{ANNOTATION_TENANT}]"),
            message: format!(
                "annotation `{ANNOTATION_TENANT}` says `{value}` but the tenant is the pod's \
                 namespace `{namespace}`; the annotation no longer chooses the tenant: remove it"
            ),
        });
    }
    Ok(namespace)
}

/// Validates the profile name; returns the bundle ConfigMap's name.
pub(super) fn check_profile_name(profile: &str) -> Result<String, WebhookError> {
    let profile_field = format!("metadata.annotations[{ANNOTATION_PROFILE}]");
    toolgate_policy::load::validate_object_name(&profile_field, profile).map_err(|e| {
        WebhookError::Injection {
            field: profile_field.clone(),
            message: e
                .to_string()
                .trim_start_matches(&format!("{profile_field}: "))
                .to_owned(),
        }
    })?;
    let bundle_configmap = toolgate_k8s::names::bundle_configmap(profile);
    if bundle_configmap.len() > 253 {
        return Err(WebhookError::Injection {
            field: profile_field,
            message: format!(
                "profile name `{profile}` is too long for ConfigMap `{bundle_configmap}`"
            ),
        });
    }
    Ok(bundle_configmap)
}

/// Accepts a pod that already has a `toolgate-sidecar` container only if it
/// is this webhook's own injection, seen again on reinvocation.
///
/// On CREATE the webhook's output never comes back to it as input, except
/// that `reinvocationPolicy: IfNeeded` sends the patched pod back in the
/// same request when a later admission step changed it. Nothing in the pod
/// can prove who added the container: the annotations and the container are
/// both writable by the pod's author. So the only pod accepted is one that
/// is, in every field that matters, exactly what this webhook would inject
/// now: the container (image, command, args, env with the tenant, mounts,
/// probes, resources, security context, placement per the sidecar mode),
/// the three volumes (the bundle of the profile resolved now), and the
/// `toolgate.dev/injected` / `toolgate.dev/profile-injected` annotations. A
/// pod author who writes all of that by hand gets exactly the sidecar the
/// webhook would have given them, which is no bypass. Anything else named
/// `toolgate-sidecar` is refused.
///
/// Between two invocations the API server applies its defaults to the
/// patched pod and re-runs the built-in admission plugins, so the container
/// comes back with a few additions that mean nothing for the sidecar; they
/// are removed before comparing ([`normalize_container`]). Another webhook
/// that rewrites the sidecar (an image mirror, a resource policy) makes the
/// pod fail this check: refusing is the safe answer when the webhook cannot
/// tell that rewrite from an attacker's.
pub(super) fn recognise_own_injection<'a>(
    sidecars: &[guard::Located<'_>],
    spec: &Map<String, Value>,
    annotation: impl Fn(&str) -> Option<&'a str>,
    profile: &str,
    tenant: &str,
    config: &InjectConfig,
) -> Result<(), WebhookError> {
    if let [_, second, ..] = sidecars {
        return Err(foreign(
            &format!("spec.{}[{}]", second.group, second.index),
            "the pod has more than one",
        ));
    }
    let found = &sidecars[0];
    let at = format!("spec.{}[{}]", found.group, found.index);
    let group = match config.mode {
        SidecarMode::Native => "initContainers",
        SidecarMode::Container => "containers",
    };
    if found.group != group {
        return Err(foreign(
            &at,
            &format!("the webhook injects it into spec.{group}"),
        ));
    }
    let mcp = mcp_upstreams(annotation(ANNOTATION_MCP_UPSTREAMS))?;
    let resources = config.resources.with_annotations(&annotation)?;
    let expected = normalize_container(&to_value(&sidecar_container(
        config, tenant, mcp, &resources,
    ))?);
    let actual = normalize_container(found.container);
    if actual != expected {
        let empty = Map::new();
        let (a, e) = (
            actual.as_object().unwrap_or(&empty),
            expected.as_object().unwrap_or(&empty),
        );
        let mut keys: Vec<&str> = a
            .keys()
            .chain(e.keys())
            .map(String::as_str)
            .filter(|k| a.get(*k) != e.get(*k))
            .collect();
        keys.sort_unstable();
        keys.dedup();
        return Err(foreign(
            &at,
            &format!(
                "it is not the container this webhook injects (differs in: {})",
                keys.join(", ")
            ),
        ));
    }
    let bundle_configmap = toolgate_k8s::names::bundle_configmap(profile);
    let volumes = guard::list(spec, "volumes");
    for want in sidecar_volumes(&bundle_configmap) {
        let name = want.name.clone();
        let want = normalize_volume(&to_value(&want)?);
        let found = guard::named(volumes, &name);
        let ok = matches!(found.as_slice(), [(_, v)] if normalize_volume(v) == want);
        if !ok {
            let field = found.first().map_or_else(
                || "spec.volumes".to_owned(),
                |(i, _)| format!("spec.volumes[{i}]"),
            );
            return Err(foreign(
                &field,
                &format!(
                    "volume `{name}` is not the one this webhook injects for profile `{profile}`"
                ),
            ));
        }
    }
    if annotation(ANNOTATION_INJECTED) != Some("true")
        || annotation(ANNOTATION_PROFILE_INJECTED) != Some(profile)
    {
        return Err(foreign(
            &at,
            &format!(
                "the pod lacks the annotations the webhook sets when it injects \
                 (`{ANNOTATION_INJECTED}: \"true\"`, `{ANNOTATION_PROFILE_INJECTED}: {profile}`)"
            ),
        ));
    }
    Ok(())
}

/// Path where the ServiceAccount admission plugin mounts the API token into
/// every container, including one a webhook added, when it is re-run.
pub(super) const SERVICE_ACCOUNT_MOUNT: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// A sidecar container with what the API server adds between two webhook
/// invocations taken out, so it can be compared with what the webhook
/// injects. Each removal is a value that means the same as its absence, or
/// an addition that cannot change what the sidecar enforces:
/// - serialization: `readOnly: false` of a volume mount, which the API
///   server's Go types omit (a plain `bool` with `omitempty`);
/// - defaults: `terminationMessagePath: /dev/termination-log`, a probe's
///   `successThreshold: 1`, a field reference's `apiVersion: v1`, a
///   `resizePolicy` of `NotRequired` for cpu or memory;
/// - built-in plugins: the ServiceAccount plugin's read-only token mount at
///   its fixed path (the sidecar never reads it), LimitRanger's defaults
///   for resources other than cpu and memory (the webhook sets both),
///   AlwaysPullImages' `imagePullPolicy: Always` (stricter than ours).
pub fn normalize_container(container: &Value) -> Value {
    let mut container = container.clone();
    let Some(c) = container.as_object_mut() else {
        return container;
    };
    let is = |v: Option<&Value>, want: Value| v == Some(&want);
    if is(
        c.get("terminationMessagePath"),
        Value::from("/dev/termination-log"),
    ) {
        c.remove("terminationMessagePath");
    }
    if is(c.get("imagePullPolicy"), Value::from("Always")) {
        c.insert("imagePullPolicy".into(), Value::from("IfNotPresent"));
    }
    for probe in ["startupProbe", "readinessProbe", "livenessProbe"] {
        if let Some(p) = c.get_mut(probe).and_then(Value::as_object_mut)
            && is(p.get("successThreshold"), Value::from(1))
        {
            p.remove("successThreshold");
        }
    }
    for var in c
        .get_mut("env")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
    {
        if let Some(field_ref) = var
            .pointer_mut("/valueFrom/fieldRef")
            .and_then(Value::as_object_mut)
            && is(field_ref.get("apiVersion"), Value::from("v1"))
        {
            field_ref.remove("apiVersion");
        }
    }
    if let Some(mounts) = c.get_mut("volumeMounts").and_then(Value::as_array_mut) {
        for mount in mounts.iter_mut().filter_map(Value::as_object_mut) {
            if is(mount.get("readOnly"), Value::Bool(false)) {
                mount.remove("readOnly");
            }
        }
        mounts.retain(|m| {
            let token_mount = m.as_object().is_some_and(|m| {
                m.keys()
                    .all(|k| ["name", "readOnly", "mountPath"].contains(&k.as_str()))
                    && m.get("readOnly") == Some(&Value::Bool(true))
                    && m.get("mountPath").and_then(Value::as_str) == Some(SERVICE_ACCOUNT_MOUNT)
                    && m.get("name").and_then(Value::as_str).is_some_and(|name| {
                        !name.is_empty() && !guard::RESERVED_VOLUMES.contains(&name)
                    })
            });
            !token_mount
        });
    }
    if let Some(policies) = c.get_mut("resizePolicy").and_then(Value::as_array_mut) {
        policies.retain(|p| {
            !(["cpu", "memory"].contains(&p["resourceName"].as_str().unwrap_or_default())
                && p["restartPolicy"] == "NotRequired"
                && p.as_object().is_some_and(|p| p.len() == 2))
        });
        if policies.is_empty() {
            c.remove("resizePolicy");
        }
    }
    if let Some(resources) = c.get_mut("resources").and_then(Value::as_object_mut) {
        for kind in ["requests", "limits"] {
            if let Some(list) = resources.get_mut(kind).and_then(Value::as_object_mut) {
                list.retain(|name, _| name == "cpu" || name == "memory");
            }
        }
    }
    container
}

/// A volume with the API server's `configMap.defaultMode: 420` default removed.
pub(super) fn normalize_volume(volume: &Value) -> Value {
    let mut volume = volume.clone();
    if let Some(config_map) = volume.get_mut("configMap").and_then(Value::as_object_mut)
        && config_map.get("defaultMode") == Some(&Value::from(420))
    {
        config_map.remove("defaultMode");
    }
    volume
}

pub(super) fn foreign(field: &str, why: &str) -> WebhookError {
    WebhookError::Injection {
        field: field.to_owned(),
        message: format!(
            "a container named `{SIDECAR_NAME}` is reserved for the sidecar this webhook injects, \
             and this one is not it: {why}; rename the container and let the webhook add the sidecar"
        ),
    }
}
