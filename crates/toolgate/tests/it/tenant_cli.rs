//! `toolgate tenant provision` against a real PostgreSQL, then a connection
//! with the URL it prints.
//!
//! The admin URL comes from `TOOLGATE_TEST_DATABASE_URL`; unset, the test
//! prints a skip notice and passes, unless `CI=true`, when it fails.

use std::hash::{BuildHasher, Hasher};
use std::process::Command;

use serde_json::Value;
use toolgate_store::Store;

fn toolgate(args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(args)
        .env_remove("TOOLGATE_DATABASE_URL")
        .output()
        .expect("run toolgate");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

fn random_suffix() -> String {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos(),
    );
    format!("{:010x}", h.finish() & 0xff_ffff_ffff)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenant_provision_prints_a_working_url() {
    let ci = std::env::var("CI").is_ok_and(|v| v == "true");
    let admin_url = match std::env::var("TOOLGATE_TEST_DATABASE_URL") {
        Ok(u) if !u.is_empty() => u,
        _ if ci => panic!("CI=true but TOOLGATE_TEST_DATABASE_URL is not set"),
        _ => {
            eprintln!("SKIP: set TOOLGATE_TEST_DATABASE_URL to run the tenant CLI test");
            return;
        }
    };
    let suffix = random_suffix();
    let schema = format!("tcli_{suffix}");
    let root = sqlx::PgPool::connect(&admin_url)
        .await
        .expect("PostgreSQL at TOOLGATE_TEST_DATABASE_URL unreachable");
    sqlx::query(&format!("CREATE SCHEMA {schema}"))
        .execute(&root)
        .await
        .unwrap();
    let sep = if admin_url.contains('?') { '&' } else { '?' };
    let url = format!("{admin_url}{sep}options=-c%20search_path%3D{schema}");
    let tenant = format!("cli-{suffix}");

    let (code, stdout) = toolgate(&[
        "tenant",
        "provision",
        "--database",
        &url,
        "--tenant",
        &tenant,
    ]);
    let outcome = {
        let (schema, url, tenant) = (schema.clone(), url.clone(), tenant.clone());
        async move {
            assert_eq!(code, Some(0), "{stdout}");
            assert_eq!(stdout.lines().count(), 1, "exactly one JSON line: {stdout}");
            let creds: Value = serde_json::from_str(&stdout).expect("JSON on stdout");
            let obj = creds.as_object().expect("an object");
            let mut keys: Vec<_> = obj.keys().map(String::as_str).collect();
            keys.sort_unstable();
            assert_eq!(keys, ["database_url", "role", "tenant"]);
            assert_eq!(creds["tenant"], tenant.as_str());
            let role = creds["role"].as_str().unwrap().to_owned();
            let tenant_url = creds["database_url"].as_str().unwrap();
            assert!(tenant_url.contains(&format!("://{role}:")), "{tenant_url}");
            assert!(
                tenant_url.contains(&schema),
                "parameters are kept: {tenant_url}"
            );

            // The printed URL works, as the tenant and only the tenant.
            let store = Store::connect(tenant_url)
                .await
                .expect("connect as the tenant");
            assert_eq!(
                store.session_tenant().await.unwrap().as_deref(),
                Some(tenant.as_str())
            );
            let err = store
                .approvals()
                .resolve(
                    &tenant,
                    "nope",
                    toolgate_store::ApprovalDecision::Approved,
                    "me",
                    None,
                    jiff::Timestamp::now(),
                )
                .await
                .unwrap_err();
            assert_eq!(err.code(), "permission_denied", "{err}");
            store.close().await;

            // Errors use the CLI's envelope and exit code.
            for (args, want) in [
                (
                    vec!["--database", url.as_str(), "--tenant", "Not_A_Namespace"],
                    "invalid_input",
                ),
                (
                    vec!["--database", "sqlite::memory:", "--tenant", "team-a"],
                    "tenancy_unsupported",
                ),
            ] {
                let mut full = vec!["tenant", "provision"];
                full.extend(args);
                let (code, out) = toolgate(&full);
                let body: Value = serde_json::from_str(&out).expect("error JSON");
                assert_eq!(
                    (code, body["error"]["code"].as_str()),
                    (Some(2), Some(want)),
                    "{out}"
                );
            }
            role
        }
    };
    // Clean up whatever happened (roles are cluster-global).
    let role = tokio::spawn(outcome).await;
    let _ = sqlx::query(&format!("DROP SCHEMA {schema} CASCADE"))
        .execute(&root)
        .await;
    let role_name: Option<String> =
        sqlx::query_scalar("SELECT rolname::text FROM pg_roles WHERE rolname LIKE $1")
            .bind(format!("tg_t_cli_{suffix}_%"))
            .fetch_optional(&root)
            .await
            .unwrap();
    if let Some(r) = role_name {
        let _ = sqlx::raw_sql(&format!("DROP OWNED BY \"{r}\"; DROP ROLE \"{r}\""))
            .execute(&root)
            .await;
    }
    root.close().await;
    let role = role.unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()));
    assert!(role.starts_with("tg_t_cli_"));
}
