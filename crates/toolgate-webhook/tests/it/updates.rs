//! UPDATE reviews of injected pods over real HTTPS: no update, of the pod
//! or of a subresource, changes, removes or reaches into the sidecar.

use crate::common::admission::{SIDECAR, denied};
use crate::common::{fixture_json, native_server, review};
use serde_json::{Value, json};

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
