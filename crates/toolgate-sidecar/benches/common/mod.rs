//! What the sidecar benches share: a sidecar started in-process on a
//! signed bundle, and calls one at a time over loopback HTTP.
#![allow(dead_code)]

use std::time::{Duration, Instant};

use jiff::{SignedDuration, Timestamp};
use serde_json::Value;
use toolgate_bundle::{BundleDocument, BundleInput, ProfileRef, SigningKey};
use toolgate_sidecar::{Sidecar, SidecarConfig};

/// A sidecar on `url` enforcing `spec` (YAML of a PolicyProfile spec),
/// shadowing `candidate` when given.
pub async fn start(
    dir: &std::path::Path,
    spec: &str,
    candidate: Option<&str>,
    url: &str,
    name: &str,
) -> Sidecar {
    let key = SigningKey::from_seed(&[2; 32]);
    let mut document = BundleDocument::new(BundleInput {
        profile: ProfileRef {
            name: name.into(),
            namespace: Some(format!("bench-{}", uuid::Uuid::now_v7().simple())),
        },
        spec: toolgate_policy::load::from_str(spec).unwrap(),
        grants: vec![],
        sequence: 1,
        issued_at: Timestamp::now(),
        expires_at: Timestamp::now() + SignedDuration::from_hours(1),
    })
    .unwrap();
    if let Some(candidate) = candidate {
        let spec = toolgate_policy::load::from_str(candidate).unwrap();
        document = document.with_candidate("candidate", spec).unwrap();
    }
    let (_, bytes) = toolgate_bundle::sign(document, &key).unwrap();
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("bundle.json"), bytes).unwrap();
    std::fs::write(
        dir.join("trust.pem"),
        key.public_key().to_spki_pem().unwrap(),
    )
    .unwrap();
    let mut config = SidecarConfig::new(
        dir.join("bundle.json"),
        dir.join("trust.pem"),
        url.to_owned(),
    );
    config.listen = "127.0.0.1:0".parse().unwrap();
    config.workspace_base = dir.join("ws");
    config.tenant = format!("bench-{name}");
    Sidecar::start(config).await.unwrap()
}

pub async fn call(client: &reqwest::Client, url: &str, body: &Value) -> bool {
    client
        .post(url)
        .json(body)
        .send()
        .await
        .is_ok_and(|r| r.status().is_success())
}

/// Calls of `body` one at a time for `secs`: (p50, p99, calls).
pub async fn sequential(
    client: &reqwest::Client,
    url: &str,
    body: &Value,
    secs: u64,
) -> (Duration, Duration, usize) {
    let start = Instant::now();
    let mut lat = Vec::new();
    while start.elapsed() < Duration::from_secs(secs) {
        let t = Instant::now();
        if call(client, url, body).await {
            lat.push(t.elapsed());
        }
    }
    lat.sort();
    let at = |p: f64| lat[((lat.len() as f64 - 1.0) * p).round() as usize];
    (at(0.5), at(0.99), lat.len())
}

pub fn us(d: Duration) -> String {
    format!("{:.0} µs", d.as_secs_f64() * 1e6)
}
