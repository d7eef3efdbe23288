//! RBAC coverage: `rbac.yaml` grants no wildcards, requests map to the
//! accesses they need, the mock API refuses what `rbac.yaml` does not grant,
//! and every kind of API call the controller makes is granted, with nothing
//! granted that it never uses.
//!
//! Each kind of call is a scenario (an `async fn` returning the accesses its
//! requests needed) with a test of its own; the last test runs them all, in
//! order on one database, and compares their union with `rbac.yaml`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::approvals::{decided, pending_row};
use crate::common::publish::create;
use crate::common::rbac::{self, Access, assert_granted, not_found, serve, triple};
use crate::common::*;
use http::Method;
use serde_json::{Value, json};
use toolgate_controller::{approval, profile};
use toolgate_store::Store;

#[test]
fn rbac_yaml_has_no_wildcards() {
    let rules = rbac::rules();
    assert!(!rules.is_empty());
    for rule in rules {
        for (field, list) in [
            ("apiGroups", &rule.api_groups),
            ("resources", &rule.resources),
            ("verbs", &rule.verbs),
        ] {
            assert!(!list.is_empty(), "empty {field} in {rule:?}");
            assert!(
                list.iter().all(|v| !v.contains('*')),
                "wildcard in {field} of {rule:?}"
            );
        }
    }
}

#[test]
fn requests_map_to_rbac_accesses() {
    let cases = [
        (
            Method::GET,
            "/apis/toolgate.dev/v1alpha1/policyprofiles",
            "limit=500",
            ("toolgate.dev", "policyprofiles", "list"),
        ),
        (
            Method::GET,
            "/apis/toolgate.dev/v1alpha1/policyprofiles",
            "watch=true&resourceVersion=1",
            ("toolgate.dev", "policyprofiles", "watch"),
        ),
        (
            Method::GET,
            "/api/v1/configmaps",
            "&watch=true&labelSelector=a%3Db",
            ("", "configmaps", "watch"),
        ),
        (
            Method::GET,
            "/api/v1/namespaces/agents/configmaps/x",
            "",
            ("", "configmaps", "get"),
        ),
        (
            Method::GET,
            "/api/v1/namespaces/agents/configmaps",
            "",
            ("", "configmaps", "list"),
        ),
        (
            Method::PATCH,
            "/apis/toolgate.dev/v1alpha1/namespaces/agents/policyprofiles/p/status",
            "",
            ("toolgate.dev", "policyprofiles/status", "patch"),
        ),
        (
            Method::POST,
            "/apis/events.k8s.io/v1/namespaces/agents/events",
            "",
            ("events.k8s.io", "events", "create"),
        ),
        (
            Method::PUT,
            "/apis/coordination.k8s.io/v1/namespaces/ns/leases/l",
            "",
            ("coordination.k8s.io", "leases", "update"),
        ),
        (
            Method::DELETE,
            "/api/v1/namespaces/ns/secrets/s",
            "",
            ("", "secrets", "delete"),
        ),
        (
            Method::DELETE,
            "/api/v1/namespaces/ns/secrets",
            "",
            ("", "secrets", "deletecollection"),
        ),
        (
            Method::GET,
            "/api/v1/namespaces/agents",
            "",
            ("", "namespaces", "get"),
        ),
    ];
    for (method, path, query, (g, r, v)) in cases {
        assert_eq!(
            rbac::access(&method, path, query).unwrap(),
            triple(g, r, v),
            "{method} {path}?{query}"
        );
    }
    assert!(rbac::access(&Method::GET, "/healthz", "").is_err());

    // An uncovered request is reported; covered ones are not.
    let delete_secret = rbac::access(
        &Method::DELETE,
        "/api/v1/namespaces/toolgate-system/secrets/toolgate-signing-key",
        "",
    )
    .unwrap();
    let get_secret = triple("", "secrets", "get");
    assert_eq!(
        rbac::uncovered(rbac::rules(), [&delete_secret, &get_secret]),
        vec![delete_secret]
    );
    // `policyprofiles` does not cover `policyprofiles/status`, and groups matter.
    let rules = rbac::parse_rules(
        "- apiGroups: [toolgate.dev]\n  resources: [policyprofiles]\n  verbs: [patch]\n",
    );
    assert!(!rbac::covered(
        &rules,
        &triple("toolgate.dev", "policyprofiles/status", "patch")
    ));
    assert!(!rbac::covered(
        &rules,
        &triple("", "policyprofiles", "patch")
    ));
    assert!(rbac::covered(
        &rules,
        &triple("toolgate.dev", "policyprofiles", "patch")
    ));
}

/// The harness itself fails a scenario whose reconciler makes a request
/// `rbac.yaml` does not grant.
#[tokio::test]
#[should_panic(expected = "rbac.yaml does not grant")]
async fn the_mock_api_fails_a_request_rbac_yaml_does_not_grant() {
    let (client, mut server) = mock_client();
    tokio::spawn(async move {
        let api: kube::Api<k8s_openapi::api::core::v1::Secret> =
            kube::Api::namespaced(client, "toolgate-system");
        let _ = api
            .delete("toolgate-signing-key", &Default::default())
            .await;
    });
    server.next("DELETE secret").await;
}

/// Scenario 1: the controllers' list + watch of every watched kind, all namespaces.
///
/// Their own database: they are aborted below, possibly inside a query of
/// the approvals mirror, and the in-memory database lives in its one
/// connection, which the later scenarios on a shared store must find
/// intact.
async fn watches() -> Vec<Access> {
    let (client, mut server) = mock_client();
    let ctx = context(client, store().await, now());
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let reconcilers = tokio::spawn(toolgate_controller::run_reconcilers(
        ctx,
        Duration::from_secs(3600),
        stop_rx,
    ));
    let mut held = Vec::new();
    let mut watches = std::collections::BTreeSet::new();
    while watches.len() < 4 {
        let r = server
            .next("the controllers' list and watch requests")
            .await;
        assert!(
            r.path.starts_with("/api/v1/configmaps")
                || r.path.starts_with("/apis/toolgate.dev/v1alpha1/"),
            "{} {}",
            r.method,
            r.path
        );
        if r.query.contains("watch=true") {
            // Keep the watch open.
            watches.insert(r.path.clone());
            held.push(r);
        } else {
            r.respond(200, list(vec![]));
        }
    }
    let _ = stop_tx.send(true);
    reconcilers.abort();
    drop(held);
    server.accesses()
}

/// Scenario 2: a profile's life: finalizer, publication, re-publication, deletion.
async fn profile_life(store: &Store) -> Vec<Access> {
    let mut seen = Vec::new();
    let (client, mut server) = mock_client();
    let ctx = context(client, store.clone(), now());
    serve(
        &mut server,
        profile::reconcile(Arc::new(profile(1, false)), ctx),
        |_, _, _| {
            let mut obj = serde_json::to_value(profile(1, true)).unwrap();
            obj["metadata"]["resourceVersion"] = json!("2");
            (200, obj)
        },
    )
    .await
    .unwrap();
    seen.extend(server.accesses());
    let (client, server) = mock_client();
    let log = server.1.clone();
    create(
        context(client, store.clone(), now()),
        server,
        profile(1, true),
    )
    .await;
    seen.extend(log.lock().unwrap().iter().cloned());
    let (client, mut server) = mock_client();
    let ctx = context(client, store.clone(), now());
    let mut p = profile(1, true);
    p.metadata.deletion_timestamp =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now()));
    serve(
        &mut server,
        profile::reconcile(Arc::new(p.clone()), ctx),
        |m, _, b| match *m {
            Method::DELETE => (
                200,
                json!({"kind": "Status", "apiVersion": "v1", "status": "Success"}),
            ),
            Method::POST => (200, b.clone()),
            _ => {
                let mut obj = serde_json::to_value(&p).unwrap();
                obj["metadata"]["finalizers"] = json!([]);
                (200, obj)
            }
        },
    )
    .await
    .unwrap();
    seen.extend(server.accesses());
    seen
}

/// Scenario 3: an Event published twice is a series: create, then patch.
async fn event_series(store: &Store) -> Vec<Access> {
    let (client, mut server) = mock_client();
    let ctx = context(client, store.clone(), now());
    ctx.mark_trusted(NS);
    let mut bad = profile(3, true);
    bad.spec.rules.insert("deploy".into(), Default::default());
    for _ in 0..2 {
        serve(
            &mut server,
            profile::reconcile(Arc::new(bad.clone()), ctx.clone()),
            |m, path, b| match (m, path) {
                (&Method::GET, _) => not_found(),
                (_, p) if p.ends_with("/status") => {
                    let mut obj = profile_json();
                    obj["status"] = b["status"].clone();
                    (200, obj)
                }
                _ => (200, b.clone()),
            },
        )
        .await
        .unwrap();
    }
    let accesses = server.accesses();
    assert!(
        accesses.contains(&triple("events.k8s.io", "events", "patch")),
        "{accesses:?}"
    );
    accesses
}

/// Answers GET with `get`, anything else by echoing the body with `code`.
fn get_or_echo(
    get: impl Fn() -> (u16, Value),
    code: u16,
) -> impl FnMut(&Method, &str, &Value) -> (u16, Value) {
    move |m, _, b| {
        if *m == Method::GET {
            get()
        } else {
            (code, b.clone())
        }
    }
}

/// Scenario 4: the signing key and trust set: create both, then update the trust set.
async fn signing_key_and_trust() -> Vec<Access> {
    let (client, mut server) = mock_client();
    let key = serve(
        &mut server,
        toolgate_controller::keys::ensure_signing_key(&client, "toolgate-system"),
        get_or_echo(not_found, 201),
    )
    .await
    .unwrap();
    serve(
        &mut server,
        toolgate_controller::keys::ensure_trust(&client, "toolgate-system", &key),
        get_or_echo(not_found, 201),
    )
    .await
    .unwrap();
    let other = toolgate_bundle::SigningKey::from_seed(&[9; 32]).public_key();
    let existing = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "toolgate-trust", "namespace": "toolgate-system", "resourceVersion": "7"},
        "data": {"trust.pem": format!("# {}\n{}", other.key_id(), other.to_spki_pem().unwrap())}});
    serve(
        &mut server,
        toolgate_controller::keys::ensure_trust(&client, "toolgate-system", &key),
        get_or_echo(|| (200, existing.clone()), 200),
    )
    .await
    .unwrap();
    server.accesses()
}

/// Scenario 5: the leader lease: acquire (create), then renew (replace); the
/// replica leads both times.
async fn leader_lease() -> Vec<Access> {
    let (client, mut server) = mock_client();
    let elector = toolgate_controller::leader::LeaderElector::new(
        client,
        "toolgate-system",
        "replica-a",
        Duration::from_secs(15),
    );
    let lease: Arc<Mutex<Option<Value>>> = Arc::default();
    for _ in 0..2 {
        let lease = lease.clone();
        let leads = serve(
            &mut server,
            elector.try_acquire_or_renew(),
            move |m, _, b| {
                let mut held = lease.lock().unwrap();
                match (m, held.as_ref()) {
                    (&Method::GET, None) => not_found(),
                    (&Method::GET, Some(l)) => (200, l.clone()),
                    _ => {
                        let mut l = b.clone();
                        l["metadata"]["resourceVersion"] = json!("1");
                        *held = Some(l.clone());
                        (200, l)
                    }
                }
            },
        )
        .await
        .unwrap();
        assert!(leads);
    }
    server.accesses()
}

/// Scenarios 6 to 8: the approvals mirror creates an object, a finished
/// object past its retention is deleted, and a decision reads the profile.
async fn approvals_mirror(store: &Store) -> Vec<Access> {
    let row = pending_row(store, Duration::from_secs(900)).await;
    let (client, mut server) = mock_client();
    let ctx = context(client, store.clone(), jiff::Timestamp::now());
    let name = approval::approval_name(&row.id);
    serve(
        &mut server,
        approval::sync_once(&ctx, &[], &[]),
        |_, _, b| {
            let mut obj = approval_json(&name);
            if b.get("spec").is_some() {
                obj = b.clone();
            }
            obj["metadata"]["uid"] = json!("uid-apr");
            (201, obj)
        },
    )
    .await
    .unwrap();
    let mut finished = approval::object_for(&row, NS);
    finished.status = Some(toolgate_controller::crd::ApprovalStatus {
        phase: Some(toolgate_controller::crd::Phase::Denied),
        profile: Some("safe-coding".into()),
        finished_at: Some("2000-01-01T00:00:00Z".into()),
        ..Default::default()
    });
    let report = serve(
        &mut server,
        approval::sync_once(&ctx, &[Arc::new(finished)], &[]),
        |_, _, _| (200, approval_json(&name)),
    )
    .await
    .unwrap();
    assert_eq!(report.deleted, 1);
    serve(
        &mut server,
        approval::reconcile(
            Arc::new(decided(&row, Some("carol"), &["platform-oncall"])),
            ctx,
        ),
        |m, _, _| {
            if *m == Method::GET {
                (200, profile_json())
            } else {
                (200, approval_json(&name))
            }
        },
    )
    .await
    .unwrap();
    server.accesses()
}

/// Scenario 9: a RunCancellation: recorded in the database, status patched, once;
/// once Applied, nothing more to do and no request made.
async fn run_cancellation(store: &Store) -> Vec<Access> {
    let (client, mut server) = mock_client();
    let ctx = context(client, store.clone(), now());
    let mut rc = toolgate_controller::cancellation::RunCancellation::new(
        "cancel-run-7",
        toolgate_controller::cancellation::RunCancellationSpec {
            // Recorded under the run's canonical spelling, `run-7`.
            run_id: Some("Run-7".into()),
            reason: Some("runaway".into()),
            ..Default::default()
        },
    );
    rc.metadata.namespace = Some("agents".into());
    let mut patched = None;
    serve(
        &mut server,
        toolgate_controller::cancellation::reconcile(Arc::new(rc.clone()), ctx.clone()),
        |m, path, body| {
            assert_eq!(*m, Method::PATCH, "{path}");
            assert_eq!(
                path,
                "/apis/toolgate.dev/v1alpha1/namespaces/agents/runcancellations/cancel-run-7/status"
            );
            patched = Some(body.clone());
            (200, serde_json::to_value(&rc).unwrap())
        },
    )
    .await
    .unwrap();
    let patched = patched.expect("status patched");
    assert_eq!(patched["status"]["phase"], "Applied", "{patched}");
    // Server-side apply (not a merge patch): the body names its kind.
    assert_eq!(patched["kind"], "RunCancellation", "{patched}");
    let run7 = toolgate_policy::RunId::parse("run-7").unwrap();
    let state = store.runs().state("agents", &run7).await.unwrap();
    assert_eq!(state.cancel_reason.as_deref(), Some("runaway"));
    assert_eq!(
        state.cancelled_by.as_deref(),
        Some("runcancellation:agents/cancel-run-7")
    );
    let accesses = server.accesses();
    rc.status = serde_json::from_value(patched["status"].clone()).unwrap();
    let (client, server) = mock_client();
    let log = server.1.clone();
    toolgate_controller::cancellation::reconcile(
        Arc::new(rc),
        context(client, store.clone(), now()),
    )
    .await
    .unwrap();
    assert!(log.lock().unwrap().is_empty());
    accesses
}

#[tokio::test]
async fn the_controllers_list_and_watch_every_watched_kind() {
    assert_granted(&watches().await);
}

#[tokio::test]
async fn a_profiles_life_is_granted() {
    assert_granted(&profile_life(&store().await).await);
}

#[tokio::test]
async fn an_event_published_twice_is_a_series() {
    assert_granted(&event_series(&store().await).await);
}

#[tokio::test]
async fn the_signing_key_and_the_trust_set_are_granted() {
    assert_granted(&signing_key_and_trust().await);
}

#[tokio::test]
async fn the_leader_lease_is_acquired_then_renewed() {
    assert_granted(&leader_lease().await);
}

#[tokio::test]
async fn the_approvals_mirror_and_a_decision_are_granted() {
    assert_granted(&approvals_mirror(&store().await).await);
}

#[tokio::test]
async fn a_run_cancellation_is_recorded_and_applied_once() {
    assert_granted(&run_cancellation(&store().await).await);
}

/// Every kind of API call the controller makes, against one mock API: the
/// controllers' watches, a profile's whole life, the key and trust set, the
/// leader lease, the approvals mirror and approvers check, Event series, a
/// run cancellation. Every request must be covered by rbac.yaml (the
/// harness checks each one), and every rule of rbac.yaml must be exercised
/// (nothing granted that the controller never does).
#[tokio::test]
async fn every_api_request_the_controller_makes_is_covered_by_rbac_yaml() {
    let store = store().await;
    let mut seen: Vec<Access> = watches().await;
    seen.extend(profile_life(&store).await);
    seen.extend(event_series(&store).await);
    seen.extend(signing_key_and_trust().await);
    seen.extend(leader_lease().await);
    seen.extend(approvals_mirror(&store).await);
    seen.extend(run_cancellation(&store).await);

    // Every request was covered (checked per request by the harness, and here
    // as a whole) ...
    assert_eq!(rbac::uncovered(rbac::rules(), &seen), Vec::<Access>::new());
    // ... and every granted (group, resource, verb) was used by some request.
    // `policyprofiles/finalizers update` is never a request: the API server
    // checks it when the bundle ConfigMap sets an ownerReference with
    // blockOwnerDeletion (OwnerReferencesPermissionEnforcement).
    let not_a_request = [triple(
        "toolgate.dev",
        "policyprofiles/finalizers",
        "update",
    )];
    let mut unused = Vec::new();
    for rule in rbac::rules() {
        for g in &rule.api_groups {
            for r in &rule.resources {
                for v in &rule.verbs {
                    let t = triple(g, r, v);
                    if !seen.contains(&t) && !not_a_request.contains(&t) {
                        unused.push(t.to_string());
                    }
                }
            }
        }
    }
    assert!(
        unused.is_empty(),
        "rbac.yaml grants what no request in these scenarios uses: {unused:?}"
    );
}
