//! Sidecar injection as a pure function: a pod's JSON in, JSON Patch
//! operations out. No I/O; the server only decodes and encodes around it.
//!
//! The patch is built against the pod exactly as the API server sent it:
//! absent arrays and maps are created whole, present ones are appended to
//! (`/-`) or inserted into (`/0`), and map keys are escaped as JSON Pointer
//! tokens (`toolgate.dev/injected` → `toolgate.dev~1injected`).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Capabilities, ConfigMapVolumeSource, Container, EmptyDirVolumeSource, EnvVar, EnvVarSource,
    HTTPGetAction, ObjectFieldSelector, Probe, ResourceRequirements, SeccompProfile,
    SecretKeySelector, SecurityContext, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde::Serialize;
use serde_json::{Map, Value};

use crate::WebhookError;

/// Name of the injected container.
pub const SIDECAR_NAME: &str = "toolgate-sidecar";
/// Annotation (or label) `"false"` opts a pod out of injection.
pub const ANNOTATION_INJECT: &str = "toolgate.dev/inject";
/// Annotation naming the PolicyProfile the pod's sidecar enforces.
pub const ANNOTATION_PROFILE: &str = "toolgate.dev/profile";
/// Annotation overriding the tenant (default: the pod's namespace).
pub const ANNOTATION_TENANT: &str = "toolgate.dev/tenant";
/// Annotation set on injected pods (informational: the presence of the
/// [`SIDECAR_NAME`] container is what makes injection a no-op).
pub const ANNOTATION_INJECTED: &str = "toolgate.dev/injected";
/// Annotation recording which profile was injected.
pub const ANNOTATION_PROFILE_INJECTED: &str = "toolgate.dev/profile-injected";
/// Port the sidecar listens on, on loopback.
pub const SIDECAR_PORT: u16 = 15031;
/// Port of the sidecar's probes and metrics, on the pod IP (the agent API
/// stays on loopback, where the kubelet cannot reach it).
pub const OPS_PORT: u16 = 15032;
/// What every app container gets as `TOOLGATE_URL`.
pub const SIDECAR_URL: &str = "http://127.0.0.1:15031";
/// Env var pointing app containers at the sidecar.
pub const ENV_URL: &str = "TOOLGATE_URL";
/// Volume holding the signed bundle (ConfigMap `toolgate-bundle-<profile>`).
pub const VOLUME_BUNDLE: &str = "toolgate-bundle";
/// Volume holding the trust set (ConfigMap `toolgate-trust`).
pub const VOLUME_TRUST: &str = "toolgate-trust";
/// Volume holding per-run workspaces (emptyDir, sidecar only).
pub const VOLUME_WORKSPACE: &str = "toolgate-workspace";
/// ConfigMap holding the trust set.
pub const TRUST_CONFIGMAP: &str = "toolgate-trust";

const BUNDLE_DIR: &str = "/etc/toolgate/bundle";
const TRUST_DIR: &str = "/etc/toolgate/trust";
const WORKSPACE_DIR: &str = "/var/lib/toolgate/workspaces";
const RUN_AS: i64 = 65532;

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
    /// The sidecar is already there and every container has `TOOLGATE_URL`.
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
/// `request_namespace` is the review's `request.namespace`, used when the
/// pod's own `metadata.namespace` is empty (controller-created pods).
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
    let volumes = optional_array(spec, "volumes", "object.spec.volumes")?;
    let groups = [
        ("containers", Some(containers)),
        ("initContainers", init_containers),
    ];
    for (group, list) in groups {
        if let Some(i) = list.into_iter().flatten().position(|c| !c.is_object()) {
            return Err(invalid(
                &format!("object.spec.{group}[{i}]"),
                "a container must be an object",
            ));
        }
    }

    let annotation = |key: &str| annotations.and_then(|a| a.get(key)).and_then(Value::as_str);
    let label = |key: &str| labels.and_then(|l| l.get(key)).and_then(Value::as_str);

    if annotation(ANNOTATION_INJECT) == Some("false") || label(ANNOTATION_INJECT) == Some("false") {
        return Ok(Plan::Skip {
            reason: Skip::OptedOut,
            warning: None,
        });
    }

    let has_sidecar = containers
        .iter()
        .chain(init_containers.into_iter().flatten())
        .any(|c| c.get("name").and_then(Value::as_str) == Some(SIDECAR_NAME));
    // The container, not the annotation, is the proof: a pod that only
    // claims `toolgate.dev/injected` still gets its sidecar.
    if has_sidecar {
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

    let profile = annotation(ANNOTATION_PROFILE)
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .or(config.default_profile.as_deref().filter(|p| !p.is_empty()));
    let Some(profile) = profile else {
        return Ok(Plan::Skip {
            reason: Skip::NoProfile,
            warning: Some(format!(
                "toolgate: pod selected for injection but it has no `{ANNOTATION_PROFILE}` annotation \
                 and the webhook has no default profile: the toolgate sidecar was NOT injected"
            )),
        });
    };
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
    let bundle_configmap = format!("toolgate-bundle-{profile}");
    if bundle_configmap.len() > 253 {
        return Err(WebhookError::Injection {
            field: profile_field,
            message: format!(
                "profile name `{profile}` is too long for ConfigMap `{bundle_configmap}`"
            ),
        });
    }

    let namespace = metadata
        .and_then(|m| m.get("namespace"))
        .and_then(Value::as_str)
        .filter(|ns| !ns.is_empty())
        .or(request_namespace.filter(|ns| !ns.is_empty()))
        .ok_or_else(|| WebhookError::Injection {
            field: "metadata.namespace".into(),
            message: "neither the pod nor the request names a namespace".into(),
        })?;
    let tenant = annotation(ANNOTATION_TENANT)
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .unwrap_or(namespace);

    for (i, volume) in volumes.into_iter().flatten().enumerate() {
        let name = volume
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if [VOLUME_BUNDLE, VOLUME_TRUST, VOLUME_WORKSPACE].contains(&name) {
            return Err(WebhookError::Injection {
                field: format!("spec.volumes[{i}].name"),
                message: format!(
                    "volume name `{name}` is reserved for the toolgate sidecar; rename it"
                ),
            });
        }
    }

    let mut ops = env_ops(containers, init_containers)?;
    let sidecar = to_value(&sidecar_container(config, tenant))?;
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

fn sidecar_container(config: &InjectConfig, tenant: &str) -> Container {
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
    let quantities = |cpu: &str, memory: &str| {
        BTreeMap::from([
            ("cpu".to_owned(), Quantity(cpu.into())),
            ("memory".to_owned(), Quantity(memory.into())),
        ])
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
        image_pull_policy: Some("IfNotPresent".into()),
        args: Some(
            [
                "sidecar",
                "--bundle",
                "/etc/toolgate/bundle/bundle.json",
                "--trust",
                "/etc/toolgate/trust/trust.pem",
                "--listen",
                "127.0.0.1:15031",
                "--ops-listen",
                "0.0.0.0:15032",
                "--workspace-base",
                WORKSPACE_DIR,
            ]
            .map(String::from)
            .to_vec(),
        ),
        env: Some(vec![
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
        ]),
        // Native sidecars only: kubelet starts later containers once this
        // probe passes, so apps never see a sidecar without a bundle.
        startup_probe: native.then(|| http_probe("/readyz", 1, 120)),
        readiness_probe: Some(http_probe("/readyz", 2, 3)),
        liveness_probe: Some(http_probe("/healthz", 10, 3)),
        resources: Some(ResourceRequirements {
            requests: Some(quantities("10m", "32Mi")),
            limits: Some(quantities("500m", "128Mi")),
            ..Default::default()
        }),
        security_context: Some(SecurityContext {
            run_as_non_root: Some(true),
            run_as_user: Some(RUN_AS),
            run_as_group: Some(RUN_AS),
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
        InjectConfig {
            sidecar_image: "ghcr.io/example/toolgate:1".into(),
            default_profile: None,
            mode,
            database_secret: "toolgate-db".into(),
        }
    }

    fn pod(annotations: Value) -> Value {
        json!({
            "metadata": {"generateName": "agent-", "annotations": annotations},
            "spec": {"containers": [{"name": "agent", "image": "agent:1"}]}
        })
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

    #[test]
    fn the_annotation_alone_does_not_count_as_injected() {
        let cfg = config(SidecarMode::Native);
        let spoofed = pod(json!({"toolgate.dev/injected": "true", "toolgate.dev/profile": "p"}));
        let out = plan(&spoofed, Some("ns"), &cfg).unwrap();
        assert!(matches!(out, Plan::Inject { .. }), "{out:?}");
        let mut injected = spoofed.clone();
        injected["spec"]["initContainers"] = json!([{"name": SIDECAR_NAME}]);
        injected["spec"]["containers"][0]["env"] = json!([{"name": ENV_URL, "value": SIDECAR_URL}]);
        let out = plan(&injected, Some("ns"), &cfg).unwrap();
        assert_eq!(
            out,
            Plan::Skip {
                reason: Skip::AlreadyInjected,
                warning: None
            }
        );
    }

    #[test]
    fn namespace_comes_from_the_request_and_tenant_can_be_overridden() {
        let cfg = config(SidecarMode::Container);
        let err = plan(&pod(json!({"toolgate.dev/profile": "p"})), None, &cfg).unwrap_err();
        assert_eq!(err.field(), Some("metadata.namespace"));
        let out = plan(
            &pod(json!({"toolgate.dev/profile": "p", "toolgate.dev/tenant": "acme"})),
            Some("ns"),
            &cfg,
        )
        .unwrap();
        let sidecar = out
            .ops()
            .iter()
            .find(|o| o.path == "/spec/containers/-")
            .unwrap();
        let env = sidecar.value["env"].as_array().unwrap();
        assert!(env.contains(&json!({"name": "TOOLGATE_TENANT", "value": "acme"})));
        assert!(sidecar.value.get("restartPolicy").is_none());
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
