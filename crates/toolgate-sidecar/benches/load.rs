//! Load benchmark: `POST /v1/authorize` over loopback HTTP at fixed rates and
//! at peak, beside a trivial axum handler measured the same way in the same
//! run; and high-risk authorize+intent latency beside a bare PostgreSQL
//! INSERT commit through the same database.
//!
//!   cargo bench -p toolgate-sidecar --bench load
//!   TOOLGATE_BENCH_DATABASE_URL=postgres://postgres@127.0.0.1:5432/db cargo bench -p toolgate-sidecar --bench load
//!
//! The server runs on a one-worker runtime and the load generator on another
//! thread, so each has a core of its own on a two-core machine. Latency is
//! measured from each request's scheduled send time (open loop), so a stall
//! is charged to every request it delays.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use jiff::{SignedDuration, Timestamp};
use serde_json::{Value, json};
use toolgate_bundle::{BundleInput, ProfileRef, SigningKey};
use toolgate_sidecar::{Sidecar, SidecarConfig};

const SPEC: &str = r#"
mode: rules
rules:
  bash: {deny: ["rm *"], allow: ["git *", "ls*"], escalate: ["*"]}
  reader: {allow: ["src/*", "docs/*"], deny: ["*secret*"]}
  "*": {deny: ["*password*"]}
hardline: {paths: ["**/.env"], commands: ["mkfs*"]}
effects:
  bash: {sideEffect: PROCESS_EXEC, risk: high}
  reader: {sideEffect: WORKSPACE_READ, risk: low, readOnly: true, allowParallel: true}
"#;

fn body() -> Value {
    json!({"tool": "reader", "arguments": {"path": "src/main.rs"}, "run_id": "bench", "step_id": "s1"})
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

fn us(d: Duration) -> String {
    format!("{:.0} µs", d.as_secs_f64() * 1e6)
}

/// Open loop: requests are started on a fixed schedule of `rate` per second
/// for `secs`, without waiting for earlier answers. Latency runs from each
/// request's actual start (the timer wheel has 1 ms granularity, so sends
/// are started in small bursts that keep the average rate); the achieved
/// rate is reported beside it.
async fn fixed_rate(
    client: &reqwest::Client,
    url: &str,
    rate: u32,
    secs: u64,
) -> (Duration, Duration, usize, u64, f64) {
    let total = rate as u64 * secs;
    let start = Instant::now();
    let mut handles = Vec::with_capacity(total as usize);
    for i in 0..total {
        let due = start + Duration::from_secs_f64(i as f64 / rate as f64);
        if due > Instant::now() {
            tokio::time::sleep_until(due.into()).await;
        }
        let (client, url) = (client.clone(), url.to_owned());
        handles.push(tokio::spawn(async move {
            let sent = Instant::now();
            let ok = client
                .post(&url)
                .json(&body())
                .send()
                .await
                .is_ok_and(|r| r.status().is_success());
            (sent.elapsed(), ok)
        }));
    }
    let achieved = total as f64 / start.elapsed().as_secs_f64();
    let mut lat = Vec::with_capacity(handles.len());
    let mut errors = 0;
    for h in handles {
        let (d, ok) = h.await.unwrap();
        if !ok {
            errors += 1;
        }
        lat.push(d);
    }
    lat.sort();
    (
        percentile(&lat, 0.5),
        percentile(&lat, 0.99),
        lat.len(),
        errors,
        achieved,
    )
}

/// Closed loop: `conns` workers as fast as they can for `secs`.
async fn peak(client: &reqwest::Client, url: &str, conns: usize, secs: u64) -> f64 {
    let deadline = Instant::now() + Duration::from_secs(secs);
    let mut handles = Vec::new();
    for _ in 0..conns {
        let (client, url) = (client.clone(), url.to_owned());
        handles.push(tokio::spawn(async move {
            let mut n = 0u64;
            while Instant::now() < deadline {
                if client
                    .post(&url)
                    .json(&body())
                    .send()
                    .await
                    .is_ok_and(|r| r.status().is_success())
                {
                    n += 1;
                }
            }
            n
        }));
    }
    let mut total = 0;
    for h in handles {
        total += h.await.unwrap();
    }
    total as f64 / secs as f64
}

fn server_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap()
}

async fn trivial_server() -> SocketAddr {
    use axum::routing::post;
    let app = axum::Router::new().route(
        "/v1/authorize",
        post(|axum::Json(v): axum::Json<Value>| async move {
            axum::Json(json!({"verdict": "allow", "reason": "allow_rule", "tool": v["tool"]}))
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr
}

async fn start_sidecar(dir: &std::path::Path, url: &str) -> Sidecar {
    let key = SigningKey::from_seed(&[1; 32]);
    let (_, bytes) = toolgate_bundle::build(
        BundleInput {
            profile: ProfileRef {
                name: "bench".into(),
                namespace: None,
            },
            spec: toolgate_policy::load::from_str(SPEC).unwrap(),
            grants: vec![],
            sequence: 1,
            issued_at: Timestamp::now(),
            expires_at: Timestamp::now() + SignedDuration::from_hours(1),
        },
        &key,
    )
    .unwrap();
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
    config.tenant = format!("bench-{}", std::process::id());
    Sidecar::start(config).await.unwrap()
}

fn main() {
    let dir = tempfile::tempdir().unwrap();
    let pg = std::env::var("TOOLGATE_BENCH_DATABASE_URL")
        .ok()
        .filter(|u| !u.is_empty());
    let url = pg.clone().unwrap_or_else(|| {
        format!(
            "sqlite://{}?mode=rwc",
            dir.path().join("bench.db").display()
        )
    });
    let secs: u64 = std::env::var("TOOLGATE_BENCH_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);

    let server = server_runtime();
    let (sidecar_addr, trivial_addr) = server.block_on(async {
        let sidecar = start_sidecar(dir.path(), &url).await;
        let addr = sidecar.addr;
        std::mem::forget(sidecar); // lives for the whole benchmark
        (addr, trivial_server().await)
    });

    let client_rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // High-risk first: the low-risk phases below queue tens of thousands of
    // batched decision records for the same tenant chain, whose writes would
    // otherwise compete with these synchronous appends.
    if let Some(pg) = &pg {
        client_rt.block_on(high_risk(pg, sidecar_addr));
    } else {
        println!(
            "(set TOOLGATE_BENCH_DATABASE_URL for the high-risk authorize+intent vs bare INSERT comparison)"
        );
    }
    client_rt.block_on(async {
        let client = reqwest::Client::builder()
            .pool_max_idle_per_host(256)
            .build()
            .unwrap();
        let targets = [
            (
                "toolgate authorize",
                format!("http://{sidecar_addr}/v1/authorize"),
            ),
            (
                "trivial axum",
                format!("http://{trivial_addr}/v1/authorize"),
            ),
        ];
        // Warm up connections and caches.
        for (_, u) in &targets {
            let _ = fixed_rate(&client, u, 1000, 1).await;
        }
        println!(
            "database: {}",
            if pg.is_some() { "postgresql" } else { "sqlite" }
        );
        println!(
            "{:<20} {:>8} {:>9} {:>10} {:>10} {:>8} {:>7}",
            "target", "rate/s", "achieved", "p50", "p99", "requests", "errors"
        );
        for rate in [1000u32, 5000] {
            for (name, u) in &targets {
                let (p50, p99, n, errors, achieved) = fixed_rate(&client, u, rate, secs).await;
                println!(
                    "{name:<20} {rate:>8} {achieved:>9.0} {:>10} {:>10} {n:>8} {errors:>7}",
                    us(p50),
                    us(p99)
                );
            }
        }
        let mut peaks = Vec::new();
        for (name, u) in &targets {
            let rps = peak(&client, u, 32, secs).await;
            println!("{name:<20} peak {rps:>10.0} req/s (32 connections)");
            peaks.push(rps);
        }
        println!("peak ratio toolgate/trivial: {:.2}", peaks[0] / peaks[1]);
    });

    drop(server);
}

/// Sequential high-risk authorize + intent, beside a bare INSERT commit.
async fn high_risk(pg: &str, addr: SocketAddr) {
    let client = reqwest::Client::new();
    let n = 500;
    let mut flow = Vec::with_capacity(n);
    for i in 0..n + 50 {
        let t = Instant::now();
        let v: Value = client
            .post(format!("http://{addr}/v1/authorize"))
            .json(&json!({"tool": "bash", "arguments": {"command": format!("git log -{i}")}, "run_id": "hr", "step_id": format!("s{i}")}))
            .send().await.unwrap().json().await.unwrap();
        assert_eq!(v["verdict"], "allow", "{v}");
        let r = client
            .post(format!("http://{addr}/v1/intents"))
            .json(&json!({"decision_id": v["decision_id"], "run_id": "hr", "step_id": format!("s{i}"), "tool": "bash", "args_digest": v["args_digest"]}))
            .send().await.unwrap();
        assert_eq!(r.status().as_u16(), 201);
        if i >= 50 {
            flow.push(t.elapsed());
        }
    }
    // The same flow while 50 approval long-polls are parked on this
    // sidecar: they share one LISTEN connection, so the appends above keep
    // their pooled connections.
    let v: Value = client
        .post(format!("http://{addr}/v1/authorize"))
        .json(
            &json!({"tool": "bash", "arguments": {"command": "make release"}, "run_id": "hr-wait"}),
        )
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let approval = v["approval_id"].as_str().unwrap().to_owned();
    let waiters: Vec<_> = (0..50)
        .map(|_| {
            let (client, url) = (
                client.clone(),
                format!("http://{addr}/v1/approvals/{approval}?wait=15"),
            );
            tokio::spawn(async move { client.get(url).send().await.map(|r| r.status().as_u16()) })
        })
        .collect();
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let mut parked = Vec::with_capacity(200);
    for i in 0..200 {
        let t = Instant::now();
        let v: Value = client
            .post(format!("http://{addr}/v1/authorize"))
            .json(&json!({"tool": "bash", "arguments": {"command": format!("git show -{i}")}, "run_id": "hr-wait", "step_id": format!("w{i}")}))
            .send().await.unwrap().json().await.unwrap();
        assert_eq!(v["verdict"], "allow", "{v}");
        parked.push(t.elapsed());
    }
    parked.sort();
    println!(
        "high-risk authorize with 50 parked approval waits: p50 {} p99 {} max {}",
        us(percentile(&parked, 0.5)),
        us(percentile(&parked, 0.99)),
        us(*parked.last().unwrap())
    );
    for w in waiters {
        assert_eq!(w.await.unwrap().unwrap(), 200);
    }
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(4)
        .connect(pg)
        .await
        .unwrap();
    let mut bare = Vec::with_capacity(n);
    let mut conn = pool.acquire().await.unwrap();
    // A regular (WAL-logged) table: a temporary one would skip the very
    // commit cost being compared.
    let table = format!("bare_bench_{}", std::process::id());
    sqlx::query(&format!(
        "CREATE TABLE {table} (id TEXT PRIMARY KEY, run_id TEXT, body TEXT, created_at BIGINT)"
    ))
    .execute(&mut *conn)
    .await
    .unwrap();
    for i in 0..n + 50 {
        let t = Instant::now();
        sqlx::query(&format!(
            "INSERT INTO {table} (id, run_id, body, created_at) VALUES ($1, $2, $3, $4)"
        ))
        .bind(format!("{}-{i}", std::process::id()))
        .bind("hr")
        .bind("{\"tool\":\"bash\"}")
        .bind(i as i64)
        .execute(&mut *conn)
        .await
        .unwrap();
        if i >= 50 {
            bare.push(t.elapsed());
        }
    }
    let _ = sqlx::query(&format!("DROP TABLE {table}"))
        .execute(&mut *conn)
        .await;
    flow.sort();
    bare.sort();
    println!(
        "high-risk authorize+intent: p50 {} p99 {} | bare INSERT commit: p50 {} p99 {} | p99 ratio {:.2}",
        us(percentile(&flow, 0.5)),
        us(percentile(&flow, 0.99)),
        us(percentile(&bare, 0.5)),
        us(percentile(&bare, 0.99)),
        percentile(&flow, 0.99).as_secs_f64() / percentile(&bare, 0.99).as_secs_f64()
    );
}
