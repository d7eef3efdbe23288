//! Pods whose shape would defeat the sidecar's isolation are refused over
//! real HTTPS, as is a `toolgate-sidecar` container the webhook did not
//! inject.

use std::time::Duration;

use crate::common::admission::{SIDECAR, URL, assert_idempotent, denied, patched, with_pod};
use crate::common::{TestServer, fixture_json, inject_config, native_server, review};
use serde_json::{Value, json};
use toolgate_webhook::SidecarMode;

fn push(list: &mut Value, item: Value) {
    if list.is_null() {
        *list = json!([]);
    }
    list.as_array_mut().unwrap().push(item);
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
