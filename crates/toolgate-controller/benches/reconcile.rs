//! Reconciling 1,000 PolicyProfiles.
//!
//! - `plan_and_sign/1000`: the pure path of one reconcile — compile, grant
//!   selection, policy version, bundle plan, build + Ed25519 sign, ConfigMap
//!   and status construction — for 1,000 distinct profiles (no I/O).
//! - `reconcile_mock/1000`: the whole `profile::reconcile` against a
//!   `tower-test` mock API server (answers immediately) and an in-memory
//!   SQLite store: 5 API round trips + 2 store calls per profile.
//! - `mock_round_trip/1000`: 1,000 bare GETs through the same mock, to
//!   subtract the mock's own cost from the figure above.
//!
//! Run: `cargo bench -p toolgate-controller --bench reconcile`.

use std::sync::Arc;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use http::{Request, Response};
use jiff::{SignedDuration, Timestamp};
use kube::client::Body;
use serde_json::{Value, json};
use toolgate_bundle::{BundleInput, ProfileRef, SigningKey};
use toolgate_controller::crd::PolicyProfile;
use toolgate_controller::metrics::Metrics;
use toolgate_controller::profile::{self, PublishedBundle};
use toolgate_controller::{Context, Settings};
use toolgate_policy::{CompiledPolicy, PolicySpec, PolicyVersion};

const N: usize = 1000;
const SAFE_CODING: &str = include_str!("../../../examples/profiles/safe-coding.yaml");

fn profiles() -> Vec<PolicyProfile> {
    let base: PolicyProfile = serde_yaml::from_str(SAFE_CODING).unwrap();
    (0..N)
        .map(|i| {
            let mut p = base.clone();
            p.metadata.name = Some(format!("profile-{i}"));
            p.metadata.uid = Some(format!("uid-{i}"));
            p.metadata.generation = Some(1);
            p.metadata.finalizers = Some(vec![profile::FINALIZER.into()]);
            p.spec
                .rules
                .get_mut("bash")
                .unwrap()
                .allow
                .push(format!("make target-{i}"));
            p
        })
        .collect()
}

fn plan_and_sign(p: &PolicyProfile, key: &SigningKey, now: Timestamp) {
    let name = p.metadata.name.clone().unwrap();
    let spec: PolicySpec = p.spec.clone().into();
    CompiledPolicy::compile(&name, &spec, &[]).unwrap();
    let (grants, _) = profile::active_grants(&[], &name, &[], now);
    let (grants, _) = profile::usable_grants(&name, &spec, grants);
    let version = PolicyVersion::compute(&name, &spec, &grants);
    let day = SignedDuration::from_hours(24);
    let profile::BundlePlan::Publish {
        sequence,
        issued_at,
        expires_at,
        ..
    } = profile::plan_bundle(None, None, &version.version, None, now, day)
    else {
        unreachable!()
    };
    let input = BundleInput {
        profile: ProfileRef {
            name: name.clone(),
            namespace: Some("agents".into()),
        },
        spec,
        grants,
        sequence,
        issued_at,
        expires_at,
    };
    let (doc, bytes) = toolgate_bundle::build(input, key).unwrap();
    let cm = profile::bundle_configmap(p, &doc, &bytes, &key.key_id()).unwrap();
    let published = PublishedBundle::from_document(&doc);
    let status = profile::ready_status(
        &Default::default(),
        &name,
        &profile::Published {
            bundle: &published,
            grants: 0,
            fleet: Default::default(),
            stale_pods: vec![],
            shadowing: None,
            warnings: vec![],
        },
        Some(1),
        now,
    );
    std::hint::black_box((cm, status));
}

/// Answers every request the reconciler makes, immediately.
fn responder(
    mut handle: tower_test::mock::Handle<Request<Body>, Response<Body>>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        while let Some((req, send)) = handle.next_request().await {
            let (parts, body) = req.into_parts();
            let bytes = body.collect_bytes().await.unwrap();
            let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            let path = parts.uri.path();
            let (status, out) = match parts.method.as_str() {
                "GET" if path.ends_with("/approvals") => (
                    200,
                    json!({"apiVersion": "v1", "kind": "List", "metadata": {}, "items": []}),
                ),
                "GET" if path.contains("/configmaps/toolgate-bundle-") => (
                    404,
                    json!({"kind": "Status", "apiVersion": "v1", "code": 404, "reason": "NotFound", "status": "Failure", "message": "nf"}),
                ),
                "GET" => (
                    200,
                    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "namespace": "agents"}}),
                ),
                "PATCH" if path.ends_with("/status") => (
                    200,
                    json!({"apiVersion": "toolgate.dev/v1alpha1", "kind": "PolicyProfile",
                           "metadata": {"name": "x", "namespace": "agents"}, "spec": {"mode": "denyAll"}, "status": body["status"]}),
                ),
                _ => (200, body),
            };
            send.send_response(
                Response::builder()
                    .status(status)
                    .body(Body::from(serde_json::to_vec(&out).unwrap()))
                    .unwrap(),
            );
        }
    })
}

fn bench(c: &mut Criterion) {
    let key = SigningKey::from_seed(&[9; 32]);
    let now: Timestamp = "2030-01-01T00:00:00Z".parse().unwrap();
    let all = profiles();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();

    let mut group = c.benchmark_group("profiles");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(10))
        .warm_up_time(Duration::from_secs(1));
    group.throughput(Throughput::Elements(N as u64));

    group.bench_function("plan_and_sign/1000", |b| {
        b.iter(|| {
            for p in &all {
                plan_and_sign(p, &key, now);
            }
        })
    });

    let (ctx, _server) = rt.block_on(async {
        let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let client = kube::Client::new(service, "agents");
        let store = toolgate_store::Store::connect("sqlite::memory:")
            .await
            .unwrap();
        let ctx = Context::new(
            client,
            store,
            key.clone(),
            Metrics::new(),
            Settings::new("toolgate-system"),
        )
        .with_clock(Arc::new(move || now));
        ctx.mark_trusted("agents");
        (Arc::new(ctx), responder(handle))
    });
    let shared: Vec<Arc<PolicyProfile>> = all.iter().cloned().map(Arc::new).collect();
    group.bench_function("reconcile_mock/1000", |b| {
        b.iter(|| {
            rt.block_on(async {
                for p in &shared {
                    profile::reconcile(p.clone(), ctx.clone()).await.unwrap();
                }
            })
        })
    });

    let api: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
        kube::Api::namespaced(ctx.client.clone(), "agents");
    group.bench_function("mock_round_trip/1000", |b| {
        b.iter(|| {
            rt.block_on(async {
                for _ in 0..N {
                    api.get("x").await.unwrap();
                }
            })
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
