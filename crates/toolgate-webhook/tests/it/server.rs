//! The webhook server itself over real HTTPS: clean answers to malformed
//! and oversized bodies, certificate rotation and reload, and metrics.

use std::time::Duration;

use crate::common::admission::{admitted, denied, with_pod};
use crate::common::{TestServer, fixture, fixture_json, inject_config, native_server, write_pair};
use serde_json::json;
use toolgate_webhook::SidecarMode;
use toolgate_webhook::tls::ReloadingCert;

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
