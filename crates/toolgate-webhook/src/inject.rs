//! Sidecar injection as a pure function: a pod's JSON in, JSON Patch
//! operations out. No I/O; the server only decodes and encodes around it.
//!
//! The patch is built against the pod exactly as the API server sent it:
//! absent arrays and maps are created whole, present ones are appended to
//! (`/-`) or inserted into (`/0`), and map keys are escaped as JSON Pointer
//! tokens (`toolgate.dev/injected` → `toolgate.dev~1injected`).

use k8s_openapi::api::core::v1::{
    Capabilities, ConfigMapVolumeSource, Container, EmptyDirVolumeSource, EnvVar, EnvVarSource,
    HTTPGetAction, ObjectFieldSelector, Probe, SeccompProfile, SecretKeySelector, SecurityContext,
    Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde::Serialize;
use serde_json::{Map, Value};

use crate::sidecar_resources::SidecarResources;
use crate::{WebhookError, guard};

pub use toolgate_k8s::names::{
    ANNOTATION_INJECT, ANNOTATION_INJECTED, ANNOTATION_MCP_UPSTREAMS, ANNOTATION_PROFILE,
    ANNOTATION_PROFILE_INJECTED, ANNOTATION_TENANT, OPS_PORT, SIDECAR_NAME, SIDECAR_PORT,
    SIDECAR_URL, TRUST_CONFIGMAP,
};
/// Env var pointing app containers at the sidecar.
pub const ENV_URL: &str = "TOOLGATE_URL";
/// Volume holding the signed bundle (ConfigMap `toolgate-bundle-<profile>`).
pub const VOLUME_BUNDLE: &str = "toolgate-bundle";
/// Volume holding the trust set (ConfigMap `toolgate-trust`).
pub const VOLUME_TRUST: &str = "toolgate-trust";
/// Volume holding per-run workspaces (emptyDir, sidecar only).
pub const VOLUME_WORKSPACE: &str = "toolgate-workspace";

const BUNDLE_DIR: &str = "/etc/toolgate/bundle";
const TRUST_DIR: &str = "/etc/toolgate/trust";
const WORKSPACE_DIR: &str = "/var/lib/toolgate/workspaces";
/// Default user and group id of the sidecar.
pub const RUN_AS: i64 = 65532;

/// How the sidecar is added to the pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum SidecarMode {
    /// A native sidecar: the first init container, `restartPolicy: Always`
    /// (Kubernetes ≥ 1.29). It is started, and its startup probe passes,
    /// before any other init or app container starts.
    #[default]
    Native,
    /// A regular container appended to `spec.containers`; no start ordering.
    Container,
}

/// What the injector needs to know; comes from the webhook's flags.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InjectConfig {
    /// Image of the sidecar container.
    pub sidecar_image: String,
    /// Profile for pods without a `toolgate.dev/profile` annotation.
    pub default_profile: Option<String>,
    /// Native sidecar or regular container.
    pub mode: SidecarMode,
    /// Secret with key `url` holding the database URL.
    pub database_secret: String,
    /// Resources of the sidecar (pods may override them by annotation).
    pub resources: SidecarResources,
    /// `imagePullPolicy` of the sidecar.
    pub pull_policy: String,
    /// User and group id of the sidecar; `None`: left to the platform.
    pub run_as_user: Option<i64>,
}

impl InjectConfig {
    /// A configuration with the default resources, `IfNotPresent` and user 65532.
    pub fn new(
        sidecar_image: impl Into<String>,
        default_profile: Option<String>,
        mode: SidecarMode,
        database_secret: impl Into<String>,
    ) -> Self {
        Self {
            sidecar_image: sidecar_image.into(),
            default_profile,
            mode,
            database_secret: database_secret.into(),
            resources: SidecarResources::default(),
            pull_policy: "IfNotPresent".into(),
            run_as_user: Some(RUN_AS),
        }
    }
}

/// One RFC 6902 operation (only `add` and `replace` are ever produced).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PatchOp {
    /// `add` or `replace`.
    pub op: &'static str,
    /// JSON Pointer, tokens escaped.
    pub path: String,
    /// The value added or put in place.
    pub value: Value,
}

/// Why a pod is admitted unchanged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Skip {
    /// `toolgate.dev/inject: "false"`.
    OptedOut,
    /// This webhook's own sidecar is already there (a reinvocation) and every
    /// container has `TOOLGATE_URL`.
    AlreadyInjected,
    /// Neither an annotation nor a default names a profile.
    NoProfile,
}

/// What to do with a pod.
#[derive(Debug, Clone, PartialEq)]
pub enum Plan {
    /// Inject the sidecar enforcing `profile`.
    Inject {
        /// The profile injected.
        profile: String,
        /// The operations.
        ops: Vec<PatchOp>,
    },
    /// Already injected, but containers added since (e.g. by a later
    /// webhook, on reinvocation) lack `TOOLGATE_URL`: only that is added.
    TopUp {
        /// The operations.
        ops: Vec<PatchOp>,
    },
    /// Admit unchanged.
    Skip {
        /// Why.
        reason: Skip,
        /// A warning for the user, if the skip is probably a mistake.
        warning: Option<String>,
    },
}

impl Plan {
    /// The patch operations, empty when skipped.
    pub fn ops(&self) -> &[PatchOp] {
        match self {
            Self::Inject { ops, .. } | Self::TopUp { ops } => ops,
            Self::Skip { .. } => &[],
        }
    }
}

/// Escapes one JSON Pointer reference token (RFC 6901): `~` → `~0`, `/` → `~1`.
pub fn escape_token(token: &str) -> String {
    token.replace('~', "~0").replace('/', "~1")
}

/// Decides what to do with `pod` (the AdmissionReview's `object`).
/// `request_namespace` is the review's `request.namespace`: it is the
/// namespace the API server authorized the request for, so it names the
/// tenant; the pod's own `metadata.namespace` is used only when the request
/// has none, and a pod that names another namespace is refused.
///
/// A pod that will run with the sidecar (injected now, or recognised as
/// injected by this webhook on reinvocation) is refused when:
/// - `toolgate.dev/tenant` names anything but its namespace;
/// - it brings its own container named `toolgate-sidecar`;
/// - it declares a volume with one of the sidecar's volume names, or another
///   container mounts one of them;
/// - it uses `hostNetwork`, `hostPID` or `shareProcessNamespace`.
///
/// Pods admitted without a sidecar (opted out, no profile) are not judged.
pub fn plan(
    pod: &Value,
    request_namespace: Option<&str>,
    config: &InjectConfig,
) -> Result<Plan, WebhookError> {
    let pod = pod
        .as_object()
        .ok_or_else(|| invalid("object", "a pod must be a JSON object"))?;
    let metadata = optional_object(pod, "metadata", "object.metadata")?;
    let annotations = match metadata {
        Some(m) => optional_object(m, "annotations", "object.metadata.annotations")?,
        None => None,
    };
    let labels = match metadata {
        Some(m) => optional_object(m, "labels", "object.metadata.labels")?,
        None => None,
    };
    let spec = pod
        .get("spec")
        .and_then(Value::as_object)
        .ok_or_else(|| invalid("object.spec", "a pod must have a spec object"))?;
    let containers = optional_array(spec, "containers", "object.spec.containers")?
        .filter(|c| !c.is_empty())
        .ok_or_else(|| {
            invalid(
                "object.spec.containers",
                "a pod must have at least one container",
            )
        })?;
    let init_containers = optional_array(spec, "initContainers", "object.spec.initContainers")?;
    let ephemeral = optional_array(
        spec,
        "ephemeralContainers",
        "object.spec.ephemeralContainers",
    )?;
    let volumes = optional_array(spec, "volumes", "object.spec.volumes")?;
    let groups = [
        ("containers", Some(containers)),
        ("initContainers", init_containers),
        ("ephemeralContainers", ephemeral),
    ];
    for (group, list) in groups {
        if let Some(i) = list.into_iter().flatten().position(|c| !c.is_object()) {
            return Err(invalid(
                &format!("object.spec.{group}[{i}]"),
                "a container must be an object",
            ));
        }
    }
    if let Some(i) = volumes.into_iter().flatten().position(|v| !v.is_object()) {
        return Err(invalid(
            &format!("object.spec.volumes[{i}]"),
            "a volume must be an object",
        ));
    }

    let annotation = |key: &str| annotations.and_then(|a| a.get(key)).and_then(Value::as_str);
    let label = |key: &str| labels.and_then(|l| l.get(key)).and_then(Value::as_str);

    if annotation(ANNOTATION_INJECT) == Some("false") || label(ANNOTATION_INJECT) == Some("false") {
        return Ok(Plan::Skip {
            reason: Skip::OptedOut,
            warning: None,
        });
    }

    let pod_namespace = metadata
        .and_then(|m| m.get("namespace"))
        .and_then(Value::as_str);
    let profile = annotation(ANNOTATION_PROFILE)
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .or(config.default_profile.as_deref().filter(|p| !p.is_empty()));

    let sidecars = guard::find_sidecars(spec);
    if let Some(first) = sidecars.first() {
        let tenant = resolve_tenant(
            pod_namespace,
            request_namespace,
            annotation(ANNOTATION_TENANT),
        )?;
        let at = format!("spec.{}[{}]", first.group, first.index);
        let Some(profile) = profile else {
            return Err(foreign(
                &at,
                "the pod names no profile, so the webhook cannot have injected it",
            ));
        };
        check_profile_name(profile)?;
        recognise_own_injection(&sidecars, spec, annotation, profile, tenant, config)?;
        guard::check_isolation(spec)?;
        let ops = env_ops(containers, init_containers)?;
        return Ok(if ops.is_empty() {
            Plan::Skip {
                reason: Skip::AlreadyInjected,
                warning: None,
            }
        } else {
            Plan::TopUp { ops }
        });
    }

    let Some(profile) = profile else {
        return Ok(Plan::Skip {
            reason: Skip::NoProfile,
            warning: Some(format!(
                "toolgate: pod selected for injection but it has no `{ANNOTATION_PROFILE}` annotation \
                 and the webhook has no default profile: the toolgate sidecar was NOT injected"
            )),
        });
    };
    let bundle_configmap = check_profile_name(profile)?;
    let tenant = resolve_tenant(
        pod_namespace,
        request_namespace,
        annotation(ANNOTATION_TENANT),
    )?;

    for (i, volume) in volumes.into_iter().flatten().enumerate() {
        let name = volume
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if guard::RESERVED_VOLUMES.contains(&name) {
            return Err(WebhookError::Injection {
                field: format!("spec.volumes[{i}].name"),
                message: format!(
                    "volume name `{name}` is reserved for the toolgate sidecar (a volume of the \
                     pod's own under that name would stand in for the sidecar's); rename it"
                ),
            });
        }
    }
    guard::check_isolation(spec)?;

    let mut ops = env_ops(containers, init_containers)?;
    let mcp = mcp_upstreams(annotation(ANNOTATION_MCP_UPSTREAMS))?;
    let resources = config.resources.with_annotations(annotation)?;
    let sidecar = to_value(&sidecar_container(config, tenant, mcp, &resources))?;
    match (config.mode, init_containers) {
        (SidecarMode::Native, None) => {
            ops.push(add("/spec/initContainers", Value::Array(vec![sidecar])))
        }
        (SidecarMode::Native, Some(_)) => ops.push(add("/spec/initContainers/0", sidecar)),
        (SidecarMode::Container, _) => ops.push(add("/spec/containers/-", sidecar)),
    }
    let new_volumes = sidecar_volumes(&bundle_configmap)
        .iter()
        .map(to_value)
        .collect::<Result<Vec<_>, _>>()?;
    if volumes.is_some() {
        ops.extend(new_volumes.into_iter().map(|v| add("/spec/volumes/-", v)));
    } else {
        ops.push(add("/spec/volumes", Value::Array(new_volumes)));
    }
    let marks = [
        (ANNOTATION_INJECTED, "true"),
        (ANNOTATION_PROFILE_INJECTED, profile),
    ];
    match (metadata, annotations) {
        (None, _) => {
            let map: Map<String, Value> = marks
                .iter()
                .map(|(k, v)| ((*k).into(), (*v).into()))
                .collect();
            ops.push(add("/metadata", serde_json::json!({"annotations": map})));
        }
        (Some(_), None) => {
            let map: Map<String, Value> = marks
                .iter()
                .map(|(k, v)| ((*k).into(), (*v).into()))
                .collect();
            ops.push(add("/metadata/annotations", Value::Object(map)));
        }
        (Some(_), Some(_)) => {
            for (key, value) in marks {
                ops.push(add(
                    &format!("/metadata/annotations/{}", escape_token(key)),
                    value.into(),
                ));
            }
        }
    }
    Ok(Plan::Inject {
        profile: profile.to_owned(),
        ops,
    })
}

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
fn check_profile_name(profile: &str) -> Result<String, WebhookError> {
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
fn recognise_own_injection<'a>(
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
    let bundle_configmap = toolgate_k8s::names::bundle_configmap(&profile);
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
const SERVICE_ACCOUNT_MOUNT: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// A sidecar container with what the API server adds between two webhook
/// invocations taken out, so it can be compared with what the webhook
/// injects. Each removal is a value that means the same as its absence, or
/// an addition that cannot change what the sidecar enforces:
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
fn normalize_volume(volume: &Value) -> Value {
    let mut volume = volume.clone();
    if let Some(config_map) = volume.get_mut("configMap").and_then(Value::as_object_mut)
        && config_map.get("defaultMode") == Some(&Value::from(420))
    {
        config_map.remove("defaultMode");
    }
    volume
}

fn foreign(field: &str, why: &str) -> WebhookError {
    WebhookError::Injection {
        field: field.to_owned(),
        message: format!(
            "a container named `{SIDECAR_NAME}` is reserved for the sidecar this webhook injects, \
             and this one is not it: {why}; rename the container and let the webhook add the sidecar"
        ),
    }
}

/// `TOOLGATE_URL` for every container that lacks it (or has another value),
/// addressed by the indices the containers have in the pod as received.
fn env_ops(
    containers: &[Value],
    init_containers: Option<&Vec<Value>>,
) -> Result<Vec<PatchOp>, WebhookError> {
    let mut ops = Vec::new();
    let groups = [
        ("containers", Some(containers)),
        ("initContainers", init_containers.map(Vec::as_slice)),
    ];
    for (group, list) in groups {
        for (i, container) in list.into_iter().flatten().enumerate() {
            let field = format!("object.spec.{group}[{i}]");
            let container = container
                .as_object()
                .ok_or_else(|| invalid(&field, "a container must be an object"))?;
            if container.get("name").and_then(Value::as_str) == Some(SIDECAR_NAME) {
                continue;
            }
            let base = format!("/spec/{group}/{i}/env");
            let entry = serde_json::json!({"name": ENV_URL, "value": SIDECAR_URL});
            match optional_array(container, "env", &format!("{field}.env"))? {
                None => ops.push(add(&base, Value::Array(vec![entry]))),
                Some(env) => match env
                    .iter()
                    .position(|e| e.get("name").and_then(Value::as_str) == Some(ENV_URL))
                {
                    None => ops.push(add(&format!("{base}/-"), entry)),
                    Some(j) if env[j] == entry => {}
                    Some(j) => ops.push(PatchOp {
                        op: "replace",
                        path: format!("{base}/{j}"),
                        value: entry,
                    }),
                },
            }
        }
    }
    Ok(ops)
}

/// The `toolgate.dev/mcp-upstreams` annotation, checked entry by entry so a
/// bad value is refused here rather than crash-looping the sidecar:
/// `NAME=URL` with a name of `[A-Za-z0-9_-]{1,64}` and an `http(s)` URL.
fn mcp_upstreams(value: Option<&str>) -> Result<Option<&str>, WebhookError> {
    let Some(value) = value.map(str::trim).filter(|v| !v.is_empty()) else {
        return Ok(None);
    };
    for entry in value.split(',') {
        let refuse = |why: &str| WebhookError::Injection {
            field: format!("metadata.annotations[{ANNOTATION_MCP_UPSTREAMS}]"),
            message: format!("entry `{entry}` {why}"),
        };
        let (name, url) = entry
            .split_once('=')
            .ok_or_else(|| refuse("is not NAME=URL"))?;
        let name_ok = !name.is_empty()
            && name.len() <= 64
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if !name_ok {
            return Err(refuse("has a server name outside [A-Za-z0-9_-]{1,64}"));
        }
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(refuse("needs an http:// or https:// URL"));
        }
    }
    Ok(Some(value))
}

fn sidecar_container(
    config: &InjectConfig,
    tenant: &str,
    mcp: Option<&str>,
    resources: &SidecarResources,
) -> Container {
    let http_probe = |path: &str, period: i32, failures: i32| Probe {
        http_get: Some(HTTPGetAction {
            path: Some(path.into()),
            port: IntOrString::Int(i32::from(OPS_PORT)),
            scheme: Some("HTTP".into()),
            ..Default::default()
        }),
        period_seconds: Some(period),
        failure_threshold: Some(failures),
        timeout_seconds: Some(1),
        ..Default::default()
    };
    let field_env = |name: &str, path: &str| EnvVar {
        name: name.into(),
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                field_path: path.into(),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    let mount = |name: &str, path: &str, read_only: bool| VolumeMount {
        name: name.into(),
        mount_path: path.into(),
        read_only: Some(read_only),
        ..Default::default()
    };
    let native = config.mode == SidecarMode::Native;
    Container {
        name: SIDECAR_NAME.into(),
        image: Some(config.sidecar_image.clone()),
        image_pull_policy: Some(config.pull_policy.clone()),
        args: Some(
            [
                "sidecar",
                "--bundle",
                "/etc/toolgate/bundle/bundle.json",
                "--trust",
                "/etc/toolgate/trust/trust.pem",
                "--listen",
                toolgate_k8s::names::SIDECAR_LISTEN,
                "--ops-listen",
                toolgate_k8s::names::OPS_LISTEN,
                "--workspace-base",
                WORKSPACE_DIR,
            ]
            .map(String::from)
            .to_vec(),
        ),
        env: Some(
            vec![
                EnvVar {
                    name: "TOOLGATE_DATABASE_URL".into(),
                    value_from: Some(EnvVarSource {
                        secret_key_ref: Some(SecretKeySelector {
                            name: config.database_secret.clone(),
                            key: "url".into(),
                            optional: Some(false),
                        }),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
                EnvVar {
                    name: "TOOLGATE_TENANT".into(),
                    value: Some(tenant.into()),
                    ..Default::default()
                },
                field_env("POD_NAME", "metadata.name"),
                field_env("POD_NAMESPACE", "metadata.namespace"),
            ]
            .into_iter()
            .chain(mcp.map(|upstreams| EnvVar {
                name: "TOOLGATE_MCP_UPSTREAMS".into(),
                value: Some(upstreams.into()),
                ..Default::default()
            }))
            .collect(),
        ),
        // Native sidecars only: kubelet starts later containers once this
        // probe passes, so apps never see a sidecar without a bundle.
        startup_probe: native.then(|| http_probe("/readyz", 1, 120)),
        readiness_probe: Some(http_probe("/readyz", 2, 3)),
        liveness_probe: Some(http_probe("/healthz", 10, 3)),
        resources: Some(resources.requirements()),
        security_context: Some(SecurityContext {
            run_as_non_root: Some(true),
            run_as_user: config.run_as_user,
            run_as_group: config.run_as_user,
            read_only_root_filesystem: Some(true),
            allow_privilege_escalation: Some(false),
            privileged: Some(false),
            capabilities: Some(Capabilities {
                drop: Some(vec!["ALL".into()]),
                ..Default::default()
            }),
            seccomp_profile: Some(SeccompProfile {
                type_: "RuntimeDefault".into(),
                ..Default::default()
            }),
            ..Default::default()
        }),
        volume_mounts: Some(vec![
            mount(VOLUME_BUNDLE, BUNDLE_DIR, true),
            mount(VOLUME_TRUST, TRUST_DIR, true),
            mount(VOLUME_WORKSPACE, WORKSPACE_DIR, false),
        ]),
        restart_policy: native.then(|| "Always".into()),
        termination_message_policy: Some("FallbackToLogsOnError".into()),
        ..Default::default()
    }
}

fn sidecar_volumes(bundle_configmap: &str) -> [Volume; 3] {
    let config_map = |name: &str| Volume {
        name: String::new(),
        config_map: Some(ConfigMapVolumeSource {
            name: name.into(),
            optional: Some(false),
            ..Default::default()
        }),
        ..Default::default()
    };
    [
        Volume {
            name: VOLUME_BUNDLE.into(),
            ..config_map(bundle_configmap)
        },
        Volume {
            name: VOLUME_TRUST.into(),
            ..config_map(TRUST_CONFIGMAP)
        },
        Volume {
            name: VOLUME_WORKSPACE.into(),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Default::default()
        },
    ]
}

fn add(path: &str, value: Value) -> PatchOp {
    PatchOp {
        op: "add",
        path: path.to_owned(),
        value,
    }
}

fn to_value<T: Serialize>(value: &T) -> Result<Value, WebhookError> {
    serde_json::to_value(value).map_err(|e| WebhookError::Internal(e.to_string()))
}

fn invalid(field: &str, message: &str) -> WebhookError {
    WebhookError::InvalidObject {
        field: field.to_owned(),
        message: message.to_owned(),
    }
}

fn optional_object<'a>(
    parent: &'a Map<String, Value>,
    key: &str,
    field: &str,
) -> Result<Option<&'a Map<String, Value>>, WebhookError> {
    match parent.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(map)) => Ok(Some(map)),
        Some(_) => Err(invalid(field, "must be an object")),
    }
}

fn optional_array<'a>(
    parent: &'a Map<String, Value>,
    key: &str,
    field: &str,
) -> Result<Option<&'a Vec<Value>>, WebhookError> {
    match parent.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Array(items)) => Ok(Some(items)),
        Some(_) => Err(invalid(field, "must be an array")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn config(mode: SidecarMode) -> InjectConfig {
        InjectConfig::new("ghcr.io/example/toolgate:1", None, mode, "toolgate-db")
    }

    fn pod(annotations: Value) -> Value {
        json!({
            "metadata": {"generateName": "agent-", "annotations": annotations},
            "spec": {"containers": [{"name": "agent", "image": "agent:1"}]}
        })
    }

    #[test]
    fn user_id_and_pull_policy_come_from_the_config() {
        let mut cfg = config(SidecarMode::Native);
        let c = sidecar_container(&cfg, "t", None, &cfg.resources);
        let sc = c.security_context.unwrap();
        assert_eq!(
            (sc.run_as_user, sc.run_as_group),
            (Some(RUN_AS), Some(RUN_AS))
        );
        assert_eq!(c.image_pull_policy.as_deref(), Some("IfNotPresent"));
        cfg.run_as_user = None;
        cfg.pull_policy = "Never".into();
        let c = sidecar_container(&cfg, "t", None, &cfg.resources);
        let sc = c.security_context.unwrap();
        // OpenShift assigns the user: none is written, non-root still required.
        assert_eq!((sc.run_as_user, sc.run_as_group), (None, None));
        assert_eq!(sc.run_as_non_root, Some(true));
        assert_eq!(c.image_pull_policy.as_deref(), Some("Never"));
    }

    #[test]
    fn escapes_pointer_tokens() {
        assert_eq!(
            escape_token("toolgate.dev/injected"),
            "toolgate.dev~1injected"
        );
        assert_eq!(escape_token("a~b/c"), "a~0b~1c");
    }

    #[test]
    fn missing_maps_and_arrays_are_created_whole() {
        let pod = json!({"spec": {"containers": [{"name": "a"}]}, "metadata": {"annotations": {"toolgate.dev/profile": "p"}}});
        let ops = plan(&pod, Some("ns"), &config(SidecarMode::Native)).unwrap();
        let paths: Vec<_> = ops.ops().iter().map(|o| o.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "/spec/containers/0/env",
                "/spec/initContainers",
                "/spec/volumes",
                "/metadata/annotations/toolgate.dev~1injected",
                "/metadata/annotations/toolgate.dev~1profile-injected",
            ]
        );
        let pod = json!({"spec": {"containers": [{"name": "a", "env": []}], "initContainers": [], "volumes": []}});
        let mut cfg = config(SidecarMode::Native);
        cfg.default_profile = Some("default".into());
        let ops = plan(&pod, Some("ns"), &cfg).unwrap();
        let paths: Vec<_> = ops.ops().iter().map(|o| o.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "/spec/containers/0/env/-",
                "/spec/initContainers/0",
                "/spec/volumes/-",
                "/spec/volumes/-",
                "/spec/volumes/-",
                "/metadata",
            ]
        );
    }

    #[test]
    fn opt_out_no_profile_and_bad_profile() {
        let cfg = config(SidecarMode::Native);
        let out = plan(
            &pod(json!({"toolgate.dev/inject": "false", "toolgate.dev/profile": "p"})),
            None,
            &cfg,
        )
        .unwrap();
        assert_eq!(
            out,
            Plan::Skip {
                reason: Skip::OptedOut,
                warning: None
            }
        );
        let out = plan(&pod(json!({})), Some("ns"), &cfg).unwrap();
        assert!(matches!(
            out,
            Plan::Skip {
                reason: Skip::NoProfile,
                warning: Some(_)
            }
        ));
        let err = plan(
            &pod(json!({"toolgate.dev/profile": "Bad_Name"})),
            Some("ns"),
            &cfg,
        )
        .unwrap_err();
        assert_eq!(err.code(), "injection_refused");
        assert_eq!(
            err.field(),
            Some("metadata.annotations[toolgate.dev/profile]")
        );
    }

    /// The pod with the plan's patch applied, as the API server would store it.
    fn applied(pod: &Value, namespace: &str, cfg: &InjectConfig) -> Value {
        let out = plan(pod, Some(namespace), cfg).unwrap();
        assert!(matches!(out, Plan::Inject { .. }), "{out:?}");
        let patch: json_patch::Patch =
            serde_json::from_value(serde_json::to_value(out.ops()).unwrap()).unwrap();
        let mut pod = pod.clone();
        json_patch::patch(&mut pod, &patch).unwrap();
        pod
    }

    fn refused(pod: &Value, namespace: Option<&str>, cfg: &InjectConfig) -> WebhookError {
        let err = plan(pod, namespace, cfg).unwrap_err();
        assert_eq!(err.code(), "injection_refused", "{err}");
        assert_eq!(err.http_status(), 403);
        err
    }

    #[test]
    fn the_annotation_alone_does_not_count_as_injected() {
        let cfg = config(SidecarMode::Native);
        let spoofed = pod(json!({"toolgate.dev/injected": "true", "toolgate.dev/profile": "p"}));
        let out = plan(&spoofed, Some("ns"), &cfg).unwrap();
        assert!(matches!(out, Plan::Inject { .. }), "{out:?}");
        // Nor does a bare container with the sidecar's name: it is refused.
        let mut fake = spoofed.clone();
        fake["spec"]["initContainers"] = json!([{"name": SIDECAR_NAME, "image": "evil:1"}]);
        fake["spec"]["containers"][0]["env"] = json!([{"name": ENV_URL, "value": SIDECAR_URL}]);
        let err = refused(&fake, Some("ns"), &cfg);
        assert_eq!(err.field(), Some("spec.initContainers[0]"));
        assert!(err.to_string().contains("differs in: "), "{err}");
    }

    #[test]
    fn own_injection_is_recognised_with_server_defaults_applied() {
        for mode in [SidecarMode::Native, SidecarMode::Container] {
            let cfg = config(mode);
            let original = pod(json!({"toolgate.dev/profile": "p"}));
            let injected = applied(&original, "ns", &cfg);
            assert_eq!(
                plan(&injected, Some("ns"), &cfg).unwrap(),
                Plan::Skip {
                    reason: Skip::AlreadyInjected,
                    warning: None
                }
            );
            // What the API server adds before a reinvocation.
            let mut defaulted = injected.clone();
            let group = if mode == SidecarMode::Native {
                "initContainers"
            } else {
                "containers"
            };
            let index = if mode == SidecarMode::Native { 0 } else { 1 };
            let sidecar = &mut defaulted["spec"][group][index];
            sidecar["terminationMessagePath"] = json!("/dev/termination-log");
            sidecar["imagePullPolicy"] = json!("Always");
            sidecar["readinessProbe"]["successThreshold"] = json!(1);
            sidecar["livenessProbe"]["successThreshold"] = json!(1);
            sidecar["env"][2]["valueFrom"]["fieldRef"]["apiVersion"] = json!("v1");
            sidecar["env"][3]["valueFrom"]["fieldRef"]["apiVersion"] = json!("v1");
            sidecar["resizePolicy"] = json!([
                {"resourceName": "cpu", "restartPolicy": "NotRequired"},
                {"resourceName": "memory", "restartPolicy": "NotRequired"}
            ]);
            sidecar["resources"]["limits"]["ephemeral-storage"] = json!("1Gi");
            sidecar["volumeMounts"].as_array_mut().unwrap().push(json!({
                "name": "kube-api-access-x7k2p", "readOnly": true,
                "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"
            }));
            for v in defaulted["spec"]["volumes"].as_array_mut().unwrap() {
                if v.get("configMap").is_some() {
                    v["configMap"]["defaultMode"] = json!(420);
                }
            }
            assert!(
                matches!(
                    plan(&defaulted, Some("ns"), &cfg).unwrap(),
                    Plan::Skip {
                        reason: Skip::AlreadyInjected,
                        ..
                    }
                ),
                "{mode:?}"
            );

            type Tamper = fn(&mut Value);
            let tampered: [(&str, Tamper, &str); 9] = [
                ("image", |c| c["image"] = json!("evil/allow-all:1"), "image"),
                ("command", |c| c["command"] = json!(["/bin/sh"]), "command"),
                (
                    "tenant",
                    |c| c["env"][1]["value"] = json!("victim-team"),
                    "env",
                ),
                (
                    "extra env",
                    |c| {
                        c["env"]
                            .as_array_mut()
                            .unwrap()
                            .push(json!({"name": "TOOLGATE_LISTEN", "value": "0.0.0.0:15031"}))
                    },
                    "env",
                ),
                (
                    "envFrom",
                    |c| c["envFrom"] = json!([{"configMapRef": {"name": "x"}}]),
                    "envFrom",
                ),
                (
                    "mount elsewhere",
                    |c| {
                        c["volumeMounts"].as_array_mut().unwrap().push(
                            json!({"name": "evil", "readOnly": true, "mountPath": "/etc/toolgate/trust"}),
                        )
                    },
                    "volumeMounts",
                ),
                (
                    "token path over a sidecar volume",
                    |c| {
                        c["volumeMounts"].as_array_mut().unwrap().push(json!({
                            "name": "toolgate-workspace", "readOnly": true,
                            "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"
                        }))
                    },
                    "volumeMounts",
                ),
                (
                    "security context",
                    |c| c["securityContext"]["runAsUser"] = json!(0),
                    "securityContext",
                ),
                (
                    "memory",
                    |c| c["resources"]["limits"]["memory"] = json!("1Mi"),
                    "resources",
                ),
            ];
            for (what, tamper, key) in tampered {
                let mut bad = defaulted.clone();
                tamper(&mut bad["spec"][group][index]);
                let err = refused(&bad, Some("ns"), &cfg);
                assert_eq!(
                    err.field(),
                    Some(format!("spec.{group}[{index}]").as_str()),
                    "{what}"
                );
                assert!(
                    err.to_string().contains(&format!("differs in: {key}")),
                    "{what}: {err}"
                );
            }

            // The volumes must be the ones for the profile resolved now.
            let mut other = injected.clone();
            other["metadata"]["annotations"]["toolgate.dev/profile"] = json!("q");
            let err = refused(&other, Some("ns"), &cfg);
            assert!(err.to_string().contains("toolgate-bundle"), "{err}");
            let mut unmarked = injected.clone();
            unmarked["metadata"]["annotations"]
                .as_object_mut()
                .unwrap()
                .remove(ANNOTATION_INJECTED);
            let err = refused(&unmarked, Some("ns"), &cfg);
            assert!(err.to_string().contains(ANNOTATION_INJECTED), "{err}");
            // In another namespace it would carry the wrong tenant.
            refused(&injected, Some("other"), &cfg);
            // Injected for the other mode: wrong place.
            let other_mode = config(match mode {
                SidecarMode::Native => SidecarMode::Container,
                SidecarMode::Container => SidecarMode::Native,
            });
            let err = refused(&injected, Some("ns"), &other_mode);
            assert!(err.to_string().contains("injects it into"), "{err}");
        }
    }

    #[test]
    fn a_sidecar_in_a_pod_without_profile_or_twice_is_refused() {
        let cfg = config(SidecarMode::Native);
        let injected = applied(&pod(json!({"toolgate.dev/profile": "p"})), "ns", &cfg);
        let mut no_profile = injected.clone();
        no_profile["metadata"]["annotations"]
            .as_object_mut()
            .unwrap()
            .remove(ANNOTATION_PROFILE);
        let err = refused(&no_profile, Some("ns"), &cfg);
        assert!(err.to_string().contains("names no profile"), "{err}");
        let mut twice = injected.clone();
        let copy = twice["spec"]["initContainers"][0].clone();
        twice["spec"]["containers"]
            .as_array_mut()
            .unwrap()
            .push(copy);
        assert_eq!(
            refused(&twice, Some("ns"), &cfg).field(),
            Some("spec.containers[1]")
        );
        // Opted out: not judged (and not injected).
        let mut opted_out = twice.clone();
        opted_out["metadata"]["annotations"][ANNOTATION_INJECT] = json!("false");
        assert!(matches!(
            plan(&opted_out, Some("ns"), &cfg).unwrap(),
            Plan::Skip {
                reason: Skip::OptedOut,
                ..
            }
        ));
    }

    #[test]
    fn the_tenant_is_the_namespace() {
        let cfg = config(SidecarMode::Container);
        let err = plan(&pod(json!({"toolgate.dev/profile": "p"})), None, &cfg).unwrap_err();
        assert_eq!(err.field(), Some("metadata.namespace"));
        let tenant_of = |out: &Plan| {
            let sidecar = out
                .ops()
                .iter()
                .find(|o| o.path == "/spec/containers/-")
                .unwrap();
            assert!(sidecar.value.get("restartPolicy").is_none());
            let env = sidecar.value["env"].as_array().unwrap();
            env.iter().find(|e| e["name"] == "TOOLGATE_TENANT").unwrap()["value"].clone()
        };
        // An annotation naming another tenant is refused, naming both values.
        let err = refused(
            &pod(json!({"toolgate.dev/profile": "p", "toolgate.dev/tenant": "victim-team"})),
            Some("ns"),
            &cfg,
        );
        assert_eq!(
            err.field(),
            Some("metadata.annotations[toolgate.dev/tenant]")
        );
        let message = err.to_string();
        assert!(
            message.contains("`victim-team`") && message.contains("`ns`"),
            "{message}"
        );
        refused(
            &pod(json!({"toolgate.dev/profile": "p", "toolgate.dev/tenant": ""})),
            Some("ns"),
            &cfg,
        );
        // One equal to the namespace is harmless.
        let out = plan(
            &pod(json!({"toolgate.dev/profile": "p", "toolgate.dev/tenant": "ns"})),
            Some("ns"),
            &cfg,
        )
        .unwrap();
        assert_eq!(tenant_of(&out), "ns");
        // The request's namespace wins; the pod's is the fallback; they must agree.
        let mut placed = pod(json!({"toolgate.dev/profile": "p"}));
        placed["metadata"]["namespace"] = json!("ns");
        assert_eq!(tenant_of(&plan(&placed, None, &cfg).unwrap()), "ns");
        assert_eq!(tenant_of(&plan(&placed, Some("ns"), &cfg).unwrap()), "ns");
        let err = refused(&placed, Some("elsewhere"), &cfg);
        assert_eq!(err.field(), Some("metadata.namespace"));
        assert!(err.to_string().contains("`elsewhere`"), "{err}");
        assert_eq!(
            resolve_tenant(Some(""), Some(""), None).unwrap_err().code(),
            "injection_refused"
        );
    }

    #[test]
    fn isolation_defeating_shapes_are_refused_at_create() {
        let cfg = config(SidecarMode::Native);
        let base = pod(json!({"toolgate.dev/profile": "p"}));
        for key in ["hostNetwork", "hostPID", "shareProcessNamespace"] {
            let mut p = base.clone();
            p["spec"][key] = json!(true);
            assert_eq!(
                refused(&p, Some("ns"), &cfg).field(),
                Some(format!("spec.{key}").as_str())
            );
        }
        // A mount of a volume the pod does not have yet, but will after injection.
        let mut p = base.clone();
        p["spec"]["containers"][0]["volumeMounts"] =
            json!([{"name": "toolgate-workspace", "mountPath": "/w"}]);
        assert_eq!(
            refused(&p, Some("ns"), &cfg).field(),
            Some("spec.containers[0].volumeMounts[0].name")
        );
        let mut p = base.clone();
        p["spec"]["initContainers"] = json!([{"name": "init", "volumeMounts": [{"name": "toolgate-bundle", "mountPath": "/b"}]}]);
        assert_eq!(
            refused(&p, Some("ns"), &cfg).field(),
            Some("spec.initContainers[0].volumeMounts[0].name")
        );
        // Without a profile nothing is injected and nothing is judged.
        let mut p = pod(json!({}));
        p["spec"]["hostNetwork"] = json!(true);
        assert!(matches!(
            plan(&p, Some("ns"), &cfg).unwrap(),
            Plan::Skip {
                reason: Skip::NoProfile,
                ..
            }
        ));
        // On reinvocation, a container added since that mounts a sidecar volume.
        let mut later = applied(&base, "ns", &cfg);
        later["spec"]["containers"]
            .as_array_mut()
            .unwrap()
            .push(json!({"name": "late", "volumeMounts": [{"name": "toolgate-trust", "mountPath": "/t"}]}));
        assert_eq!(
            refused(&later, Some("ns"), &cfg).field(),
            Some("spec.containers[1].volumeMounts[0].name")
        );
    }

    #[test]
    fn wrong_url_is_replaced_and_reserved_volume_names_refused() {
        let cfg = config(SidecarMode::Native);
        let p = json!({
            "metadata": {"namespace": "ns", "annotations": {"toolgate.dev/profile": "p"}},
            "spec": {"containers": [{"name": "a", "env": [{"name": "X", "value": "1"}, {"name": "TOOLGATE_URL", "value": "http://evil"}]}]}
        });
        let out = plan(&p, None, &cfg).unwrap();
        assert_eq!(out.ops()[0].op, "replace");
        assert_eq!(out.ops()[0].path, "/spec/containers/0/env/1");
        let p = json!({
            "metadata": {"namespace": "ns", "annotations": {"toolgate.dev/profile": "p"}},
            "spec": {"containers": [{"name": "a"}], "volumes": [{"name": "toolgate-trust", "emptyDir": {}}]}
        });
        assert_eq!(
            plan(&p, None, &cfg).unwrap_err().field(),
            Some("spec.volumes[0].name")
        );
    }

    #[test]
    fn shapes_that_are_not_pods_are_errors_not_panics() {
        let cfg = config(SidecarMode::Native);
        for bad in [
            json!(null),
            json!([]),
            json!({}),
            json!({"spec": {"containers": []}}),
            json!({"spec": {"containers": {}}}),
            json!({"spec": {"containers": [1]}}),
            json!({"metadata": [], "spec": {"containers": [{}]}}),
            json!({"metadata": {"annotations": 3}, "spec": {"containers": [{}]}}),
        ] {
            assert_eq!(
                plan(&bad, Some("ns"), &cfg).unwrap_err().code(),
                "invalid_object",
                "{bad}"
            );
        }
    }
}
