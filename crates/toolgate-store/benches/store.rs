//! Store overhead benchmark on PostgreSQL.
//!
//! `TOOLGATE_BENCH_DATABASE_URL=postgres://… cargo bench -p toolgate-store --bench store`
//!
//! For concurrency 1, 16 and 64 it measures, through one pool in one run:
//! - intents: `begin` + `complete` per second, beside a bare INSERT + UPDATE
//!   of the same row shape into a copy of the table;
//! - decisions: `append` per second, beside a bare INSERT of the same rows
//!   into a copy of the table without the chain, for three shapes: one
//!   tenant per worker; one tenant whose workers each append to their own
//!   stream (the sidecars of one tenant, each its own stream: the shape
//!   production has); and all workers on one shared stream of one tenant
//!   (what one chain per tenant was: every append waits for one head row).
//!
//! The connection is the tables' owner, as a deployment with one database
//! credential has it. The last lines (concurrency 16 and 64) run the
//! stream-per-worker shape as a tenant's own role (`provision_tenant_at`),
//! which appends through `toolgate_append_decision` (migration 0010). Its
//! bare INSERTs are made by the same role, once into a copy of decisions
//! under the same row-level security (the chain's cost) and once into a
//! copy without it (the chain's and tenancy's cost together). A last pair
//! of lines appends batches of 16 as that role (`toolgate_append_decisions`,
//! migration 0011) beside one multi-row INSERT of the same rows under the
//! same row-level security.
//!
//! and prints store/bare ratios. Store and bare runs alternate in short
//! slices so background load affects both alike. `TOOLGATE_BENCH_SECONDS` (default 2) sets the
//! measuring time per line. Runs in a fresh schema that is dropped afterwards.

use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use toolgate_store::{DecisionRecord, IntentOutcome, NewIntent, Store};

const CONCURRENCY: [usize; 3] = [1, 16, 64];

#[tokio::main]
async fn main() {
    // `cargo bench` passes `--bench`; ignore arguments.
    let Ok(url) = std::env::var("TOOLGATE_BENCH_DATABASE_URL") else {
        eprintln!("TOOLGATE_BENCH_DATABASE_URL is not set; skipping the store benchmark");
        return;
    };
    let seconds: f64 = std::env::var("TOOLGATE_BENCH_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2.0);
    let window = Duration::from_secs_f64(seconds);

    let options = PgConnectOptions::from_str(&url).expect("parse TOOLGATE_BENCH_DATABASE_URL");
    let admin = PgPoolOptions::new()
        .max_connections(1)
        .connect_with(options.clone())
        .await
        .expect("connect");
    let schema = format!("bench_{}", uuid::Uuid::new_v4().simple());
    sqlx::query(&format!("CREATE SCHEMA {schema}"))
        .execute(&admin)
        .await
        .expect("create schema");
    let pool = PgPoolOptions::new()
        .max_connections(*CONCURRENCY.iter().max().unwrap() as u32)
        .min_connections(*CONCURRENCY.iter().max().unwrap() as u32)
        .connect_with(options.options([("search_path", schema.as_str())]))
        .await
        .expect("connect bench pool");
    let store = Store::from_postgres_pool(pool.clone());
    store.migrate().await.expect("migrate");
    sqlx::raw_sql(
        "CREATE TABLE bare_intents (LIKE intents INCLUDING ALL); \
         CREATE TABLE bare_decisions (LIKE decisions INCLUDING ALL);",
    )
    .execute(&pool)
    .await
    .expect("bare tables");

    println!("toolgate-store benchmark, PostgreSQL, {seconds}s per line");
    println!(
        "{:<44} {:>5} {:>12} {:>12} {:>7}",
        "workload", "conc", "store ops/s", "bare ops/s", "ratio"
    );
    let mut run = 0usize;
    for &c in &CONCURRENCY {
        run += 1;
        let s = store.clone();
        let p = pool.clone();
        let (store_rate, bare_rate) = compare(
            c,
            window,
            move |w, i| {
                let store = s.clone();
                async move {
                    let intent = store
                        .intents()
                        .begin(new_intent(w, i), jiff::Timestamp::now())
                        .await
                        .expect("begin");
                    store
                        .intents()
                        .complete(
                            "bench",
                            &intent.id,
                            IntentOutcome::Completed,
                            None,
                            jiff::Timestamp::now(),
                        )
                        .await
                        .expect("complete");
                }
            },
            move |w, i| {
                let pool = p.clone();
                async move { bare_intent(&pool, w, i).await }
            },
        )
        .await;
        report("intents begin+complete", c, store_rate, bare_rate);

        for shape in [
            Shape::TenantPerWorker,
            Shape::StreamPerWorker,
            Shape::SharedStream,
        ] {
            let tag = format!("r{run}{}", shape.tag());
            let chain = move |w: usize| -> (String, String) {
                match shape {
                    Shape::TenantPerWorker => (format!("{tag}-w{w}"), "pod/1".to_owned()),
                    Shape::StreamPerWorker => (format!("{tag}-t"), format!("pod-{w}/1")),
                    Shape::SharedStream => (format!("{tag}-t"), "pod/1".to_owned()),
                }
            };
            let (store_rate, bare_rate) =
                compare_appends(&store, &pool, "bare_decisions", 1, c, window, chain).await;
            report(shape.label(), c, store_rate, bare_rate);
        }
    }

    let verified = store.decisions().verify(None).await.expect("verify");
    let rows: u64 = verified.iter().map(|r| r.rows).sum();
    assert!(
        verified.iter().all(|r| r.ok),
        "chain broken after benchmark"
    );
    println!("verified {} chains, {rows} rows: ok", verified.len());

    // The same stream-per-worker shape through a tenant's own role. The
    // owner's pool closes first: the two would not fit PostgreSQL's default
    // 100 connections together.
    let id = &schema["bench_".len()..];
    let tenant = format!("bench-{}", &id[..12]);
    let creds = store
        .provision_tenant_at(&tenant, &url)
        .await
        .expect("provision tenant role");
    // A second bare table under the same row-level security as decisions,
    // so that the chain's cost and the cost of tenancy are measured apart.
    sqlx::raw_sql(&format!(
        "CREATE TABLE bare_rls_decisions (LIKE decisions INCLUDING ALL); \
         ALTER TABLE bare_rls_decisions ENABLE ROW LEVEL SECURITY; \
         DO $$ DECLARE p record; BEGIN \
           FOR p IN SELECT policyname, cmd, qual, with_check FROM pg_catalog.pg_policies \
                    WHERE schemaname = current_schema() AND tablename = 'decisions' LOOP \
             EXECUTE format('CREATE POLICY %I ON bare_rls_decisions FOR %s%s%s', \
               p.policyname, p.cmd, coalesce(' USING (' || p.qual || ')', ''), \
               coalesce(' WITH CHECK (' || p.with_check || ')', '')); \
           END LOOP; END $$; \
         GRANT INSERT ON bare_decisions, bare_rls_decisions TO {}",
        creds.role
    ))
    .execute(&pool)
    .await
    .expect("bare tables for the tenant role");
    store.close().await;
    let tenant_options = PgConnectOptions::from_str(&creds.database_url)
        .expect("tenant url")
        .options([("search_path", schema.as_str())]);
    let tenant_pool = PgPoolOptions::new()
        .max_connections(*CONCURRENCY.iter().max().unwrap() as u32)
        .connect_with(tenant_options)
        .await
        .expect("connect as the tenant role");
    let tenant_store = Store::from_postgres_pool(tenant_pool.clone());
    for &c in &CONCURRENCY[1..] {
        for (bare_table, label) in [
            (
                "bare_rls_decisions",
                "decisions append (tenant role, stream/worker)",
            ),
            ("bare_decisions", "  the same, bare INSERT without RLS"),
        ] {
            let t = tenant.clone();
            let chain = move |w: usize| (t.clone(), format!("pod-{w}/c{c}-{bare_table}"));
            let (store_rate, bare_rate) =
                compare_appends(&tenant_store, &tenant_pool, bare_table, 1, c, window, chain).await;
            report(label, c, store_rate, bare_rate);
        }
    }
    // Batches, as the sidecar writes its low-risk decisions: one call of
    // `toolgate_append_decisions` (migration 0011) beside one multi-row
    // INSERT of the same rows under the same row-level security.
    for &c in &CONCURRENCY[1..] {
        let t = tenant.clone();
        let chain = move |w: usize| (t.clone(), format!("pod-{w}/c{c}-batch"));
        let (store_rate, bare_rate) = compare_appends(
            &tenant_store,
            &tenant_pool,
            "bare_rls_decisions",
            BATCH,
            c,
            window,
            chain,
        )
        .await;
        report(
            &format!("  the same, batches of {BATCH} (rows/s)"),
            c,
            store_rate,
            bare_rate,
        );
    }
    let verified = tenant_store
        .decisions()
        .verify(Some(&tenant))
        .await
        .expect("verify as the tenant role");
    assert!(verified.iter().all(|r| r.ok), "tenant chains broken");
    tenant_store.close().await;

    let _ = sqlx::query(&format!("DROP SCHEMA {schema} CASCADE"))
        .execute(&admin)
        .await;
    // Roles are cluster-wide: take the tenant role's grants and the role away.
    let _ = sqlx::raw_sql(&format!(
        "DROP OWNED BY {role}; DROP ROLE {role}",
        role = creds.role
    ))
    .execute(&admin)
    .await;
}

/// Decision appends through `store` beside bare INSERTs of the same rows
/// through `pool`, worker `w` appending to the chain `chain(w)` (tenant,
/// stream), `rows` records at a time: one `append_batch` (what `append`
/// is for one row) beside one INSERT of as many rows into `bare_table`.
/// Rates are rows per second.
async fn compare_appends<C>(
    store: &Store,
    pool: &PgPool,
    bare_table: &'static str,
    rows: usize,
    concurrency: usize,
    window: Duration,
    chain: C,
) -> (f64, f64)
where
    C: Fn(usize) -> (String, String) + Clone + Send + 'static,
{
    let (s, c2, p) = (store.clone(), chain.clone(), pool.clone());
    let seqs = Arc::new(AtomicU64::new(0));
    let records = move |w: usize, i: u64| -> Vec<DecisionRecord> {
        (0..rows as u64)
            .map(|k| record(w, i * rows as u64 + k))
            .collect()
    };
    let (store_rate, bare_rate) =
        compare(
            concurrency,
            window,
            move |w, i| {
                let store = s.clone();
                let (tenant, stream) = c2(w);
                async move {
                    store
                        .decisions()
                        .append_batch(&tenant, &stream, records(w, i))
                        .await
                        .expect("append");
                }
            },
            move |w, i| {
                let pool = p.clone();
                let (tenant, stream) = chain(w);
                let seq = seqs.fetch_add(rows as u64, Ordering::Relaxed) as i64 + 1;
                async move {
                    bare_decisions(&pool, bare_table, &tenant, &stream, seq, records(w, i)).await
                }
            },
        )
        .await;
    (store_rate * rows as f64, bare_rate * rows as f64)
}

/// Rows per batch in the batch lines: the sidecar's decision log flushes
/// what gathered since its last write, a few to a few dozen rows under load.
const BATCH: usize = 16;

/// How decision appends are spread over chains.
#[derive(Debug, Clone, Copy)]
enum Shape {
    /// Every worker its own tenant.
    TenantPerWorker,
    /// One tenant, every worker its own stream.
    StreamPerWorker,
    /// One tenant, one stream for all workers.
    SharedStream,
}

impl Shape {
    fn tag(self) -> &'static str {
        match self {
            Shape::TenantPerWorker => "p",
            Shape::StreamPerWorker => "m",
            Shape::SharedStream => "s",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Shape::TenantPerWorker => "decisions append (tenant/worker)",
            Shape::StreamPerWorker => "decisions append (1 tenant, stream/worker)",
            Shape::SharedStream => "decisions append (1 tenant, 1 stream)",
        }
    }
}

/// Measures two workloads fairly on a shared, noisy machine: alternates
/// `SLICES` slices of each (store first, then bare, and so on), so both see
/// the same background load. Each slice runs `concurrency` workers calling
/// `op(worker, iteration)` for a short warm-up and then its share of
/// `window`. Returns operations per second for (a, b).
async fn compare<A, FA, B, FB>(concurrency: usize, window: Duration, a: A, b: B) -> (f64, f64)
where
    A: Fn(usize, u64) -> FA + Clone + Send + 'static,
    FA: std::future::Future<Output = ()> + Send + 'static,
    B: Fn(usize, u64) -> FB + Clone + Send + 'static,
    FB: std::future::Future<Output = ()> + Send + 'static,
{
    const SLICES: u32 = 6;
    let slice = window / SLICES;
    let (mut na, mut nb) = (0u64, 0u64);
    let mut iteration = 0u64;
    for _ in 0..SLICES {
        na += slice_run(concurrency, slice, iteration, a.clone()).await;
        nb += slice_run(concurrency, slice, iteration, b.clone()).await;
        iteration += 1_000_000;
    }
    let secs = (slice * SLICES).as_secs_f64();
    (na as f64 / secs, nb as f64 / secs)
}

async fn slice_run<F, Fut>(concurrency: usize, window: Duration, first: u64, op: F) -> u64
where
    F: Fn(usize, u64) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let warmup = Duration::from_millis(50);
    let start = Instant::now();
    let measure_from = start + warmup;
    let end = measure_from + window;
    let counted = Arc::new(AtomicU64::new(0));
    let mut tasks = tokio::task::JoinSet::new();
    for w in 0..concurrency {
        let op = op.clone();
        let counted = counted.clone();
        tasks.spawn(async move {
            let mut i = first;
            loop {
                let began = Instant::now();
                if began >= end {
                    break;
                }
                op(w, i).await;
                i += 1;
                if began >= measure_from {
                    counted.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
    }
    while let Some(r) = tasks.join_next().await {
        r.expect("worker");
    }
    counted.load(Ordering::Relaxed)
}

fn report(label: &str, concurrency: usize, store: f64, bare: f64) {
    println!(
        "{label:<44} {concurrency:>5} {store:>12.0} {bare:>12.0} {:>7.2}",
        store / bare
    );
}

fn new_intent(w: usize, i: u64) -> NewIntent {
    NewIntent {
        tenant: "bench".into(),
        run_id: format!("run-{w}"),
        step_id: format!("step-{i}"),
        tool: "email.send".into(),
        args_digest: "sha256:0123456789abcdef0123456789abcdef".into(),
        call_digest: None,
        // One intent per decision (a UNIQUE index): ids never repeat across
        // slices and concurrency levels.
        decision_id: format!("dec-{w}-{i}-{}", uuid::Uuid::now_v7()),
        risk: "high".into(),
        verification_probe: None,
    }
}

async fn bare_intent(pool: &PgPool, w: usize, i: u64) {
    let n = new_intent(w, i);
    let id = uuid::Uuid::now_v7().to_string();
    let now = jiff::Timestamp::now().as_millisecond();
    sqlx::query(
        "INSERT INTO bare_intents (id, tenant, run_id, step_id, tool, args_digest, decision_id, \
         risk, verification_probe, status, created_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, 'pending', $10)",
    )
    .bind(&id)
    .bind(&n.tenant)
    .bind(&n.run_id)
    .bind(&n.step_id)
    .bind(&n.tool)
    .bind(&n.args_digest)
    .bind(&n.decision_id)
    .bind(&n.risk)
    .bind(Option::<String>::None)
    .bind(now)
    .execute(pool)
    .await
    .expect("bare insert");
    sqlx::query(
        "UPDATE bare_intents SET status = $2, detail = $3, completed_at = $4 \
         WHERE id = $1 AND status = 'pending'",
    )
    .bind(&id)
    .bind("completed")
    .bind(Option::<String>::None)
    .bind(now)
    .execute(pool)
    .await
    .expect("bare update");
}

fn record(w: usize, i: u64) -> DecisionRecord {
    DecisionRecord {
        // One intent per decision (a UNIQUE index): ids never repeat across
        // slices and concurrency levels.
        decision_id: format!("dec-{w}-{i}-{}", uuid::Uuid::now_v7()),
        run_id: format!("run-{w}"),
        step_id: format!("step-{i}"),
        tool: "shell.exec".into(),
        verdict: "allow".into(),
        reason: "rule_matched".into(),
        message: None,
        matched_rule: Some("allow-reads".into()),
        policy_version: "default@0123456789ab+h01234567".into(),
        risk: "low".into(),
        args_digest: "sha256:0123456789abcdef0123456789abcdef".into(),
        call_digest: None,
        definition_digest: None,
        created_at: jiff::Timestamp::now(),
    }
}

/// One INSERT of `records` into `table` (a bare copy of decisions) at seqs
/// from `first_seq` on, with a constant hash: the peer of an append.
async fn bare_decisions(
    pool: &PgPool,
    table: &str,
    tenant: &str,
    stream: &str,
    first_seq: i64,
    records: Vec<DecisionRecord>,
) {
    const HASH: &str = "1111111111111111111111111111111111111111111111111111111111111111";
    let mut insert = sqlx::QueryBuilder::new(format!(
        "INSERT INTO {table} (tenant, seq, decision_id, run_id, step_id, tool, verdict, \
         reason, message, matched_rule, policy_version, risk, args_digest, created_at, \
         prev_hash, hash, stream) "
    ));
    insert.push_values(records.into_iter().zip(first_seq..), |mut row, (r, seq)| {
        row.push_bind(tenant.to_owned())
            .push_bind(seq)
            .push_bind(r.decision_id)
            .push_bind(r.run_id)
            .push_bind(r.step_id)
            .push_bind(r.tool)
            .push_bind(r.verdict)
            .push_bind(r.reason)
            .push_bind(r.message)
            .push_bind(r.matched_rule)
            .push_bind(r.policy_version)
            .push_bind(r.risk)
            .push_bind(r.args_digest)
            .push_bind(r.created_at.as_millisecond())
            .push_bind(HASH)
            .push_bind(HASH)
            .push_bind(stream.to_owned());
    });
    insert
        .build()
        .execute(pool)
        .await
        .expect("bare decision insert");
}
