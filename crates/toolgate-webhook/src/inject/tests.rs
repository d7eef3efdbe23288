//! Unit tests of the injector, pure JSON in and out.

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
fn a_sidecar_exports_traces_only_when_configured_and_names_its_pod() {
    let mut cfg = config(SidecarMode::Native);
    let names = |c: &k8s_openapi::api::core::v1::Container| -> Vec<(String, Option<String>)> {
        c.env
            .iter()
            .flatten()
            .map(|e| (e.name.clone(), e.value.clone()))
            .collect()
    };
    let off = names(&sidecar_container(&cfg, "t", None, &cfg.resources));
    assert!(off.iter().all(|(n, _)| !n.starts_with("OTEL_")), "{off:?}");
    cfg.tracing = Some(SidecarTracing {
        endpoint: "http://collector.obs:4318".into(),
        sample_ratio: "0.25".into(),
    });
    let on = names(&sidecar_container(&cfg, "t", None, &cfg.resources));
    let get = |name: &str| {
        on.iter()
            .find(|(n, _)| n == name)
            .and_then(|(_, v)| v.clone())
    };
    assert_eq!(
        get("OTEL_EXPORTER_OTLP_ENDPOINT").as_deref(),
        Some("http://collector.obs:4318")
    );
    assert_eq!(
        get("OTEL_TRACES_SAMPLER").as_deref(),
        Some("parentbased_traceidratio")
    );
    assert_eq!(get("OTEL_TRACES_SAMPLER_ARG").as_deref(), Some("0.25"));
    let resource = get("OTEL_RESOURCE_ATTRIBUTES").unwrap();
    assert!(resource.contains("k8s.pod.name=$(POD_NAME)"), "{resource}");
    assert!(
        resource.contains("k8s.namespace.name=$(POD_NAMESPACE)"),
        "{resource}"
    );
    // `$(VAR)` expands only variables defined earlier in the list.
    let position = |name: &str| on.iter().position(|(n, _)| n == name).unwrap();
    assert!(position("POD_NAME") < position("OTEL_RESOURCE_ATTRIBUTES"));
    assert!(position("POD_NAMESPACE") < position("OTEL_RESOURCE_ATTRIBUTES"));
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
        // The API server's Go types drop `readOnly: false` (omitempty); found
        // by tests/k8s against a real kube-apiserver.
        for mount in sidecar["volumeMounts"].as_array_mut().unwrap() {
            if mount["readOnly"] == json!(false) {
                mount.as_object_mut().unwrap().remove("readOnly");
            }
        }
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
    p["spec"]["initContainers"] =
        json!([{"name": "init", "volumeMounts": [{"name": "toolgate-bundle", "mountPath": "/b"}]}]);
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
    later["spec"]["containers"].as_array_mut().unwrap().push(
        json!({"name": "late", "volumeMounts": [{"name": "toolgate-trust", "mountPath": "/t"}]}),
    );
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

#[test]
fn a_sidecar_is_told_of_the_pooler_and_the_relay_only_when_configured() {
    let mut cfg = config(SidecarMode::Native);
    let env_of = |cfg: &InjectConfig| -> Vec<(String, Option<String>)> {
        sidecar_container(cfg, "t", None, &cfg.resources)
            .env
            .unwrap_or_default()
            .into_iter()
            .map(|e| (e.name, e.value))
            .collect()
    };
    let names = [
        toolgate_contract::env::DATABASE_POOLER,
        toolgate_contract::env::WAKEUPS_URL,
    ];
    let plain = env_of(&cfg);
    assert!(
        plain.iter().all(|(n, _)| !names.contains(&n.as_str())),
        "{plain:?}"
    );
    cfg.transaction_pooler = true;
    cfg.wakeups_url = Some("http://toolgate-wakeups.toolgate:8790".into());
    let pooled = env_of(&cfg);
    let get = |name: &str| {
        pooled
            .iter()
            .find(|(n, _)| n == name)
            .and_then(|(_, v)| v.clone())
    };
    assert_eq!(get(names[0]).as_deref(), Some("transaction"));
    assert_eq!(
        get(names[1]).as_deref(),
        Some("http://toolgate-wakeups.toolgate:8790")
    );
}
