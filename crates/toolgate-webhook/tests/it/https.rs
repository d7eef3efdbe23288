//! The webhooks over real HTTPS on loopback, with realistic AdmissionReview
//! fixtures: the returned patch is applied to the original pod with the
//! `json-patch` crate and the resulting pod is checked as Kubernetes would
//! see it.

use std::time::Duration;

use crate::common::{
    Client, TestServer, fixture, fixture_json, inject_config, native_server, review, write_pair,
};
use base64::Engine as _;
use serde_json::{Value, json};
use toolgate_webhook::SidecarMode;
use toolgate_webhook::tls::ReloadingCert;

const SIDECAR: &str = "toolgate-sidecar";
const URL: &str = "http://127.0.0.1:15031";

/// Applies the response's patch (if any) to the request's pod.
fn patched(review: &Value, response: &Value) -> Value {
    let mut pod = review["request"]["object"].clone();
    if let Some(patch) = response.get("patch") {
        assert_eq!(response["patchType"], "JSONPatch");
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(patch.as_str().unwrap())
            .unwrap();
        let patch: json_patch::Patch = serde_json::from_slice(&bytes).unwrap();
        json_patch::patch(&mut pod, &patch).unwrap_or_else(|e| panic!("patch does not apply: {e}"));
    }
    pod
}

fn names(list: &Value) -> Vec<&str> {
    list.as_array()
        .map(|items| items.iter().map(|c| c["name"].as_str().unwrap()).collect())
        .unwrap_or_default()
}

fn env_value<'a>(container: &'a Value, name: &str) -> Vec<&'a Value> {
    container["env"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["name"] == name)
        .collect()
}

/// Checks invariants every injected pod must satisfy, returns the sidecar.
fn assert_injected(pod: &Value, profile: &str, tenant: &str, native: bool) -> Value {
    let spec = &pod["spec"];
    let all: Vec<&Value> = spec["initContainers"]
        .as_array()
        .into_iter()
        .chain(spec["containers"].as_array())
        .flatten()
        .collect();
    let sidecars: Vec<&&Value> = all.iter().filter(|c| c["name"] == SIDECAR).collect();
    assert_eq!(sidecars.len(), 1, "exactly one sidecar: {pod:#}");
    let sidecar = (*sidecars[0]).clone();
    if native {
        assert_eq!(
            spec["initContainers"][0]["name"], SIDECAR,
            "native sidecar is the first init container"
        );
        assert_eq!(sidecar["restartPolicy"], "Always");
        assert!(
            sidecar.get("startupProbe").is_some(),
            "native sidecar gates start-up"
        );
    } else {
        assert!(!names(&spec["initContainers"]).contains(&SIDECAR));
        assert!(sidecar.get("restartPolicy").is_none());
    }
    for container in all.iter().filter(|c| c["name"] != SIDECAR) {
        let url = env_value(container, "TOOLGATE_URL");
        assert_eq!(url.len(), 1, "TOOLGATE_URL once in {}", container["name"]);
        assert_eq!(url[0], &json!({"name": "TOOLGATE_URL", "value": URL}));
        let mounts = names(&container["volumeMounts"]);
        assert!(
            !mounts.iter().any(|m| m.starts_with("toolgate-")),
            "apps get no toolgate volume"
        );
    }
    assert_eq!(sidecar["image"], "ghcr.io/example/toolgate:0.1.0");
    assert_eq!(
        sidecar["args"],
        json!([
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
            "/var/lib/toolgate/workspaces"
        ])
    );
    let env = |name: &str| env_value(&sidecar, name)[0].clone();
    assert_eq!(
        env("TOOLGATE_DATABASE_URL")["valueFrom"]["secretKeyRef"],
        json!({"name": "toolgate-database", "key": "url", "optional": false})
    );
    assert_eq!(env("TOOLGATE_TENANT")["value"], tenant);
    assert_eq!(
        env("POD_NAME")["valueFrom"]["fieldRef"]["fieldPath"],
        "metadata.name"
    );
    assert_eq!(
        env("POD_NAMESPACE")["valueFrom"]["fieldRef"]["fieldPath"],
        "metadata.namespace"
    );
    let sc = &sidecar["securityContext"];
    assert_eq!(sc["runAsNonRoot"], true);
    assert_eq!(sc["runAsUser"], 65532);
    assert_eq!(sc["readOnlyRootFilesystem"], true);
    assert_eq!(sc["allowPrivilegeEscalation"], false);
    assert_eq!(sc["capabilities"]["drop"], json!(["ALL"]));
    assert_eq!(sc["seccompProfile"]["type"], "RuntimeDefault");
    assert!(sidecar["resources"]["requests"].is_object(), "{sidecar}");
    assert!(sidecar["resources"]["limits"].is_object(), "{sidecar}");
    assert_eq!(
        sidecar["readinessProbe"]["httpGet"],
        json!({"path": "/readyz", "port": 15032, "scheme": "HTTP"})
    );
    let mounts: Vec<(&str, &str)> = sidecar["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["name"].as_str().unwrap(),
                m["mountPath"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        mounts,
        [
            ("toolgate-bundle", "/etc/toolgate/bundle"),
            ("toolgate-trust", "/etc/toolgate/trust"),
            ("toolgate-workspace", "/var/lib/toolgate/workspaces")
        ]
    );
    let volumes = spec["volumes"].as_array().unwrap();
    let volume = |name: &str| {
        let found: Vec<&Value> = volumes.iter().filter(|v| v["name"] == name).collect();
        assert_eq!(found.len(), 1, "volume {name} once");
        found[0].clone()
    };
    assert_eq!(
        volume("toolgate-bundle")["configMap"]["name"],
        format!("toolgate-bundle-{profile}")
    );
    assert_eq!(
        volume("toolgate-trust")["configMap"]["name"],
        "toolgate-trust"
    );
    assert_eq!(volume("toolgate-workspace")["emptyDir"], json!({}));
    let annotations = &pod["metadata"]["annotations"];
    assert_eq!(annotations["toolgate.dev/injected"], "true");
    assert_eq!(annotations["toolgate.dev/profile-injected"], profile);
    let typed: k8s_openapi::api::core::v1::Pod = serde_json::from_value(pod.clone())
        .expect("injected pod deserializes as a k8s-openapi Pod");
    assert!(typed.spec.is_some());
    sidecar
}

/// Re-submits the patched pod (as on reinvocation) and expects no patch.
async fn assert_idempotent(client: &mut Client, original: &Value, pod: &Value) {
    let mut again = original.clone();
    again["request"]["uid"] = json!("reinvocation-uid");
    again["request"]["object"] = pod.clone();
    let response = review(client, "/mutate-pods", &again).await;
    assert_eq!(response["allowed"], true);
    assert!(
        response.get("patch").is_none(),
        "reinvocation must not patch again: {response}"
    );
}

/// `kubernetes-validate --strict` on the pod. Required in CI (CI=true);
/// skipped with a note elsewhere when the tool is not installed.
fn kubernetes_validate(pod: &Value) {
    let mut pod = pod.clone();
    // The API server assigns the name from generateName after admission;
    // the validator needs one to report on.
    if pod["metadata"].get("name").is_none() {
        let generated = format!(
            "{}x7k2p",
            pod["metadata"]["generateName"].as_str().unwrap_or("pod-")
        );
        pod["metadata"]["name"] = json!(generated);
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("pod.json");
    std::fs::write(&file, serde_json::to_vec_pretty(&pod).unwrap()).unwrap();
    let output = std::process::Command::new("kubernetes-validate")
        .args(["--strict", "-k", "1.33.0"])
        .arg(&file)
        .output();
    match output {
        Ok(out) => assert!(
            out.status.success(),
            "kubernetes-validate --strict rejected the injected pod:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
        Err(e) if std::env::var("CI").as_deref() == Ok("true") => {
            panic!("kubernetes-validate is required in CI (pip install kubernetes-validate): {e}")
        }
        Err(e) => eprintln!("SKIP kubernetes-validate not runnable here: {e}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deployment_pod_with_generate_name_gets_a_native_sidecar_once() {
    let server = native_server().await;
    let mut client = server.client().await;
    let original = fixture_json("pod-deployment-generatename.json");
    assert!(
        original["request"]["object"]["metadata"]
            .get("name")
            .is_none()
    );
    assert!(
        original["request"]["object"]["metadata"]
            .get("namespace")
            .is_none()
    );

    let response = review(&mut client, "/mutate-pods", &original).await;
    assert_eq!(response["allowed"], true);
    let pod = patched(&original, &response);
    // Namespace comes from request.namespace; profile from the annotation.
    assert_injected(&pod, "research", "agents", true);
    assert_eq!(names(&pod["spec"]["initContainers"]), [SIDECAR]);
    assert_eq!(names(&pod["spec"]["containers"]), ["agent"]);
    assert_eq!(
        pod["spec"]["volumes"][0]["name"], "kube-api-access-x7k2p",
        "existing volumes kept first"
    );
    assert_eq!(
        env_value(&pod["spec"]["containers"][0], "LOG_LEVEL").len(),
        1,
        "existing env kept"
    );
    assert_eq!(
        pod["metadata"]["annotations"]["toolgate.dev/profile"],
        "research"
    );

    assert_idempotent(&mut client, &original, &pod).await;
    kubernetes_validate(&pod);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_container_pod_gets_the_url_everywhere_and_sidecar_first() {
    let server = native_server().await;
    let mut client = server.client().await;
    let original = fixture_json("pod-multi-container.json");
    assert!(
        original["request"]["object"]["metadata"]
            .get("annotations")
            .is_none()
    );

    let response = review(&mut client, "/mutate-pods", &original).await;
    let pod = patched(&original, &response);
    // No annotation: the configured default profile applies.
    assert_injected(&pod, "baseline", "team-a", true);
    assert_eq!(
        names(&pod["spec"]["initContainers"]),
        [SIDECAR, "fetch-model-config", "migrate"]
    );
    assert_eq!(
        names(&pod["spec"]["containers"]),
        ["coder", "log-shipper", "metrics"]
    );
    let coder = &pod["spec"]["containers"][0];
    assert_eq!(env_value(coder, "OPENAI_BASE_URL").len(), 1);
    assert_eq!(
        coder["env"].as_array().unwrap().len(),
        2,
        "stale TOOLGATE_URL replaced in place"
    );
    assert_eq!(
        names(&pod["spec"]["volumes"]),
        [
            "cfg",
            "toolgate-bundle",
            "toolgate-trust",
            "toolgate-workspace"
        ]
    );
    assert_idempotent(&mut client, &original, &pod).await;
    kubernetes_validate(&pod);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn container_mode_appends_a_regular_container_and_tops_up_on_reinvocation() {
    let server = TestServer::start(
        inject_config(SidecarMode::Container, None),
        Duration::from_secs(5),
    )
    .await;
    let mut client = server.client().await;
    let original = fixture_json("pod-deployment-generatename.json");
    let response = review(&mut client, "/mutate-pods", &original).await;
    let pod = patched(&original, &response);
    assert_injected(&pod, "research", "agents", false);
    assert!(pod["spec"].get("initContainers").is_none());
    assert_eq!(names(&pod["spec"]["containers"]), ["agent", SIDECAR]);
    assert_idempotent(&mut client, &original, &pod).await;
    kubernetes_validate(&pod);

    // A later webhook added a container; on reinvocation only it gets the URL.
    let mut later = pod.clone();
    later["spec"]["containers"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "late", "image": "late:1"}));
    let mut again = original.clone();
    again["request"]["object"] = later;
    let response = review(&mut client, "/mutate-pods", &again).await;
    let topped = patched(&again, &response);
    assert_injected(&topped, "research", "agents", false);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn injected_opted_out_and_profileless_pods_are_admitted_unchanged() {
    let server = TestServer::start(
        inject_config(SidecarMode::Native, None),
        Duration::from_secs(5),
    )
    .await;
    let mut client = server.client().await;
    for name in ["pod-already-injected.json", "pod-opted-out.json"] {
        let response = review(&mut client, "/mutate-pods", &fixture_json(name)).await;
        assert_eq!(response["allowed"], true, "{name}");
        assert!(response.get("patch").is_none(), "{name}: {response}");
        assert!(response.get("warnings").is_none(), "{name}: {response}");
    }
    let response = review(
        &mut client,
        "/mutate-pods",
        &fixture_json("pod-no-profile.json"),
    )
    .await;
    assert_eq!(response["allowed"], true);
    assert!(response.get("patch").is_none());
    let warning = response["warnings"][0].as_str().unwrap();
    assert!(
        warning.contains("toolgate.dev/profile") && warning.contains("NOT injected"),
        "{warning}"
    );

    let mut bad = fixture_json("pod-deployment-generatename.json");
    bad["request"]["object"]["metadata"]["annotations"]["toolgate.dev/profile"] =
        json!("Research_Profile");
    let response = review(&mut client, "/mutate-pods", &bad).await;
    assert_eq!(response["allowed"], false);
    assert_eq!(response["status"]["reason"], "injection_refused");
    let message = response["status"]["message"].as_str().unwrap();
    assert!(
        message.contains("metadata.annotations[toolgate.dev/profile]"),
        "{message}"
    );
    server.stop().await;
}

/// Expects a 403 denial with `reason`; returns its message.
async fn denied(client: &mut Client, path: &str, body: &Value, reason: &str) -> String {
    let response = review(client, path, body).await;
    assert_eq!(response["allowed"], false, "{response}");
    assert!(response.get("patch").is_none(), "{response}");
    assert_eq!(response["status"]["status"], "Failure", "{response}");
    assert_eq!(response["status"]["code"], 403, "{response}");
    assert_eq!(response["status"]["reason"], reason, "{response}");
    let message = response["status"]["message"].as_str().unwrap().to_owned();
    assert!(message.ends_with(&format!("[{reason}]")), "{message}");
    message
}

/// Expects admission; returns the pod as patched.
async fn admitted(client: &mut Client, path: &str, body: &Value) -> Value {
    let response = review(client, path, body).await;
    assert_eq!(response["allowed"], true, "{response}");
    patched(body, &response)
}

/// A copy of `review` with its pod changed by `change`.
fn with_pod(review: &Value, change: impl FnOnce(&mut Value)) -> Value {
    let mut review = review.clone();
    change(&mut review["request"]["object"]);
    review
}

fn push(list: &mut Value, item: Value) {
    if list.is_null() {
        *list = json!([]);
    }
    list.as_array_mut().unwrap().push(item);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_annotation_naming_another_namespace_is_refused() {
    let server = native_server().await;
    let mut client = server.client().await;
    let original = fixture_json("pod-deployment-generatename.json");
    assert_eq!(original["request"]["namespace"], "agents");

    // The attack: read another team's approvals and intents by naming it.
    let spoofed = with_pod(&original, |pod| {
        pod["metadata"]["annotations"]["toolgate.dev/tenant"] = json!("victim-team")
    });
    let message = denied(&mut client, "/mutate-pods", &spoofed, "injection_refused").await;
    assert!(
        message.starts_with("metadata.annotations[toolgate.dev/tenant]: ")
            && message.contains("`victim-team`")
            && message.contains("`agents`"),
        "{message}"
    );

    // Naming its own namespace is harmless.
    let same = with_pod(&original, |pod| {
        pod["metadata"]["annotations"]["toolgate.dev/tenant"] = json!("agents")
    });
    let pod = admitted(&mut client, "/mutate-pods", &same).await;
    assert_injected(&pod, "research", "agents", true);

    // The pod cannot claim another namespace than the request's …
    let elsewhere = with_pod(&original, |pod| {
        pod["metadata"]["namespace"] = json!("victim-team")
    });
    let message = denied(&mut client, "/mutate-pods", &elsewhere, "injection_refused").await;
    assert!(
        message.starts_with("metadata.namespace: ") && message.contains("`victim-team`"),
        "{message}"
    );
    // … and is only the fallback when the request names none.
    let mut fallback = with_pod(&original, |pod| {
        pod["metadata"]["namespace"] = json!("agents")
    });
    fallback["request"]
        .as_object_mut()
        .unwrap()
        .remove("namespace");
    let pod = admitted(&mut client, "/mutate-pods", &fallback).await;
    assert_injected(&pod, "research", "agents", true);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_upstreams_reach_the_sidecar_and_bad_ones_are_refused() {
    let server = native_server().await;
    let mut client = server.client().await;
    let original = fixture_json("pod-deployment-generatename.json");
    let upstreams = "fs=http://mcp-fs.tools.svc:8080/mcp,github=https://mcp.github.example/mcp";
    let annotated = with_pod(&original, |pod| {
        pod["metadata"]["annotations"]["toolgate.dev/mcp-upstreams"] = json!(upstreams)
    });
    let pod = admitted(&mut client, "/mutate-pods", &annotated).await;
    let sidecar = assert_injected(&pod, "research", "agents", true);
    assert_eq!(
        env_value(&sidecar, "TOOLGATE_MCP_UPSTREAMS"),
        vec![&json!({"name": "TOOLGATE_MCP_UPSTREAMS", "value": upstreams})]
    );
    // Reinvocation recognises its own injection, upstreams included.
    let mut again = annotated.clone();
    again["request"]["object"] = pod.clone();
    let response = review(&mut client, "/mutate-pods", &again).await;
    assert_eq!(response["allowed"], true, "{response}");
    // Without the annotation there is no such variable.
    let plain = admitted(&mut client, "/mutate-pods", &original).await;
    assert!(
        env_value(
            &assert_injected(&plain, "research", "agents", true),
            "TOOLGATE_MCP_UPSTREAMS"
        )
        .is_empty()
    );
    for bad in [
        "fs",
        "fs=ftp://x/mcp",
        "f s=http://x/mcp",
        "fs=http://a,=http://b",
    ] {
        let refused = with_pod(&original, |pod| {
            pod["metadata"]["annotations"]["toolgate.dev/mcp-upstreams"] = json!(bad)
        });
        let message = denied(&mut client, "/mutate-pods", &refused, "injection_refused").await;
        assert!(
            message.starts_with("metadata.annotations[toolgate.dev/mcp-upstreams]: "),
            "{message}"
        );
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_toolgate_sidecar_the_webhook_did_not_inject_is_refused() {
    for mode in [SidecarMode::Native, SidecarMode::Container] {
        let server = TestServer::start(inject_config(mode, None), Duration::from_secs(5)).await;
        let mut client = server.client().await;
        let original = fixture_json("pod-deployment-generatename.json");
        let fake = json!({
            "name": SIDECAR,
            "image": "registry.example.com/mallory/allow-all:1",
            "restartPolicy": "Always"
        });

        // An allow-all fake under the sidecar's name, as an init or a regular container.
        for group in ["initContainers", "containers"] {
            let attack = with_pod(&original, |pod| {
                push(&mut pod["spec"][group], fake.clone());
                pod["spec"]["containers"][0]["env"] =
                    json!([{"name": "TOOLGATE_URL", "value": URL}]);
            });
            let message = denied(&mut client, "/mutate-pods", &attack, "injection_refused").await;
            assert!(
                message.starts_with(&format!("spec.{group}["))
                    && message.contains("`toolgate-sidecar` is reserved"),
                "{mode:?} {group}: {message}"
            );
        }

        // The webhook's own injection, seen again on reinvocation, is accepted …
        let response = review(&mut client, "/mutate-pods", &original).await;
        let injected = patched(&original, &response);
        assert_idempotent(&mut client, &original, &injected).await;
        let (group, index) = match mode {
            SidecarMode::Native => ("initContainers", 0),
            SidecarMode::Container => ("containers", 1),
        };
        // … but not a copy made for another tenant,
        let mut other_tenant = original.clone();
        other_tenant["request"]["object"] = injected.clone();
        other_tenant["request"]["object"]["spec"][group][index]["env"][1]["value"] =
            json!("victim-team");
        let message = denied(
            &mut client,
            "/mutate-pods",
            &other_tenant,
            "injection_refused",
        )
        .await;
        assert!(message.contains("differs in: env"), "{message}");
        // nor one whose image was swapped,
        let mut swapped = original.clone();
        swapped["request"]["object"] = injected.clone();
        swapped["request"]["object"]["spec"][group][index]["image"] =
            json!("registry.example.com/mallory/allow-all:1");
        let message = denied(&mut client, "/mutate-pods", &swapped, "injection_refused").await;
        assert!(message.contains("differs in: image"), "{message}");
        // nor an exact copy without the webhook's annotations.
        let mut unmarked = original.clone();
        unmarked["request"]["object"] = injected.clone();
        unmarked["request"]["object"]["metadata"]["annotations"]
            .as_object_mut()
            .unwrap()
            .remove("toolgate.dev/injected");
        let message = denied(&mut client, "/mutate-pods", &unmarked, "injection_refused").await;
        assert!(message.contains("toolgate.dev/injected"), "{message}");
        server.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_shapes_that_defeat_isolation_are_refused() {
    let server = native_server().await;
    let mut client = server.client().await;
    let original = fixture_json("pod-deployment-generatename.json");
    type Shape = fn(&mut Value);
    let shapes: [(&str, Shape); 7] = [
        ("spec.hostNetwork", |pod| {
            pod["spec"]["hostNetwork"] = json!(true)
        }),
        ("spec.hostPID", |pod| pod["spec"]["hostPID"] = json!(true)),
        ("spec.shareProcessNamespace", |pod| {
            pod["spec"]["shareProcessNamespace"] = json!(true)
        }),
        // Mounts a volume the pod does not have yet: the injection adds it.
        ("spec.containers[0].volumeMounts[1].name", |pod| {
            push(
                &mut pod["spec"]["containers"][0]["volumeMounts"],
                json!({"name": "toolgate-workspace", "mountPath": "/workspaces"}),
            )
        }),
        ("spec.initContainers[0].volumeMounts[0].name", |pod| {
            push(
                &mut pod["spec"]["initContainers"],
                json!({"name": "peek", "image": "busybox:1.36",
                       "volumeMounts": [{"name": "toolgate-bundle", "mountPath": "/b"}]}),
            )
        }),
        // Its own volume under the sidecar's volume name.
        ("spec.volumes[1].name", |pod| {
            push(
                &mut pod["spec"]["volumes"],
                json!({"name": "toolgate-trust", "configMap": {"name": "mallory-keys"}}),
            )
        }),
        ("spec.ephemeralContainers[0].volumeMounts[0].name", |pod| {
            pod["spec"]["ephemeralContainers"] = json!([{"name": "debug", "image": "busybox:1.36",
                "volumeMounts": [{"name": "toolgate-workspace", "mountPath": "/w"}]}])
        }),
    ];
    for (field, shape) in shapes {
        let attack = with_pod(&original, shape);
        let message = denied(&mut client, "/mutate-pods", &attack, "injection_refused").await;
        assert!(message.starts_with(&format!("{field}: ")), "{message}");
    }
    // A pod that opts out gets no sidecar and is not judged.
    let opted_out = with_pod(&original, |pod| {
        pod["metadata"]["annotations"]["toolgate.dev/inject"] = json!("false");
        pod["spec"]["hostNetwork"] = json!(true);
    });
    let response = review(&mut client, "/mutate-pods", &opted_out).await;
    assert_eq!(response["allowed"], true);
    assert!(response.get("patch").is_none());
    server.stop().await;
}

/// An UPDATE review as the API server sends it for `user`, of the main
/// resource or of a subresource.
fn update_review(old: &Value, new: &Value, sub_resource: Option<&str>) -> Value {
    let mut request = json!({
        "uid": "5e6f7a8b-0000-4000-8000-00000000a001",
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
        "requestResource": {"group": "", "version": "v1", "resource": "pods"},
        "name": old["metadata"]["name"],
        "namespace": "agents",
        "operation": "UPDATE",
        "userInfo": {"username": "mallory@example.com", "groups": ["agents-devs", "system:authenticated"]},
        "object": new,
        "oldObject": old,
        "dryRun": false,
        "options": {"kind": "UpdateOptions", "apiVersion": "meta.k8s.io/v1"}
    });
    if let Some(sub) = sub_resource {
        request["subResource"] = json!(sub);
        request["requestSubResource"] = json!(sub);
    }
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn updates_cannot_change_remove_or_reach_into_the_sidecar() {
    let server = native_server().await;
    let mut client = server.client().await;
    // The stored pod: injected (as the reinvocation fixture shows it), scheduled, running.
    let mut stored = fixture_json("pod-already-injected.json")["request"]["object"].clone();
    stored["metadata"]["name"] = json!("triage-7c9f8d6b4-x2x9q");
    stored["metadata"]["uid"] = json!("0d1e2f3a-4b5c-4d6e-8f70-81a2b3c4d5e6");
    stored["metadata"]["resourceVersion"] = json!("48213");
    stored["metadata"]["creationTimestamp"] = json!("2026-05-01T10:00:00Z");
    stored["spec"]["nodeName"] = json!("node-a");
    stored["status"] = json!({"phase": "Running", "podIP": "10.0.3.17"});
    let update = |change: &dyn Fn(&mut Value), sub: Option<&str>| {
        let mut new = stored.clone();
        change(&mut new);
        update_review(&stored, &new, sub)
    };

    // Swap the sidecar for an allow-all fake.
    let message = denied(
        &mut client,
        "/validate-pods",
        &update(
            &|pod| {
                pod["spec"]["initContainers"][0]["image"] =
                    json!("registry.example.com/mallory/allow-all:1")
            },
            None,
        ),
        "sidecar_immutable",
    )
    .await;
    assert!(
        message.starts_with("spec.initContainers[0].image: ")
            && message.contains(
                "`ghcr.io/example/toolgate:0.1.0` → `registry.example.com/mallory/allow-all:1`"
            ),
        "{message}"
    );
    // Its env (the tenant), its removal, its volumes.
    type Change = fn(&mut Value);
    let changes: [(&str, Change); 3] = [
        ("spec.initContainers[0].env: ", |pod| {
            pod["spec"]["initContainers"][0]["env"][1]["value"] = json!("victim-team")
        }),
        ("spec.initContainers: ", |pod| {
            pod["spec"]["initContainers"] = json!([])
        }),
        (
            "spec.volumes[3]: ",
            |pod| {
                pod["spec"]["volumes"][3] =
                    json!({"name": "toolgate-workspace", "hostPath": {"path": "/var/lib/kubelet"}})
            },
        ),
    ];
    for (prefix, change) in changes {
        let message = denied(
            &mut client,
            "/validate-pods",
            &update(&change, None),
            "sidecar_immutable",
        )
        .await;
        assert!(message.starts_with(prefix), "{message}");
    }
    // An in-place resize (pods/resize) of the sidecar, but not of the app.
    let message = denied(
        &mut client,
        "/validate-pods",
        &update(
            &|pod| pod["spec"]["initContainers"][0]["resources"]["limits"]["memory"] = json!("4Mi"),
            Some("resize"),
        ),
        "sidecar_immutable",
    )
    .await;
    assert!(
        message.starts_with("spec.initContainers[0].resources: "),
        "{message}"
    );
    let response = review(
        &mut client,
        "/validate-pods",
        &update(
            &|pod| pod["spec"]["containers"][0]["resources"] = json!({"limits": {"memory": "1Gi"}}),
            Some("resize"),
        ),
    )
    .await;
    assert_eq!(response["allowed"], true, "{response}");
    // The app's image may change.
    let response = review(
        &mut client,
        "/validate-pods",
        &update(
            &|pod| pod["spec"]["containers"][0]["image"] = json!("registry.example.com/triage:2"),
            None,
        ),
    )
    .await;
    assert_eq!(response["allowed"], true, "{response}");

    // `kubectl debug`: an ephemeral container reaching the sidecar's workspace or processes …
    let debug = |container: Value| {
        let mut new = stored.clone();
        new["spec"]["ephemeralContainers"] = json!([container]);
        update_review(&stored, &new, Some("ephemeralcontainers"))
    };
    let message = denied(
        &mut client,
        "/validate-pods",
        &debug(
            json!({"name": "debugger-4kq2", "image": "busybox:1.36", "stdin": true, "tty": true,
                      "volumeMounts": [{"name": "toolgate-workspace", "mountPath": "/w"}],
                      "terminationMessagePolicy": "File", "imagePullPolicy": "IfNotPresent"}),
        ),
        "sidecar_immutable",
    )
    .await;
    assert!(
        message.starts_with("spec.ephemeralContainers[0].volumeMounts[0].name: ")
            && message.contains("toolgate-workspace"),
        "{message}"
    );
    for (container, prefix) in [
        (
            json!({"name": "debugger-9x1z", "image": "busybox:1.36", "targetContainerName": SIDECAR}),
            "spec.ephemeralContainers[0].targetContainerName: ",
        ),
        (
            json!({"name": SIDECAR, "image": "registry.example.com/mallory/allow-all:1"}),
            "spec.ephemeralContainers[0].name: ",
        ),
    ] {
        let message = denied(
            &mut client,
            "/validate-pods",
            &debug(container),
            "sidecar_immutable",
        )
        .await;
        assert!(message.starts_with(prefix), "{message}");
    }
    // … while a plain debug container next to the app is fine.
    let response = review(
        &mut client,
        "/validate-pods",
        &debug(
            json!({"name": "debugger-7hd3", "image": "busybox:1.36", "stdin": true, "tty": true,
                      "targetContainerName": "agent",
                      "terminationMessagePolicy": "File", "imagePullPolicy": "IfNotPresent"}),
        ),
    )
    .await;
    assert_eq!(response["allowed"], true, "{response}");

    // A pod that was never injected is not this webhook's business.
    let mut plain = fixture_json("pod-opted-out.json")["request"]["object"].clone();
    plain["metadata"]["name"] = json!("debug-shell-abcde");
    let mut changed = plain.clone();
    changed["spec"]["containers"][0]["image"] = json!("busybox:1.37");
    let response = review(
        &mut client,
        "/validate-pods",
        &update_review(&plain, &changed, None),
    )
    .await;
    assert_eq!(response["allowed"], true, "{response}");
    // Nor are other operations.
    let mut delete = update_review(&stored, &stored, None);
    delete["request"]["operation"] = json!("DELETE");
    delete["request"]["object"] = Value::Null;
    let response = review(&mut client, "/validate-pods", &delete).await;
    assert_eq!(response["allowed"], true, "{response}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_and_oversized_bodies_get_clean_answers() {
    let server = native_server().await;
    let mut client = server.client().await;

    // Not JSON at all: no uid to answer to, so an HTTP 400 with a typed body.
    let (status, body) = client
        .post("/mutate-pods", fixture("malformed-truncated.json"))
        .await;
    assert_eq!(status, 400);
    assert_eq!(body["error"]["code"], "malformed_review");
    assert!(
        body["error"]["message"].as_str().unwrap().contains("EOF"),
        "{body}"
    );

    // JSON of the wrong shape but with a readable uid: an AdmissionReview denial.
    for path in [
        "/mutate-pods",
        "/validate-pods",
        "/validate-policyprofiles",
        "/validate-approvals",
    ] {
        let (status, body) = client
            .post(path, fixture("malformed-wrong-shape.json"))
            .await;
        assert_eq!(status, 200, "{path}");
        assert_eq!(
            body["response"]["uid"],
            "1a2b3c4d-0000-4000-8000-000000000007"
        );
        assert_eq!(body["response"]["allowed"], false);
        assert_eq!(body["response"]["status"]["reason"], "malformed_review");
    }

    // Oversized: refused before decoding, and the server keeps serving.
    let mut big = fixture_json("pod-deployment-generatename.json");
    big["request"]["object"]["metadata"]["annotations"]["filler"] =
        json!("x".repeat(3 * 1024 * 1024));
    let (status, body) = client
        .post("/mutate-pods", serde_json::to_vec(&big).unwrap())
        .await;
    assert_eq!(status, 413);
    assert_eq!(body["error"]["code"], "body_too_large");

    let mut fresh = server.client().await;
    let (status, body) = fresh.request("GET", "/healthz", Vec::new()).await;
    assert_eq!(
        (status, body.as_slice()),
        (200, br#"{"status":"ok"}"#.as_slice())
    );
    let (status, _) = fresh.request("POST", "/mutate-pods", b"[]".to_vec()).await;
    assert_eq!(status, 400);
    let (status, _) = fresh.request("GET", "/nowhere", Vec::new()).await;
    assert_eq!(status, 404);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policy_profiles_are_validated_with_actionable_messages() {
    let server = native_server().await;
    let mut client = server.client().await;

    let bad = fixture_json("policyprofile-bad-glob.json");
    let response = review(&mut client, "/validate-policyprofiles", &bad).await;
    assert_eq!(response["allowed"], false);
    assert_eq!(response["status"]["reason"], "profile_invalid_glob");
    assert_eq!(response["status"]["code"], 422);
    let message = response["status"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("spec.rules.bash.allow[0]: invalid glob ``: empty glob"),
        "{message}"
    );
    assert!(message.ends_with("[profile_invalid_glob]"), "{message}");

    let good = fixture_json("policyprofile-good.json");
    let response = review(&mut client, "/validate-policyprofiles", &good).await;
    assert_eq!(response["allowed"], true, "{response}");

    // Strict: an unknown field is named with its path.
    let mut typo = good.clone();
    typo["request"]["object"]["spec"]["rules"]["bash"]["alow"] = json!(["ls"]);
    let response = review(&mut client, "/validate-policyprofiles", &typo).await;
    assert_eq!(response["status"]["reason"], "profile_unknown_field");
    assert!(
        response["status"]["message"]
            .as_str()
            .unwrap()
            .contains("spec.rules.bash: unknown field `alow`")
    );

    // Incomplete effects matrix.
    let mut incomplete = good.clone();
    incomplete["request"]["object"]["spec"]["effects"]
        .as_object_mut()
        .unwrap()
        .remove("read_file");
    let response = review(&mut client, "/validate-policyprofiles", &incomplete).await;
    assert_eq!(response["status"]["reason"], "profile_incomplete_effects");

    // Deleting a broken profile is always possible.
    let mut delete = bad.clone();
    delete["request"]["operation"] = json!("DELETE");
    delete["request"]["oldObject"] = delete["request"]["object"].take();
    let response = review(&mut client, "/validate-policyprofiles", &delete).await;
    assert_eq!(response["allowed"], true);
    server.stop().await;
}

async fn served_cert(server: &TestServer) -> Vec<u8> {
    server.client().await.peer_cert
}

async fn wait_for_cert(server: &TestServer, want: &[u8]) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while served_cert(server).await != want {
        assert!(
            tokio::time::Instant::now() < deadline,
            "new certificate not served in time"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotated_certificates_are_served_and_bad_pairs_are_ignored() {
    let server = TestServer::start(
        inject_config(SidecarMode::Native, None),
        Duration::from_millis(100),
    )
    .await;
    let mut kept = server.client().await;
    assert_eq!(kept.peer_cert, server.first.der);

    let second = server.pki.issue("toolgate-webhook-rotated", 2);
    write_pair(server.dir.path(), &second.cert_pem, &second.key_pem);
    wait_for_cert(&server, &second.der).await;
    let served = served_cert(&server).await;
    assert!(
        contains(&served, b"toolgate-webhook-rotated"),
        "subject CN of the new certificate"
    );
    assert!(!contains(&served, b"toolgate-webhook.toolgate.svc"));
    // A connection opened before the rotation keeps working.
    let (status, _) = kept.request("GET", "/healthz", Vec::new()).await;
    assert_eq!(status, 200);

    // A certificate with somebody else's key: rejected, old pair kept.
    let third = server.pki.issue("toolgate-webhook-mismatch", 3);
    let stranger = server.pki.issue("stranger", 4);
    write_pair(server.dir.path(), &third.cert_pem, &stranger.key_pem);
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(
        served_cert(&server).await,
        second.der,
        "mismatched pair must not replace the good one"
    );
    // Garbage: same.
    write_pair(
        server.dir.path(),
        "-----BEGIN CERTIFICATE-----\nnot base64\n",
        "junk",
    );
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(
        served_cert(&server).await,
        second.der,
        "garbage must not replace the good one"
    );

    // A good pair again is picked up.
    let fifth = server.pki.issue("toolgate-webhook-fifth", 5);
    write_pair(server.dir.path(), &fifth.cert_pem, &fifth.key_pem);
    wait_for_cert(&server, &fifth.der).await;
    server.stop().await;
}

#[test]
fn reload_reports_what_happened() {
    let pki = crate::common::Pki::new();
    let dir = tempfile::tempdir().unwrap();
    let first = pki.issue("one", 1);
    let (cert, key) = write_pair(dir.path(), &first.cert_pem, &first.key_pem);
    let certs = ReloadingCert::load(&cert, &key).unwrap();
    assert!(
        !certs.reload().unwrap(),
        "unchanged files are not a rotation"
    );
    let other = pki.issue("two", 2);
    write_pair(dir.path(), &first.cert_pem, &other.key_pem);
    let err = certs.reload().unwrap_err();
    assert_eq!(err.code(), "tls_config");
    assert!(
        !certs.reload().unwrap(),
        "the same bad pair is reported once"
    );
    assert_eq!(certs.current().cert[0].as_ref(), first.der.as_slice());
    write_pair(dir.path(), &other.cert_pem, &other.key_pem);
    assert!(certs.reload().unwrap());
    assert_eq!(certs.current().cert[0].as_ref(), other.der.as_slice());
    assert_eq!(
        ReloadingCert::load(dir.path().join("missing.crt"), &key)
            .unwrap_err()
            .code(),
        "tls_config"
    );
}

/// The value of the one sample line starting with `series ` in `text`.
fn sample(text: &str, series: &str) -> f64 {
    let values: Vec<f64> = text
        .lines()
        .filter_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .map(|v| v.parse().unwrap())
        .collect();
    assert_eq!(values.len(), 1, "{series} in\n{text}");
    values[0]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_answers_by_webhook_and_show_the_certificate_expiry() {
    let server = native_server().await;
    let before = server.metrics().await;
    let allowed_mutate =
        r#"toolgate_admission_requests_total{allowed="true",webhook="mutate-pods"}"#;
    let denied_mutate =
        r#"toolgate_admission_requests_total{allowed="false",webhook="mutate-pods"}"#;
    let errors = r#"toolgate_admission_requests_total{allowed="error",webhook="mutate-pods"}"#;
    for series in [allowed_mutate, denied_mutate, errors] {
        assert_eq!(
            sample(&before, series),
            0.0,
            "present at 0 before any request"
        );
    }

    let mut client = server.client().await;
    let original = fixture_json("pod-deployment-generatename.json");
    admitted(&mut client, "/mutate-pods", &original).await;
    let spoofed = with_pod(&original, |pod| {
        pod["metadata"]["annotations"]["toolgate.dev/tenant"] = json!("victim-team")
    });
    denied(&mut client, "/mutate-pods", &spoofed, "injection_refused").await;
    let (status, _) = client.post("/mutate-pods", b"not json".to_vec()).await;
    assert_eq!(status, 400);

    let after = server.metrics().await;
    assert_eq!(sample(&after, allowed_mutate), 1.0);
    assert_eq!(sample(&after, denied_mutate), 1.0);
    assert_eq!(sample(&after, errors), 1.0);
    assert_eq!(
        sample(
            &after,
            r#"toolgate_admission_duration_seconds_count{webhook="mutate-pods"}"#
        ),
        3.0
    );
    let not_after = toolgate_webhook::metrics::not_after(&server.first.der).unwrap();
    assert_eq!(
        sample(
            &after,
            "toolgate_webhook_certificate_expiry_timestamp_seconds"
        ),
        not_after as f64
    );
    assert!(not_after > 1_700_000_000, "{not_after}");
    assert!(after.contains(r#"toolgate_build_info{component="webhook",version=""#));
    assert!(after.contains("process_resident_memory_bytes "));
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sidecar_resources_follow_the_pod_annotations_and_bad_ones_are_refused() {
    let server = native_server().await;
    let mut client = server.client().await;
    let original = fixture_json("pod-deployment-generatename.json");
    let pod = admitted(&mut client, "/mutate-pods", &original).await;
    let sidecar = assert_injected(&pod, "research", "agents", true);
    assert_eq!(
        sidecar["resources"],
        json!({"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"cpu": "500m", "memory": "128Mi"}})
    );
    assert_eq!(sidecar["securityContext"]["runAsUser"], 65532);

    let annotated = with_pod(&original, |pod| {
        let a = &mut pod["metadata"]["annotations"];
        a["toolgate.dev/sidecar-cpu-request"] = json!("250m");
        a["toolgate.dev/sidecar-cpu-limit"] = json!("2000m");
        a["toolgate.dev/sidecar-memory-limit"] = json!("1024Mi");
    });
    let pod = admitted(&mut client, "/mutate-pods", &annotated).await;
    let sidecar = assert_injected(&pod, "research", "agents", true);
    // Written as the API server stores them, so a reinvocation matches.
    assert_eq!(
        sidecar["resources"],
        json!({"requests": {"cpu": "250m", "memory": "32Mi"}, "limits": {"cpu": "2", "memory": "1Gi"}})
    );
    assert_idempotent(&mut client, &annotated, &pod).await;

    for (key, value, why) in [
        (
            "toolgate.dev/sidecar-cpu-request",
            "half",
            "not a CPU quantity",
        ),
        (
            "toolgate.dev/sidecar-memory-limit",
            "1G",
            "not a memory quantity",
        ),
        (
            "toolgate.dev/sidecar-memory-request",
            "512Mi",
            "above its limit 128Mi",
        ),
    ] {
        let bad = with_pod(&original, |pod| {
            pod["metadata"]["annotations"][key] = json!(value)
        });
        let message = denied(&mut client, "/mutate-pods", &bad, "injection_refused").await;
        assert!(
            message.contains(why) && message.contains("metadata.annotations[toolgate.dev/sidecar-"),
            "{message}"
        );
    }
    server.stop().await;
}
