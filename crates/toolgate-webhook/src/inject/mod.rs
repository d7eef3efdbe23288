//! Sidecar injection as a pure function: a pod's JSON in, JSON Patch
//! operations out. No I/O; the server only decodes and encodes around it.
//!
//! The patch is built against the pod exactly as the API server sent it:
//! absent arrays and maps are created whole, present ones are appended to
//! (`/-`) or inserted into (`/0`), and map keys are escaped as JSON Pointer
//! tokens (`toolgate.dev/injected` → `toolgate.dev~1injected`).
//!
//! Split by job: this module decides ([`plan`]); `pod` reads and judges the
//! pod as received (tenant, profile, a sidecar already there); `sidecar`
//! builds what is injected (container, volumes, env patch operations).

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

mod pod;
mod sidecar;
#[cfg(test)]
mod tests;

use pod::{check_profile_name, foreign, recognise_own_injection};
pub use pod::{normalize_container, resolve_tenant};
use sidecar::{add, env_ops, mcp_upstreams, sidecar_container, sidecar_volumes};

/// Env var pointing app containers at the sidecar.
pub use toolgate_contract::env::URL as ENV_URL;
pub(super) use toolgate_contract::names::{BUNDLE_DIR, TRUST_DIR, WORKSPACE_BASE as WORKSPACE_DIR};
pub use toolgate_contract::names::{VOLUME_BUNDLE, VOLUME_TRUST, VOLUME_WORKSPACE};
pub use toolgate_k8s::names::{
    ANNOTATION_INJECT, ANNOTATION_INJECTED, ANNOTATION_MCP_UPSTREAMS, ANNOTATION_PROFILE,
    ANNOTATION_PROFILE_INJECTED, ANNOTATION_TENANT, OPS_PORT, SIDECAR_NAME, SIDECAR_PORT,
    SIDECAR_URL, TRUST_CONFIGMAP,
};
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
    /// Where injected sidecars export traces; `None`: they do not.
    pub tracing: Option<SidecarTracing>,
    /// The database URL of the Secret reaches a transaction-mode pooler.
    pub transaction_pooler: bool,
    /// The wake-up relay injected sidecars hear stops from.
    pub wakeups_url: Option<String>,
}

/// Trace export of the injected sidecars: the standard `OTEL_*` variables
/// the webhook sets on each, naming the pod in the resource attributes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SidecarTracing {
    /// OTLP/HTTP endpoint (`http://collector.observability:4318`).
    pub endpoint: String,
    /// Share of traces the sidecar starts itself that it samples (0-1);
    /// a trace the agent started follows the agent's decision.
    pub sample_ratio: String,
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
            tracing: None,
            transaction_pooler: false,
            wakeups_url: None,
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

pub(super) fn to_value<T: Serialize>(value: &T) -> Result<Value, WebhookError> {
    serde_json::to_value(value).map_err(|e| WebhookError::Internal(e.to_string()))
}

pub(super) fn invalid(field: &str, message: &str) -> WebhookError {
    WebhookError::InvalidObject {
        field: field.to_owned(),
        message: message.to_owned(),
    }
}

pub(super) fn optional_object<'a>(
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

pub(super) fn optional_array<'a>(
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
