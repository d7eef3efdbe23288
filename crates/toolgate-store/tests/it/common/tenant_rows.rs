//! What a tenant's sidecar writes, through a store connected as the tenant's
//! role, asserting as it goes that each operation works (the confinement
//! tests start from these rows and attack them).

use std::time::Duration;

use jiff::Timestamp;
use toolgate_store::{
    Approval, ApprovalDecision, ApprovalStatus, ApprovedCall, ChainedDecision, Checkpoint, Intent,
    IntentOutcome,
};

use super::tenants::*;

/// Tenant A's rows that the attacks name.
pub struct ARows {
    /// Requested, approved by the admin and consumed.
    pub approval: Approval,
    /// An intent whose effect was sent, still open (another was
    /// completed).
    pub open: Intent,
}

/// The call [`approval`] asks about.
pub fn approved_call() -> ApprovedCall<'static> {
    ApprovedCall {
        tool: "fs.delete",
        args_digest: "sha256:args",
        call_digest: CALL,
        policy_version: POLICY,
    }
}

/// A requests an approval (again: the same one), waits for it while the
/// admin approves it, then consumes it once.
pub async fn approval_consumed(t: &TwoTenants) -> Approval {
    let (a, ta) = (&t.a, &t.ta);
    let req = a
        .approvals()
        .request(approval(ta, "inv-1"), Timestamp::now())
        .await
        .unwrap();
    assert_eq!(req.status, ApprovalStatus::Pending);
    assert_eq!(req.action.as_deref(), Some("delete"));
    assert_eq!(req.preview.as_deref(), Some("rm -rf /tmp/x"));
    let again = a
        .approvals()
        .request(approval(ta, "inv-1"), Timestamp::now())
        .await
        .unwrap();
    assert_eq!(again.id, req.id);
    let waiter = {
        let (a, ta, id) = (a.clone(), ta.clone(), req.id.clone());
        tokio::spawn(async move { a.approvals().wait(&ta, &id, Duration::from_secs(20)).await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    t.fx.admin
        .approvals()
        .resolve(
            ta,
            &req.id,
            ApprovalDecision::Approved,
            "alice",
            None,
            Timestamp::now(),
        )
        .await
        .unwrap();
    let waited = waiter.await.unwrap().unwrap();
    assert_eq!(waited.status, ApprovalStatus::Approved);
    assert_eq!(
        a.approvals()
            .list(ta, Some(ApprovalStatus::Approved), Timestamp::now())
            .await
            .unwrap()
            .len(),
        1
    );
    let call = approved_call();
    assert!(
        a.approvals()
            .consume(ta, &req.id, &call, Timestamp::now())
            .await
            .unwrap()
    );
    assert!(
        !a.approvals()
            .consume(ta, &req.id, &call, Timestamp::now())
            .await
            .unwrap()
    );
    assert_eq!(
        a.approvals().run_events(ta, "run-1").await.unwrap().len(),
        2
    );
    req
}

/// A completes one intent and leaves another open (effect sent); only the
/// open one is pending.
pub async fn intents_done_and_open(t: &TwoTenants) -> (Intent, Intent) {
    let (a, ta) = (&t.a, &t.ta);
    let done = a
        .intents()
        .begin(intent(ta), Timestamp::now())
        .await
        .unwrap();
    a.intents()
        .mark_effect_sent(ta, &done.id, Timestamp::now())
        .await
        .unwrap();
    a.intents()
        .complete(
            ta,
            &done.id,
            IntentOutcome::Completed,
            Some("ok".into()),
            Timestamp::now(),
        )
        .await
        .unwrap();
    let open = a
        .intents()
        .begin(intent(ta), Timestamp::now())
        .await
        .unwrap();
    a.intents()
        .mark_effect_sent(ta, &open.id, Timestamp::now())
        .await
        .unwrap();
    let pending = a.intents().pending(ta, "run-1").await.unwrap();
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].intent.id, open.id);
    (done, open)
}

/// A appends one decision and a batch of five to stream [`S`]; its chain
/// verifies. Returns the batch.
pub async fn six_decisions(t: &TwoTenants) -> Vec<ChainedDecision> {
    let (a, ta) = (&t.a, &t.ta);
    let first = a.decisions().append(ta, S, record(0)).await.unwrap();
    assert_eq!(first.seq, 1);
    let batch = a
        .decisions()
        .append_batch(ta, S, (1..6).map(record).collect())
        .await
        .unwrap();
    assert_eq!(batch.last().unwrap().seq, 6);
    let reports = a.decisions().verify(Some(ta)).await.unwrap();
    assert!(reports[0].ok, "{reports:?}");
    assert_eq!(reports[0].rows, 6);
    batch
}

/// A records a profile load, bundle sequences 3, 5, 4 (the high-water mark
/// stays at 5) and two heartbeats of one pod.
pub async fn profile_and_heartbeat_rows(t: &TwoTenants) {
    let (a, ta) = (&t.a, &t.ta);
    assert!(
        a.profiles()
            .record_profile_load(profile_load(ta, "default@a"), Timestamp::now())
            .await
            .unwrap()
    );
    for (sequence, digest) in [(3, "sha256:b3"), (5, "sha256:b5"), (4, "sha256:b4")] {
        a.profiles()
            .record_bundle_sequence(ta, "default", sequence, digest, Timestamp::now())
            .await
            .unwrap();
    }
    assert_eq!(
        a.profiles().bundle_high_water(ta, "default").await.unwrap(),
        Some((5, "sha256:b5".to_owned()))
    );
    a.heartbeats()
        .record_heartbeat(&heartbeat(ta, 1))
        .await
        .unwrap();
    a.heartbeats()
        .record_heartbeat(&heartbeat(ta, 2))
        .await
        .unwrap();
    assert_eq!(a.heartbeats().list_heartbeats(None).await.unwrap().len(), 1);
    assert_eq!(
        a.profiles()
            .list_process_events(None, 0)
            .await
            .unwrap()
            .len(),
        1
    );
}

/// B writes a little of its own (a decision, an approval, a heartbeat), so
/// that what B sees of A can be told from what B sees at all.
pub async fn b_rows(t: &TwoTenants) {
    let (b, tb) = (&t.b, &t.tb);
    b.decisions().append(tb, S, record(0)).await.unwrap();
    b.approvals()
        .request(approval(tb, "inv-b"), Timestamp::now())
        .await
        .unwrap();
    b.heartbeats()
        .record_heartbeat(&heartbeat(tb, 1))
        .await
        .unwrap();
}

/// Every kind of row A's sidecar writes, a checkpoint of A's stream
/// recorded by the admin, and B's own rows.
pub async fn a_wrote_everything(t: &TwoTenants) -> ARows {
    let approval = approval_consumed(t).await;
    let (_done, open) = intents_done_and_open(t).await;
    let batch = six_decisions(t).await;
    profile_and_heartbeat_rows(t).await;
    b_rows(t).await;
    let head = batch.last().unwrap();
    t.fx.admin
        .checkpoints()
        .record(&Checkpoint {
            tenant: t.ta.clone(),
            stream: S.into(),
            seq: head.seq,
            hash: head.hash.clone(),
            at: Timestamp::now(),
            keyid: "k".into(),
            envelope: "{}".into(),
        })
        .await
        .unwrap();
    ARows { approval, open }
}

/// Tenant A's first stream (a sidecar's `{pod}/{nonce}`).
pub const S1: &str = "pod-a/1";
/// The stream A's sidecar opens after a restart, linked to [`S1`]'s head.
pub const S2: &str = "pod-a/2";

/// A opens [`S1`] and appends three rows, then "restarts" into [`S2`]
/// linked to the first's head and appends one row there. Returns the
/// three rows of [`S1`].
pub async fn two_streams(t: &TwoTenants) -> Vec<ChainedDecision> {
    let (a, ta) = (&t.a, &t.ta);
    let opened = a.decisions().open_stream(ta, S1, None).await.unwrap();
    assert_eq!(opened.seq, 0);
    let rows = a
        .decisions()
        .append_batch(ta, S1, (0..3).map(record).collect())
        .await
        .unwrap();
    assert_eq!(rows[0].prev_hash, opened.hash);
    assert_eq!(
        a.decisions()
            .latest_stream(ta, "pod-a/")
            .await
            .unwrap()
            .as_deref(),
        Some(S1)
    );
    let second = a.decisions().open_stream(ta, S2, Some(S1)).await.unwrap();
    let link = second.previous.clone().unwrap();
    assert_eq!((link.stream.as_str(), link.seq), (S1, 3));
    assert_eq!(link.hash, rows[2].hash);
    let first2 = a.decisions().append(ta, S2, record(9)).await.unwrap();
    assert_eq!(first2.seq, 1);
    assert_eq!(first2.prev_hash, second.hash);
    rows
}

/// A direct insert into `tenant`'s [`S1`] claiming position `seq` after
/// `prev`.
pub fn forged_insert(tenant: &str, seq: i64, prev: &str) -> String {
    format!(
        "INSERT INTO decisions (tenant, stream, seq, decision_id, run_id, step_id, tool, \
         verdict, reason, policy_version, risk, args_digest, created_at, prev_hash, hash) \
         VALUES ('{tenant}', '{S1}', {seq}, 'forged', 'r', 's', 't', 'allow', 'x', 'p', 'low', \
         'd', 0, '{prev}', '{}')",
        "f".repeat(64)
    )
}

/// A call of the append function (migration 0010) for `tenant`'s [`S1`]
/// claiming position `seq` (SQL text: `NULL` is none) after `prev`.
pub fn forged_call(tenant: &str, seq: &str, prev: &str) -> String {
    format!(
        "SELECT toolgate_append_decision('{tenant}', 'forged', 'r', 's', 't', 'allow', 'x', \
         NULL, NULL, 'p', 'low', 'd', 0, NULL, NULL, '{S1}', {seq}, '{prev}', '{}')",
        "f".repeat(64)
    )
}

/// A call of the batch append function (migration 0011) for `tenant`'s
/// [`S1`]: `rows` rows from position `seq` (SQL text) after `prev`, their
/// hashes `aaaa…`, `bbbb…`, … as `ARRAY['…', …]::text[]`; `short` makes the
/// decision-id array one element shorter than the others.
pub fn batch_call(tenant: &str, seq: &str, prev: &str, rows: usize, short: bool) -> String {
    let texts = |value: &str| {
        let n = if short { rows - 1 } else { rows };
        format!(
            "ARRAY[{}]::text[]",
            vec![format!("'{value}'"); n].join(", ")
        )
    };
    let all = |value: &str| format!("ARRAY[{}]::text[]", vec![value; rows].join(", "));
    let hashes: Vec<String> = (0..rows)
        .map(|i| format!("'{}'", char::from(b'a' + i as u8).to_string().repeat(64)))
        .collect();
    format!(
        "SELECT toolgate_append_decisions('{tenant}', '{S1}', {seq}, '{prev}', \
         {ids}, {r}, {r}, {r}, {allow}, {r}, {null}, {null}, {r}, {low}, {r}, \
         ARRAY[{zeros}]::bigint[], {null}, {null}, ARRAY[{hashes}]::text[])",
        ids = texts("forged"),
        r = all("'r'"),
        allow = all("'allow'"),
        low = all("'low'"),
        null = all("NULL"),
        zeros = vec!["0"; rows].join(", "),
        hashes = hashes.join(", "),
    )
}

/// As A, a row of [`S1`] naming no seq (as a sidecar of an earlier release
/// writes), with decision id `old-release`.
pub async fn old_release_row(t: &TwoTenants) {
    sqlx::raw_sql(&format!(
        "INSERT INTO decisions (tenant, stream, decision_id, run_id, step_id, tool, \
         verdict, reason, policy_version, risk, args_digest, created_at) \
         VALUES ('{}', '{S1}', 'old-release', 'r', 's', 't', 'allow', 'x', 'p', 'low', 'd', 0)",
        t.ta
    ))
    .execute(&t.pa)
    .await
    .unwrap();
}
