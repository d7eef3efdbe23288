//! Pod annotations that configure the injected sidecar (tenant, MCP
//! upstreams, resources) over real HTTPS: good values reach the sidecar,
//! bad ones are refused with a reason.

use crate::common::admission::{
    admitted, assert_idempotent, assert_injected, denied, env_value, with_pod,
};
use crate::common::{fixture_json, native_server, review};
use serde_json::json;

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
