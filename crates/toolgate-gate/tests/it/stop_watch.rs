//! Hearing of stops made elsewhere: the gate's stop watcher reads the
//! tenant's cancellations at start and whenever it is woken, so a run (or
//! this pod) stopped on another sidecar is refused even for calls that
//! never reach the database.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use toolgate_gate::runs::CancelRequest;
use toolgate_gate::stops::{StopSignal, watch_cancellations};
use toolgate_policy::{Decision, Reason};

use crate::common::*;

/// Asks `g` for a low-risk read in `run` until it is refused
/// `run_cancelled` (up to 5 s).
async fn until_refused(g: &TestGate, run: &str) {
    for _ in 0..100 {
        let v = g.authorize("reader", json!({"path": "a"}), run).await;
        if outcome(&v) == (Decision::Deny, Reason::RunCancelled) {
            return;
        }
        assert_eq!(outcome(&v), (Decision::Allow, Reason::AllowRule));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("run {run} never refused");
}

/// A run cancelled before the watcher starts is read at its start; one
/// cancelled later, and a pod stop, once it is woken.
#[tokio::test]
async fn stops_made_elsewhere_are_heard() {
    each_backend!(|url| {
        let g = TestGate::start(url, Bundle::Live(SPEC)).await;
        let elsewhere = g.peer(url, Bundle::Live(SPEC)).await;
        let stop = |run: String| async {
            let req = CancelRequest::default();
            elsewhere
                .gate
                .cancel_run(&run_id(&run), &req)
                .await
                .unwrap();
            run
        };
        let early = stop(unique("run")).await;
        let signal = Arc::new(StopSignal::default());
        signal.set_hearing(true);
        let (shutdown, watching) = tokio::sync::watch::channel(false);
        let watcher = tokio::spawn(watch_cancellations(
            g.gate.clone(),
            signal.clone(),
            watching,
        ));
        until_refused(&g, &early).await;

        let late = stop(unique("run")).await;
        signal.wake();
        until_refused(&g, &late).await;

        let pod_a = TestGate::start_as(url, Bundle::Live(SPEC), &g.tenant, "pod-a").await;
        pod_a
            .gate
            .cancel_pod(&CancelRequest::default())
            .await
            .unwrap();
        signal.wake();
        until_refused(&g, &unique("never-seen")).await;
        // The other pod hears nothing of it.
        let v = elsewhere
            .authorize("reader", json!({"path": "a"}), &unique("run"))
            .await;
        assert_eq!(outcome(&v), (Decision::Allow, Reason::AllowRule));

        shutdown.send(true).unwrap();
        tokio::time::timeout(Duration::from_secs(5), watcher)
            .await
            .unwrap()
            .unwrap();
    });
}
