//! `toolgate approvals`, `toolgate audit verify`/`checkpoint` and
//! `toolgate migrate` against a real SQLite file (and PostgreSQL, for the
//! checkpoints, when `TOOLGATE_TEST_DATABASE_URL` is set).

use std::process::Command;
use std::time::Duration;

use serde_json::Value;
use toolgate_store::{DecisionRecord, NewApproval, Store};

fn toolgate(args: &[&str]) -> (Option<i32>, Value) {
    let out = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(args)
        .output()
        .expect("run toolgate");
    let json = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&out.stdout).into_owned()));
    (out.status.code(), json)
}

fn record(i: usize) -> DecisionRecord {
    DecisionRecord {
        decision_id: format!("d{i}"),
        run_id: "r".into(),
        step_id: "s".into(),
        tool: "bash".into(),
        verdict: "deny".into(),
        reason: "deny_rule".into(),
        message: None,
        matched_rule: Some("deny:bash:rm *".into()),
        policy_version: "p@000000000000+h00000000".into(),
        risk: "high".into(),
        args_digest: "sha256:00".into(),
        call_digest: None,
        definition_digest: None,
        created_at: jiff::Timestamp::now(),
    }
}

#[tokio::test]
async fn approvals_and_audit_from_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}?mode=rwc", dir.path().join("t.db").display());
    let (code, out) = toolgate(&["migrate", "--database", &url]);
    assert_eq!(
        (code, &out["migrated"]),
        (Some(0), &Value::Bool(true)),
        "{out}"
    );

    let store = Store::connect(&url).await.unwrap();
    let approval = store
        .approvals()
        .request(
            NewApproval {
                approval_id: None,
                invocation_id: "inv-1".into(),
                tenant: "team-a".into(),
                run_id: "r".into(),
                tool: "deploy".into(),
                args_digest: "sha256:ab".into(),
                call_digest: None,
                policy_version: "p@000000000000+h00000000".into(),
                decision_id: "d0".into(),
                requested_by: "sidecar:agents/pod-1".into(),
                ttl: Duration::from_secs(600),
                action: None,
                preview: None,
            },
            jiff::Timestamp::now(),
        )
        .await
        .unwrap();

    let (code, list) = toolgate(&[
        "approvals",
        "list",
        "--database",
        &url,
        "--status",
        "pending",
    ]);
    assert_eq!(code, Some(0));
    assert_eq!(list[0]["id"], approval.id.as_str());
    let (_, other) = toolgate(&[
        "approvals",
        "list",
        "--database",
        &url,
        "--tenant",
        "team-b",
    ]);
    assert_eq!(
        other.as_array().map(Vec::len),
        Some(0),
        "tenants are isolated"
    );

    let (code, resolved) = toolgate(&[
        "approvals",
        "approve",
        &approval.id,
        "--database",
        &url,
        "--by",
        "alice",
        "--reason",
        "ok",
    ]);
    assert_eq!(code, Some(0), "{resolved}");
    assert_eq!(resolved["status"], "approved");
    assert_eq!(resolved["resolved_by"], "alice");
    let (code, err) = toolgate(&[
        "approvals",
        "deny",
        &approval.id,
        "--database",
        &url,
        "--by",
        "bob",
    ]);
    assert_eq!(
        (code, err["error"]["code"].as_str()),
        (Some(2), Some("conflict")),
        "{err}"
    );
    let (code, err) = toolgate(&["approvals", "list", "--database", &url, "--status", "maybe"]);
    assert_eq!(
        (code, err["error"]["code"].as_str()),
        (Some(2), Some("invalid_input"))
    );

    for i in 0..5 {
        store
            .decisions()
            .append("team-a", "pod-1/a", record(i))
            .await
            .unwrap();
    }
    let (code, report) = toolgate(&["audit", "verify", "--database", &url]);
    assert_eq!(
        (code, &report["ok"]),
        (Some(0), &Value::Bool(true)),
        "{report}"
    );
    assert_eq!(report["chains"][0]["rows"], 5);
    assert_eq!(report["chains"][0]["stream"], "pod-1/a");
    assert_eq!(
        (&report["streams"], &report["records"]),
        (&1.into(), &5.into())
    );

    sqlx::query("UPDATE decisions SET verdict = 'allow' WHERE seq = 3")
        .execute(store.as_sqlite().unwrap())
        .await
        .unwrap();
    let (code, report) = toolgate(&["audit", "verify", "--database", &url, "--tenant", "team-a"]);
    assert_eq!(code, Some(1), "a broken chain fails the command: {report}");
    assert_eq!(report["chains"][0]["first_broken_seq"], 3);
}

/// Review finding: one row a tenant wrote that does not read back (here a
/// created_at no timestamp holds) made `approvals list` fail and, as the
/// tenant of an id was found by listing every row, every `approve`/`deny`
/// without `--tenant`. Now the list shows the rest and names the bad row on
/// stderr (exit 0), and an approval is found by its id alone.
#[tokio::test]
async fn approvals_list_and_answer_past_a_row_that_does_not_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}?mode=rwc", dir.path().join("t.db").display());
    let store = Store::connect(&url).await.unwrap();
    let good = store
        .approvals()
        .request(
            NewApproval {
                approval_id: None,
                invocation_id: "inv-b".into(),
                tenant: "team-b".into(),
                run_id: "r".into(),
                tool: "deploy".into(),
                args_digest: "sha256:ab".into(),
                call_digest: None,
                policy_version: "p@000000000000+h00000000".into(),
                decision_id: "d0".into(),
                requested_by: "sidecar:agents/pod-1".into(),
                ttl: Duration::from_secs(600),
                action: None,
                preview: None,
            },
            jiff::Timestamp::now(),
        )
        .await
        .unwrap();
    sqlx::raw_sql(&format!(
        "INSERT INTO approvals (id, tenant, invocation_id, run_id, tool, args_digest, \
         policy_version, decision_id, requested_by, created_at, expires_at) \
         VALUES ('poison', 'team-a', 'inv-z', 'r', 't', 'd', 'p', 'd', 'me', {m}, {m}), \
         ('red' || char(27) || '[31m', 'team-a', 'inv-y', 'r', 't', 'd', 'p', 'd', 'me', {m}, {m})",
        m = i64::MAX
    ))
    .execute(store.as_sqlite().unwrap())
    .await
    .unwrap();

    let out = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(["approvals", "list", "--database", &url])
        .output()
        .expect("run toolgate");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let list: Value = serde_json::from_slice(&out.stdout).unwrap();
    let ids: Vec<_> = list.as_array().unwrap().iter().map(|a| &a["id"]).collect();
    assert_eq!(ids, [good.id.as_str()]);
    assert!(
        stderr.contains("warning: approval poison of tenant team-a not listed"),
        "{stderr}"
    );
    // A control sequence a tenant stored reaches the terminal escaped.
    assert!(!stderr.contains('\u{1b}'), "{stderr:?}");
    assert!(
        stderr.contains("approval red\\u{1b}[31m of tenant"),
        "{stderr}"
    );

    let (code, resolved) = toolgate(&[
        "approvals",
        "approve",
        &good.id,
        "--database",
        &url,
        "--by",
        "alice",
    ]);
    assert_eq!(code, Some(0), "{resolved}");
    assert_eq!(
        (resolved["status"].as_str(), resolved["tenant"].as_str()),
        (Some("approved"), Some("team-b"))
    );
    // An id no row has is still a usage error.
    let (code, err) = toolgate(&[
        "approvals",
        "deny",
        "nope",
        "--database",
        &url,
        "--by",
        "bob",
    ]);
    assert_eq!(
        (code, err["error"]["code"].as_str()),
        (Some(2), Some("usage")),
        "{err}"
    );
}

/// A database URL per engine for the checkpoint test: a SQLite file, and a
/// fresh schema of `TOOLGATE_TEST_DATABASE_URL` when set (required in CI).
async fn engines(dir: &std::path::Path) -> Vec<(String, Option<String>)> {
    let mut out = vec![(
        format!("sqlite://{}?mode=rwc", dir.join("cp.db").display()),
        None,
    )];
    match std::env::var("TOOLGATE_TEST_DATABASE_URL") {
        Ok(url) if !url.is_empty() => {
            let schema = format!("cli_{}", uuid_like());
            let admin = sqlx::PgPool::connect(&url).await.unwrap();
            sqlx::query(&format!("CREATE SCHEMA {schema}"))
                .execute(&admin)
                .await
                .unwrap();
            admin.close().await;
            let sep = if url.contains('?') { '&' } else { '?' };
            out.push((
                format!("{url}{sep}options=-c%20search_path%3D{schema}"),
                Some(schema),
            ));
        }
        _ if std::env::var("CI").as_deref() == Ok("true") => {
            panic!("CI=true but TOOLGATE_TEST_DATABASE_URL is not set")
        }
        _ => eprintln!("SKIP postgres variant: TOOLGATE_TEST_DATABASE_URL is not set"),
    }
    out
}

fn uuid_like() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{nanos:x}{:x}", std::process::id())
}

/// Per-stream verification and signed checkpoints from the command line: a
/// tail truncation whose head is rewritten to match passes `audit verify`
/// but fails `audit verify --checkpoints`.
#[tokio::test]
async fn audit_checkpoints_detect_truncation_with_a_rewritten_head() {
    let dir = tempfile::tempdir().unwrap();
    let (key_arg, trust, other) = crate::common::key_files(dir.path());
    let (key_arg, trust, other) = (key_arg.as_str(), trust.as_str(), other.as_str());
    let key = toolgate_bundle::SigningKey::from_file(std::path::Path::new(key_arg)).unwrap();

    for (url, schema) in engines(dir.path()).await {
        eprintln!("engine: {}", &url[..8]);
        let store = Store::connect(&url).await.unwrap();
        let d = store.decisions();
        d.append_batch("team-a", "pod-1/a", (0..4).map(record).collect())
            .await
            .unwrap();
        d.append_batch("team-a", "pod-2/b", (0..3).map(record).collect())
            .await
            .unwrap();
        d.append_batch("team-b", "pod-x/1", (0..2).map(record).collect())
            .await
            .unwrap();

        let (code, all) = toolgate(&["audit", "verify", "--database", &url]);
        assert_eq!(code, Some(0), "{all}");
        assert_eq!((&all["streams"], &all["records"]), (&3.into(), &9.into()));
        let (code, one) = toolgate(&[
            "audit",
            "verify",
            "--database",
            &url,
            "--tenant",
            "team-a",
            "--stream",
            "pod-1/a",
        ]);
        assert_eq!(code, Some(0), "{one}");
        assert_eq!((&one["streams"], &one["records"]), (&1.into(), &4.into()));
        let (code, err) = toolgate(&["audit", "verify", "--database", &url, "--stream", "x"]);
        assert_eq!(code, Some(2), "--stream needs --tenant: {err}");

        let (code, signed) = toolgate(&[
            "audit",
            "checkpoint",
            "--database",
            &url,
            "--key",
            key_arg,
            "--tenant",
            "team-a",
        ]);
        assert_eq!(code, Some(0), "{signed}");
        assert_eq!(signed["signed"].as_array().unwrap().len(), 2, "{signed}");
        assert_eq!(signed["keyid"], key.key_id().as_str());
        let (code, again) = toolgate(&[
            "audit",
            "checkpoint",
            "--database",
            &url,
            "--key",
            key_arg,
            "--tenant",
            "team-a",
        ]);
        assert_eq!((code, &again["unchanged"]), (Some(0), &2.into()), "{again}");
        let stored = store
            .checkpoints()
            .list(Some("team-a"), None)
            .await
            .unwrap();
        assert_eq!(stored.len(), 2);
        assert_eq!((stored[0].stream.as_str(), stored[0].seq), ("pod-1/a", 4));

        let verify_cp = |trust: &str| {
            toolgate(&[
                "audit",
                "verify",
                "--database",
                &url,
                "--checkpoints",
                "--trust",
                trust,
            ])
        };
        let (code, ok) = verify_cp(trust);
        assert_eq!(code, Some(0), "{ok}");
        assert_eq!(ok["checkpoints"]["checked"], 2);
        // Growing past a checkpoint is fine.
        d.append_batch("team-a", "pod-1/a", (4..6).map(record).collect())
            .await
            .unwrap();
        assert_eq!(verify_cp(trust).0, Some(0));
        // An untrusted signer fails.
        let (code, untrusted) = verify_cp(other);
        assert_eq!(code, Some(1), "{untrusted}");
        assert_eq!(
            untrusted["checkpoints"]["failures"][0]["code"],
            "bundle_unknown_key"
        );

        // Truncate pod-1/a to seq 2.
        let truncate = "DELETE FROM decisions WHERE tenant = 'team-a' AND stream = 'pod-1/a' \
            AND seq > 2";
        match (store.as_sqlite(), store.as_postgres()) {
            (Some(p), _) => sqlx::query(truncate).execute(p).await.map(|_| ()),
            (_, Some(p)) => sqlx::query(truncate).execute(p).await.map(|_| ()),
            _ => unreachable!(),
        }
        .unwrap();
        // The chain alone cannot tell.
        let (code, blind) = toolgate(&["audit", "verify", "--database", &url]);
        assert_eq!(code, Some(0), "truncation passes the chain: {blind}");
        // The checkpoint can.
        let (code, caught) = verify_cp(trust);
        assert_eq!(code, Some(1), "{caught}");
        assert_eq!(caught["ok"], false);
        let failures = caught["checkpoints"]["failures"].as_array().unwrap();
        assert_eq!(failures.len(), 1, "{caught}");
        assert_eq!(failures[0]["code"], "checkpoint_not_in_chain");
        assert_eq!(
            (&failures[0]["stream"], &failures[0]["seq"]),
            (&"pod-1/a".into(), &4.into())
        );

        // A broken chain is never signed.
        let edit = "UPDATE decisions SET verdict = 'allow' WHERE tenant = 'team-a' \
            AND stream = 'pod-2/b' AND seq = 2";
        match (store.as_sqlite(), store.as_postgres()) {
            (Some(p), _) => sqlx::query(edit).execute(p).await.map(|_| ()),
            (_, Some(p)) => sqlx::query(edit).execute(p).await.map(|_| ()),
            _ => unreachable!(),
        }
        .unwrap();
        let (code, refused) = toolgate(&[
            "audit",
            "checkpoint",
            "--database",
            &url,
            "--key",
            key_arg,
            "--tenant",
            "team-a",
        ]);
        assert_eq!(code, Some(1), "{refused}");
        assert_eq!(refused["refused"][0]["stream"], "pod-2/b");

        // A stream whose name the store refuses (one a tenant could open
        // before migration 0012) is reported, and stops no other signature.
        let plant = "INSERT INTO decision_streams (tenant, stream, seq, prev_hash, hash, \
            started_at) VALUES ($1, $2, 0, $3, $4, 0)";
        let bad = "x\ny";
        let genesis = toolgate_store::genesis_hash("team-b", bad, None).unwrap();
        match (store.as_sqlite(), store.as_postgres()) {
            (Some(p), _) => sqlx::query(plant)
                .bind("team-b")
                .bind(bad)
                .bind(toolgate_store::GENESIS_HASH)
                .bind(&genesis)
                .execute(p)
                .await
                .map(|_| ()),
            (_, Some(p)) => sqlx::query(plant)
                .bind("team-b")
                .bind(bad)
                .bind(toolgate_store::GENESIS_HASH)
                .bind(&genesis)
                .execute(p)
                .await
                .map(|_| ()),
            _ => unreachable!(),
        }
        .unwrap();
        let (code, partial) =
            toolgate(&["audit", "checkpoint", "--database", &url, "--key", key_arg]);
        assert_eq!(code, Some(1), "{partial}");
        assert_eq!(partial["invalid"][0]["stream"], bad, "{partial}");
        let signed: Vec<&str> = partial["signed"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["stream"].as_str().unwrap())
            .collect();
        assert!(signed.contains(&"pod-x/1"), "{partial}");
        store.close().await;
        if let (Some(schema), Ok(admin_url)) = (schema, std::env::var("TOOLGATE_TEST_DATABASE_URL"))
        {
            let admin = sqlx::PgPool::connect(&admin_url).await.unwrap();
            let _ = sqlx::query(&format!("DROP SCHEMA {schema} CASCADE"))
                .execute(&admin)
                .await;
            admin.close().await;
        }
    }
}
