//! Checks on the webhook's AdmissionReview answers: the pod a response's
//! patch makes, the invariants of an injected pod, denials and admissions,
//! and a copy of a review with its pod changed.

use base64::Engine as _;
use serde_json::{Value, json};

use super::{Client, review};

pub const SIDECAR: &str = "toolgate-sidecar";

pub const URL: &str = "http://127.0.0.1:15031";

/// Applies the response's patch (if any) to the request's pod.
pub fn patched(review: &Value, response: &Value) -> Value {
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

pub fn names(list: &Value) -> Vec<&str> {
    list.as_array()
        .map(|items| items.iter().map(|c| c["name"].as_str().unwrap()).collect())
        .unwrap_or_default()
}

pub fn env_value<'a>(container: &'a Value, name: &str) -> Vec<&'a Value> {
    container["env"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["name"] == name)
        .collect()
}

/// Checks invariants every injected pod must satisfy, returns the sidecar.
pub fn assert_injected(pod: &Value, profile: &str, tenant: &str, native: bool) -> Value {
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
pub async fn assert_idempotent(client: &mut Client, original: &Value, pod: &Value) {
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

/// Expects a 403 denial with `reason`; returns its message.
pub async fn denied(client: &mut Client, path: &str, body: &Value, reason: &str) -> String {
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
pub async fn admitted(client: &mut Client, path: &str, body: &Value) -> Value {
    let response = review(client, path, body).await;
    assert_eq!(response["allowed"], true, "{response}");
    patched(body, &response)
}

/// A copy of `review` with its pod changed by `change`.
pub fn with_pod(review: &Value, change: impl FnOnce(&mut Value)) -> Value {
    let mut review = review.clone();
    change(&mut review["request"]["object"]);
    review
}
