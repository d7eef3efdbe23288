//! `toolgate audit log` against a real SQLite file and a PostgreSQL
//! schema (`TOOLGATE_TEST_DATABASE_URL`; required when `CI=true`):
//! filters, pages that return every row once and in order, JSON lines,
//! `--verify` catching a row the owner edited, refused filters, and
//! tenant roles each reading only their own log.

use std::process::Command;

use serde_json::Value;
use toolgate_store::{DecisionRecord, Store};

/// Runs `toolgate audit log ARGS`: exit code and stdout.
fn audit_log(args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(["audit", "log"])
        .args(args)
        .env_remove("TOOLGATE_DATABASE_URL")
        .output()
        .expect("run toolgate");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// Every stdout line parsed as JSON.
fn lines(stdout: &str) -> Vec<Value> {
    stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l:?}")))
        .collect()
}

fn ids(rows: &[Value]) -> Vec<String> {
    rows.iter()
        .map(|r| r["decision_id"].as_str().unwrap().to_owned())
        .collect()
}

fn record(i: usize, t0: jiff::Timestamp) -> DecisionRecord {
    let deny = i.is_multiple_of(3);
    DecisionRecord {
        decision_id: format!("d{i:02}"),
        run_id: format!("r{}", i % 2),
        step_id: format!("s{i}"),
        tool: if i < 5 { "bash" } else { "fs.write" }.into(),
        verdict: if deny { "deny" } else { "allow" }.into(),
        reason: if deny { "deny_rule" } else { "allow_rule" }.into(),
        message: (i == 4).then(|| r#"{"flow_labels_set":["private"]}"#.to_owned()),
        matched_rule: Some(format!("rule-{i}")),
        policy_version: if i < 7 { "p@1" } else { "p@2" }.into(),
        risk: "low".into(),
        args_digest: format!("sha256:{i}"),
        call_digest: Some(format!("sha256:c{i}")),
        definition_digest: None,
        created_at: t0 + jiff::SignedDuration::from_secs(i as i64),
    }
}

/// A database URL per engine: a SQLite file, and a fresh schema of
/// `TOOLGATE_TEST_DATABASE_URL` (with that schema's name) when set.
pub(crate) async fn engines(dir: &std::path::Path) -> Vec<(String, Option<String>)> {
    let mut out = vec![(
        format!("sqlite://{}?mode=rwc", dir.join("log.db").display()),
        None,
    )];
    if let Some(admin_url) = admin_url() {
        let schema = format!("alog_{}", uuid_like());
        out.push((schema_url(&admin_url, &schema).await, Some(schema)));
    }
    out
}

/// `TOOLGATE_TEST_DATABASE_URL`; unset, `None` (skip), but under `CI=true`
/// a failure: CI must prove both engines.
fn admin_url() -> Option<String> {
    match std::env::var("TOOLGATE_TEST_DATABASE_URL") {
        Ok(url) if !url.is_empty() => Some(url),
        _ if std::env::var("CI").as_deref() == Ok("true") => {
            panic!("CI=true but TOOLGATE_TEST_DATABASE_URL is not set")
        }
        _ => {
            eprintln!("SKIP postgres variant: TOOLGATE_TEST_DATABASE_URL is not set");
            None
        }
    }
}

/// Creates `schema` and returns the admin URL that works in it.
async fn schema_url(admin_url: &str, schema: &str) -> String {
    let admin = sqlx::PgPool::connect(admin_url).await.unwrap();
    sqlx::query(&format!("CREATE SCHEMA {schema}"))
        .execute(&admin)
        .await
        .unwrap();
    admin.close().await;
    let sep = if admin_url.contains('?') { '&' } else { '?' };
    format!("{admin_url}{sep}options=-c%20search_path%3D{schema}")
}

async fn drop_schema(schema: &str) {
    let admin = sqlx::PgPool::connect(&admin_url().unwrap()).await.unwrap();
    let _ = sqlx::query(&format!("DROP SCHEMA {schema} CASCADE"))
        .execute(&admin)
        .await;
    admin.close().await;
}

fn uuid_like() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{nanos:x}{:x}", std::process::id())
}

/// Every page of `args` in JSON, `limit` rows at a time, continuing from
/// each page's last cursor until a page comes back empty.
fn all_pages(url: &str, args: &[&str], limit: &str) -> Vec<Value> {
    let mut rows = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let mut full = vec!["--database", url, "--format", "json", "--limit", limit];
        full.extend_from_slice(args);
        if let Some(a) = &after {
            full.extend(["--after", a.as_str()]);
        }
        let (code, stdout) = audit_log(&full);
        assert_eq!(code, Some(0), "{stdout}");
        let page = lines(&stdout);
        // With --verify the page ends with its verification, no cursor.
        let Some(last) = page.iter().rev().find(|r| r.get("cursor").is_some()) else {
            return rows;
        };
        after = Some(last["cursor"].as_str().unwrap().to_owned());
        rows.extend(page);
    }
}

#[tokio::test]
async fn audit_log_filters_pages_and_verifies() {
    let dir = tempfile::tempdir().unwrap();
    let t0 = jiff::Timestamp::from_millisecond(jiff::Timestamp::now().as_millisecond()).unwrap();
    for (url, schema) in engines(dir.path()).await {
        let store = Store::connect(&url).await.unwrap();
        for i in 0..10 {
            let stream = if i % 2 == 0 { "pod-a/1" } else { "pod-a/2" };
            store
                .decisions()
                .append("team-a", stream, record(i, t0))
                .await
                .unwrap();
            store
                .decisions()
                .append("team-b", "pod-b/1", record(i, t0))
                .await
                .unwrap();
        }
        let a = ["--tenant", "team-a"];
        let want: Vec<String> = (0..10).map(|i| format!("d{i:02}")).collect();
        for limit in ["1", "3", "10", "100"] {
            assert_eq!(ids(&all_pages(&url, &a, limit)), want, "limit {limit}");
        }
        let both = all_pages(&url, &[], "7");
        assert_eq!(both.len(), 20);
        assert!(both[..10].iter().all(|r| r["tenant"] == "team-a"));
        let d4 = &all_pages(&url, &a, "100")[4];
        assert_eq!(d4["flow_labels_set"], serde_json::json!(["private"]));
        assert_eq!(
            (
                &d4["stream"],
                &d4["seq"],
                &d4["matched_rule"],
                &d4["run_id"]
            ),
            (&"pod-a/1".into(), &3.into(), &"rule-4".into(), &"r0".into())
        );
        filters(&url, t0);
        refusals(&url);
        tampering(&store, &url).await;
        store.close().await;
        if let Some(schema) = schema {
            drop_schema(&schema).await;
        }
    }
}

/// Each filter, alone and together, on team-a.
fn filters(url: &str, t0: jiff::Timestamp) {
    let at = |s: i64| (t0 + jiff::SignedDuration::from_secs(s)).to_string();
    let (since, until) = (at(2), at(5));
    let cases: [(Vec<&str>, Vec<&str>); 7] = [
        (vec!["--run", "r1"], vec!["d01", "d03", "d05", "d07", "d09"]),
        (vec!["--verdict", "deny"], vec!["d00", "d03", "d06", "d09"]),
        (
            vec!["--tool", "bash", "--verdict", "allow"],
            vec!["d01", "d02", "d04"],
        ),
        (
            vec!["--reason", "deny_rule", "--policy-version", "p@2"],
            vec!["d09"],
        ),
        (
            vec!["--since", &since, "--until", &until],
            vec!["d02", "d03", "d04"],
        ),
        (vec!["--since", "1h", "--verdict", "escalate"], vec![]),
        (vec!["--until", "1d"], vec![]),
    ];
    for (args, want) in cases {
        let mut full = vec!["--tenant", "team-a"];
        full.extend(&args);
        assert_eq!(ids(&all_pages(url, &full, "2")), want, "{args:?}");
    }
    // The table: a header, the rows, and where the next page starts.
    let (code, table) = audit_log(&["--database", url, "--tenant", "team-a", "--limit", "3"]);
    assert_eq!(code, Some(0), "{table}");
    let text: Vec<&str> = table.lines().collect();
    assert!(
        text[0].starts_with("TIME") && text[0].contains("VERDICT"),
        "{table}"
    );
    assert_eq!(text.len(), 5, "{table}");
    assert!(
        text[1].contains("d00") && text[1].contains("deny_rule"),
        "{table}"
    );
    let cursor = text[4].strip_prefix("more: --after ").expect("a next page");
    let (_, next) = audit_log(&[
        "--database",
        url,
        "--tenant",
        "team-a",
        "--limit",
        "3",
        "--after",
        cursor,
    ]);
    assert!(next.lines().nth(1).unwrap().contains("d03"), "{next}");
    let (_, none) = audit_log(&["--database", url, "--tenant", "nobody"]);
    assert_eq!(none.trim(), "no decisions match");
}

/// Bad filters: the CLI's error envelope, exit 2, naming the flag.
fn refusals(url: &str) {
    for (args, flag) in [
        (vec!["--verdict", "maybe"], "--verdict"),
        (vec!["--reason", "because"], "--reason"),
        (vec!["--since", "yesterday"], "--since"),
        (vec!["--until", "2026-13-01T00:00:00Z"], "--until"),
        (vec!["--limit", "0"], "--limit"),
        (vec!["--limit", "10001"], "--limit"),
        (vec!["--after", "c1.zz"], "--after"),
    ] {
        let mut full = vec!["--database", url];
        full.extend(&args);
        let (code, stdout) = audit_log(&full);
        assert_eq!(code, Some(2), "{args:?}: {stdout}");
        let err = &lines(&stdout)[0]["error"];
        assert_eq!(err["code"], "usage", "{stdout}");
        assert!(
            err["message"].as_str().unwrap().starts_with(flag),
            "{stdout}"
        );
    }
    let (code, stdout) = audit_log(&["--database", url, "--since", "1h", "--until", "2h"]);
    assert_eq!(code, Some(2), "{stdout}");
    assert_eq!(lines(&stdout)[0]["error"]["code"], "invalid_input");
}

/// `--verify` passes, then fails once the owner edits a printed row.
async fn tampering(store: &Store, url: &str) {
    let args = [
        "--database",
        url,
        "--tenant",
        "team-a",
        "--run",
        "r1",
        "--verify",
    ];
    let (code, stdout) = audit_log(&[&args[..], &["--format", "json"]].concat());
    assert_eq!(code, Some(0), "{stdout}");
    let out = lines(&stdout);
    assert_eq!(out.len(), 6, "five rows and the verification");
    assert_eq!(out[5]["verify"]["ok"], true, "{stdout}");
    let (code, table) = audit_log(&args);
    assert_eq!(code, Some(0), "{table}");
    assert!(
        table.trim_end().ends_with("rows through their heads)"),
        "{table}"
    );

    // d05 is seq 3 of pod-a/2.
    let sql = "UPDATE decisions SET tool = 'bash' WHERE tenant = 'team-a' \
               AND stream = 'pod-a/2' AND seq = 3";
    match (store.as_sqlite(), store.as_postgres()) {
        (Some(p), _) => drop(sqlx::query(sql).execute(p).await.unwrap()),
        (_, Some(p)) => drop(sqlx::query(sql).execute(p).await.unwrap()),
        _ => unreachable!(),
    }
    let (code, stdout) = audit_log(&[&args[..], &["--format", "json"]].concat());
    assert_eq!(code, Some(1), "{stdout}");
    let out = lines(&stdout);
    let verify = &out.last().unwrap()["verify"];
    assert_eq!(verify["ok"], false, "{stdout}");
    let broken: Vec<&Value> = verify["chains"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["ok"] == false)
        .collect();
    assert_eq!(broken.len(), 1, "{stdout}");
    assert_eq!(
        (&broken[0]["stream"], &broken[0]["first_broken_seq"]),
        (&"pod-a/2".into(), &3.into())
    );
    let (code, table) = audit_log(&args);
    assert_eq!(code, Some(1), "{table}");
    assert!(
        table.contains("chain: BROKEN team-a/pod-a/2 at seq 3"),
        "{table}"
    );
}

/// Two tenants provisioned with `toolgate tenant provision`, each writing
/// as its own role: each one's `audit log` shows only its rows, even when
/// it names the other; the owner sees both and filters by tenant.
#[tokio::test]
async fn audit_log_as_tenant_roles_reads_only_their_own() {
    let Some(admin) = admin_url() else {
        return;
    };
    let suffix = uuid_like();
    let schema = format!("alogt_{suffix}");
    let owner = schema_url(&admin, &schema).await;
    Store::connect(&owner).await.unwrap().close().await;
    let t0 = jiff::Timestamp::from_millisecond(jiff::Timestamp::now().as_millisecond()).unwrap();
    let tenants = [format!("la-{suffix}"), format!("lb-{suffix}")];
    let mut urls = Vec::new();
    let mut roles = Vec::new();
    for (n, tenant) in tenants.iter().enumerate() {
        let out = Command::new(env!("CARGO_BIN_EXE_toolgate"))
            .args([
                "tenant",
                "provision",
                "--database",
                &owner,
                "--tenant",
                tenant,
            ])
            .output()
            .unwrap();
        let creds: Value = serde_json::from_slice(&out.stdout).expect("provisioned");
        let url = creds["database_url"].as_str().unwrap().to_owned();
        roles.push(creds["role"].as_str().unwrap().to_owned());
        let store = Store::connect(&url).await.unwrap();
        for i in 0..3 {
            store
                .decisions()
                .append(tenant, "pod/1", record(n * 3 + i, t0))
                .await
                .unwrap();
        }
        store.close().await;
        urls.push(url);
    }
    for (n, url) in urls.iter().enumerate() {
        let own: Vec<String> = (0..3).map(|i| format!("d{:02}", n * 3 + i)).collect();
        let rows = all_pages(url, &["--verify"], "2");
        let (rows, checks): (Vec<Value>, Vec<Value>) =
            rows.into_iter().partition(|r| r.get("verify").is_none());
        assert_eq!(ids(&rows), own);
        assert!(rows.iter().all(|r| r["tenant"] == tenants[n].as_str()));
        assert!(
            checks.iter().all(|c| c["verify"]["ok"] == true),
            "{checks:?}"
        );
        let other = &tenants[1 - n];
        assert!(all_pages(url, &["--tenant", other], "10").is_empty());
    }
    assert_eq!(all_pages(&owner, &[], "4").len(), 6);
    let b = all_pages(&owner, &["--tenant", &tenants[1]], "4");
    assert_eq!(ids(&b), ["d03", "d04", "d05"]);

    drop_schema(&schema).await;
    let admin_pool = sqlx::PgPool::connect(&admin).await.unwrap();
    for role in roles {
        let _ = sqlx::raw_sql(&format!(
            "DROP OWNED BY \"{role}\"; DROP ROLE IF EXISTS \"{role}\""
        ))
        .execute(&admin_pool)
        .await;
    }
    admin_pool.close().await;
}
