//! What is injected: the sidecar container and its volumes, and the env
//! operations that point app containers at it.

use toolgate_k8s::names::McpUpstreamFault;

use super::*;

/// `TOOLGATE_URL` for every container that lacks it (or has another value),
/// addressed by the indices the containers have in the pod as received.
pub(super) fn env_ops(
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
pub(super) fn mcp_upstreams(value: Option<&str>) -> Result<Option<&str>, WebhookError> {
    let Some(value) = value.map(str::trim).filter(|v| !v.is_empty()) else {
        return Ok(None);
    };
    for entry in value.split(',') {
        let why = match toolgate_k8s::names::parse_mcp_upstream(entry) {
            Ok(_) => continue,
            Err(McpUpstreamFault::NotNameUrl) => "is not NAME=URL",
            Err(McpUpstreamFault::BadName(_)) => "has a server name outside [A-Za-z0-9_-]{1,64}",
            Err(McpUpstreamFault::BadUrl(_)) => "needs an http:// or https:// URL",
        };
        return Err(WebhookError::Injection {
            field: format!("metadata.annotations[{ANNOTATION_MCP_UPSTREAMS}]"),
            message: format!("entry `{entry}` {why}"),
        });
    }
    Ok(Some(value))
}

pub(super) fn sidecar_container(
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
                    name: toolgate_contract::env::DATABASE_URL.into(),
                    value_from: Some(EnvVarSource {
                        secret_key_ref: Some(SecretKeySelector {
                            name: config.database_secret.clone(),
                            key: toolgate_contract::names::DATABASE_SECRET_KEY.into(),
                            optional: Some(false),
                        }),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
                EnvVar {
                    name: toolgate_contract::env::TENANT.into(),
                    value: Some(tenant.into()),
                    ..Default::default()
                },
                field_env(toolgate_contract::env::POD_NAME, "metadata.name"),
                field_env(toolgate_contract::env::POD_NAMESPACE, "metadata.namespace"),
            ]
            .into_iter()
            .chain(mcp.map(|upstreams| EnvVar {
                name: toolgate_contract::env::MCP_UPSTREAMS.into(),
                value: Some(upstreams.into()),
                ..Default::default()
            }))
            .chain(config.tracing.iter().flat_map(tracing_env))
            .chain(config.transaction_pooler.then(|| EnvVar {
                name: toolgate_contract::env::DATABASE_POOLER.into(),
                value: Some("transaction".into()),
                ..Default::default()
            }))
            .chain(config.wakeups_url.as_ref().map(|url| EnvVar {
                name: toolgate_contract::env::WAKEUPS_URL.into(),
                value: Some(url.clone()),
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

pub(super) fn sidecar_volumes(bundle_configmap: &str) -> [Volume; 3] {
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

pub(super) fn add(path: &str, value: Value) -> PatchOp {
    PatchOp {
        op: "add",
        path: path.to_owned(),
        value,
    }
}

/// The `OTEL_*` variables of a sidecar that exports traces. The resource
/// attributes name the pod through Kubernetes' `$(VAR)` expansion of the
/// downward-API variables set before them in the same list.
fn tracing_env(tracing: &super::SidecarTracing) -> Vec<EnvVar> {
    use toolgate_contract::env::{POD_NAME, POD_NAMESPACE, otel};
    let value = |name: &str, value: String| EnvVar {
        name: name.into(),
        value: Some(value),
        ..Default::default()
    };
    vec![
        value(otel::EXPORTER_OTLP_ENDPOINT, tracing.endpoint.clone()),
        value(otel::TRACES_SAMPLER, "parentbased_traceidratio".into()),
        value(otel::TRACES_SAMPLER_ARG, tracing.sample_ratio.clone()),
        value(
            otel::RESOURCE_ATTRIBUTES,
            format!(
                "service.name=toolgate-sidecar,k8s.pod.name=$({POD_NAME}),k8s.namespace.name=$({POD_NAMESPACE})"
            ),
        ),
    ]
}
