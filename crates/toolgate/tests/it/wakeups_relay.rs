//! `toolgate wakeups serve`, the real process on the real database: a
//! subscriber hears its tenant's stops (runs and scopes) and nothing of
//! other tenants; events carry no ids.

use std::process::{Command, Stdio};
use std::time::Duration;

use jiff::Timestamp;
use toolgate_policy::{RunId, Scope};
use toolgate_store::Store;

use crate::common::{SidecarProcess, free_port};

fn database() -> Option<String> {
    match std::env::var("TOOLGATE_TEST_DATABASE_URL") {
        Ok(url) if !url.is_empty() => Some(url),
        _ if std::env::var("CI").as_deref() == Ok("true") => {
            panic!("CI=true but TOOLGATE_TEST_DATABASE_URL is not set")
        }
        _ => {
            eprintln!("SKIP wake-up relay test: TOOLGATE_TEST_DATABASE_URL is not set");
            None
        }
    }
}

/// The text of the stream that arrives within `wait`.
async fn within(response: &mut reqwest::Response, wait: Duration) -> String {
    let mut got = String::new();
    let deadline = tokio::time::Instant::now() + wait;
    while let Ok(Ok(Some(chunk))) = tokio::time::timeout_at(deadline, response.chunk()).await {
        got.push_str(&String::from_utf8_lossy(&chunk));
        if got.contains("event: stop") {
            break;
        }
    }
    got
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_hears_its_tenants_stops_and_nothing_else() {
    let Some(url) = database() else { return };
    let store = Store::connect(&url).await.expect("connect and migrate");
    let port = free_port();
    let _relay = SidecarProcess(
        Command::new(env!("CARGO_BIN_EXE_toolgate"))
            .args(["wakeups", "serve", "--database", &url, "--listen"])
            .arg(format!("127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn the relay"),
    );
    let base = format!("http://127.0.0.1:{port}");
    let client = reqwest::Client::new();
    let suffix = format!(
        "{:x}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    );
    let (mine, theirs) = (format!("relay-a-{suffix}"), format!("relay-b-{suffix}"));
    let mut stream = None;
    for _ in 0..100 {
        if let Ok(r) = client.get(format!("{base}/v1/wakeups/{mine}")).send().await {
            stream = Some(r);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut stream = stream.expect("the relay listens");
    assert_eq!(stream.status(), 200);
    assert_eq!(
        stream.headers()["content-type"].to_str().unwrap(),
        "text/event-stream"
    );
    // One event on connecting: whatever happened before is read then.
    assert!(
        within(&mut stream, Duration::from_secs(5))
            .await
            .contains("event: stop")
    );

    // Another tenant's stop is not heard.
    let runs = store.runs();
    let run = |n: &str| RunId::parse(&format!("run-{n}-{suffix}")).unwrap();
    runs.cancel(&theirs, &run("b"), None, "alice", Timestamp::now())
        .await
        .unwrap();
    let quiet = within(&mut stream, Duration::from_millis(1500)).await;
    assert!(!quiet.contains("event: stop"), "{quiet}");

    // This tenant's run stop is, without its id.
    runs.cancel(&mine, &run("a"), None, "alice", Timestamp::now())
        .await
        .unwrap();
    let heard = within(&mut stream, Duration::from_secs(5)).await;
    assert!(heard.contains("event: stop"), "{heard:?}");
    assert!(
        !heard.contains("run-a"),
        "ids stay in the database: {heard}"
    );
    // And a scope stop (migration 0016's trigger).
    runs.cancel_scope(&mine, &Scope::Namespace, None, "alice", Timestamp::now())
        .await
        .unwrap();
    let heard = within(&mut stream, Duration::from_secs(5)).await;
    assert!(heard.contains("event: stop"), "{heard:?}");

    // A tenant the store would refuse is refused with the error envelope.
    let bad = client
        .get(format!("{base}/v1/wakeups/%20"))
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 400);
    let body: serde_json::Value = bad.json().await.unwrap();
    assert_eq!(body["error"]["code"], "invalid_tenant");
    store.close().await;
}
