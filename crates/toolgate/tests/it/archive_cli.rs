//! `toolgate audit archive` and `toolgate audit verify --archive` (#45
//! part 5) against a SQLite file and, when `TOOLGATE_TEST_DATABASE_URL` is
//! set (required in CI), a fresh PostgreSQL schema: archive, then the live
//! log still verifies (with its checkpoints), the archive verifies offline,
//! and a tampered row, a removed segment or a bad signature fail it.

use std::io::{Read, Write};
use std::path::Path;
use std::process::Command;

use jiff::{SignedDuration, Timestamp};
use serde_json::Value;
use toolgate_store::{DecisionRecord, Store};

pub(crate) fn toolgate(args: &[&str]) -> (Option<i32>, Value) {
    let out = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(args)
        .output()
        .expect("run toolgate");
    let json = serde_json::from_slice(&out.stdout).unwrap_or_else(|_| {
        Value::String(format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    });
    (out.status.code(), json)
}

pub(crate) fn records(from: usize, n: usize, age: SignedDuration) -> Vec<DecisionRecord> {
    let at = Timestamp::now() - age;
    (from..from + n)
        .map(|i| DecisionRecord {
            decision_id: format!("d{i}"),
            run_id: "r".into(),
            step_id: format!("s{i}"),
            tool: "bash".into(),
            verdict: "deny".into(),
            reason: "deny_rule".into(),
            message: (i % 2 == 0).then(|| format!("message {i}")),
            matched_rule: Some("deny:bash:rm *".into()),
            policy_version: "p@000000000000+h00000000".into(),
            risk: "high".into(),
            args_digest: format!("sha256:{i:02}"),
            call_digest: Some(format!("sha256:c{i}")),
            definition_digest: None,
            created_at: at + SignedDuration::from_millis(i as i64),
        })
        .collect()
}

/// A SQLite file, and a fresh schema of `TOOLGATE_TEST_DATABASE_URL` when
/// set (required in CI).
pub(crate) async fn engines(dir: &Path) -> Vec<String> {
    let mut out = vec![format!(
        "sqlite://{}?mode=rwc",
        dir.join("archive.db").display()
    )];
    match std::env::var("TOOLGATE_TEST_DATABASE_URL") {
        Ok(url) if !url.is_empty() => {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos();
            let schema = format!("arc_{nanos:x}{:x}", std::process::id());
            let admin = sqlx::PgPool::connect(&url).await.unwrap();
            sqlx::query(&format!("CREATE SCHEMA {schema}"))
                .execute(&admin)
                .await
                .unwrap();
            admin.close().await;
            let sep = if url.contains('?') { '&' } else { '?' };
            out.push(format!("{url}{sep}options=-c%20search_path%3D{schema}"));
        }
        _ if std::env::var("CI").as_deref() == Ok("true") => {
            panic!("CI=true but TOOLGATE_TEST_DATABASE_URL is not set")
        }
        _ => eprintln!("SKIP postgres variant: TOOLGATE_TEST_DATABASE_URL is not set"),
    }
    out
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

fn manifests(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_str()
                .unwrap()
                .starts_with("manifest-")
        })
        .collect();
    out.sort();
    out
}

fn read_json(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

fn write_json(path: &Path, value: &Value) {
    std::fs::write(path, serde_json::to_vec_pretty(value).unwrap()).unwrap();
}

fn problem_codes(report: &Value) -> Vec<String> {
    report["problems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["code"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn archive_then_verify_live_and_offline() {
    let tmp = tempfile::tempdir().unwrap();
    let (key_arg, trust, other) = crate::common::key_files(tmp.path());
    let (key_arg, trust, other) = (key_arg.as_str(), trust.as_str(), other.as_str());
    let hours = |h: i64| SignedDuration::from_hours(h);

    for (n, url) in engines(tmp.path()).await.into_iter().enumerate() {
        eprintln!("engine: {}", &url[..8]);
        let out = tmp.path().join(format!("archive-{n}"));
        let out_arg = out.to_str().unwrap();
        let store = Store::connect(&url).await.unwrap();
        let d = store.decisions();
        d.append_batch("team-a", "pod-1/a", records(0, 6, hours(2)))
            .await
            .unwrap();
        d.append_batch("team-a", "pod-1/a", records(6, 2, hours(0)))
            .await
            .unwrap();
        d.append_batch("team-b", "pod-x/1", records(0, 4, hours(2)))
            .await
            .unwrap();
        // A restarted writer's stream, linked to the first one's head.
        d.open_stream("team-a", "pod-2/b", Some("pod-1/a"))
            .await
            .unwrap();
        d.append_batch("team-a", "pod-2/b", records(20, 3, hours(2)))
            .await
            .unwrap();

        let before = (Timestamp::now() - hours(1)).to_string();
        let (code, archived) = toolgate(&[
            "audit",
            "archive",
            "--database",
            &url,
            "--before",
            &before,
            "--out",
            out_arg,
            "--key",
            key_arg,
        ]);
        assert_eq!(code, Some(0), "{archived}");
        // pod-1/a 1..6, pod-2/b 1..2 and pod-x/1 1..3: each head stays.
        assert_eq!(
            (&archived["records"], &archived["pruned"]),
            (&11.into(), &11.into()),
            "{archived}"
        );
        let segments = archived["segments"].as_array().unwrap();
        assert_eq!(segments.len(), 3);
        assert_eq!(segments[0]["file"], "team-a/pod-1%2Fa/1-6.jsonl.gz");
        assert!(out.join("team-a/pod-1%2Fa/1-6.jsonl.gz").is_file());
        assert_eq!(manifests(&out).len(), 1);
        assert_eq!(d.list("team-a", "pod-1/a", 0, 100).await.unwrap().len(), 2);

        // The live log verifies, with its checkpoints too, and is signed on.
        let (code, live) = toolgate(&["audit", "verify", "--database", &url]);
        assert_eq!(code, Some(0), "{live}");
        assert_eq!(live["records"], 4, "{live}");
        let (code, live) = toolgate(&[
            "audit",
            "verify",
            "--database",
            &url,
            "--checkpoints",
            "--trust",
            trust,
        ]);
        assert_eq!(code, Some(0), "{live}");
        assert_eq!(live["checkpoints"]["checked"], 3, "{live}");
        let (code, signed) =
            toolgate(&["audit", "checkpoint", "--database", &url, "--key", key_arg]);
        assert_eq!(code, Some(0), "{signed}");
        assert_eq!(signed["signed"].as_array().unwrap().len(), 3, "{signed}");

        // Offline.
        let verify_offline = |dir: &Path, trust: &str| {
            toolgate(&[
                "audit",
                "verify",
                "--archive",
                dir.to_str().unwrap(),
                "--trust",
                trust,
            ])
        };
        let (code, offline) = verify_offline(&out, trust);
        assert_eq!(code, Some(0), "{offline}");
        assert_eq!(
            (&offline["segments"], &offline["records"]),
            (&3.into(), &11.into()),
            "{offline}"
        );

        // A second run continues each stream's archive.
        d.append_batch("team-a", "pod-1/a", records(8, 2, hours(0)))
            .await
            .unwrap();
        let later = (Timestamp::now() + hours(1)).to_string();
        let (code, again) = toolgate(&[
            "audit",
            "archive",
            "--database",
            &url,
            "--before",
            &later,
            "--out",
            out_arg,
            "--key",
            key_arg,
            "--tenant",
            "team-a",
        ]);
        assert_eq!(code, Some(0), "{again}");
        assert_eq!(again["records"], 3, "pod-1/a 7..9: {again}");
        assert_eq!(manifests(&out).len(), 2);
        let (code, live) = toolgate(&["audit", "verify", "--database", &url]);
        assert_eq!((code, &live["records"]), (Some(0), &3.into()), "{live}");
        let (code, offline) = verify_offline(&out, trust);
        assert_eq!(code, Some(0), "{offline}");
        assert_eq!(offline["records"], 14, "{offline}");
        // Nothing left to archive: nothing written.
        let (code, idle) = toolgate(&[
            "audit",
            "archive",
            "--database",
            &url,
            "--before",
            &later,
            "--out",
            out_arg,
            "--key",
            key_arg,
        ]);
        assert_eq!((code, &idle["records"]), (Some(0), &0.into()), "{idle}");
        assert_eq!(manifests(&out).len(), 2);

        // An untrusted key fails.
        let (code, untrusted) = verify_offline(&out, other);
        assert_eq!(code, Some(1), "{untrusted}");
        assert!(
            problem_codes(&untrusted)
                .iter()
                .all(|c| c == "archive_checkpoint_invalid"),
            "{untrusted}"
        );

        // A tampered row (its file hash updated in the manifest, so that
        // only the chain can tell) fails.
        let tampered = tmp.path().join(format!("tampered-{n}"));
        copy_dir(&out, &tampered);
        let seg = tampered.join("team-a/pod-1%2Fa/1-6.jsonl.gz");
        let mut text = String::new();
        flate2::read::GzDecoder::new(std::fs::File::open(&seg).unwrap())
            .read_to_string(&mut text)
            .unwrap();
        assert_eq!(text.lines().count(), 6);
        let edited = text.replacen("\"verdict\":\"deny\"", "\"verdict\":\"allow\"", 1);
        assert_ne!(edited, text);
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        gz.write_all(edited.as_bytes()).unwrap();
        let bytes = gz.finish().unwrap();
        std::fs::write(&seg, &bytes).unwrap();
        let (code, report) = verify_offline(&tampered, trust);
        assert_eq!(code, Some(1), "{report}");
        assert!(
            problem_codes(&report).contains(&"archive_segment_hash".to_owned()),
            "{report}"
        );
        let first = &manifests(&tampered)[0];
        let mut manifest = read_json(first);
        use sha2::Digest;
        manifest["segments"][0]["sha256"] = hex::encode(sha2::Sha256::digest(&bytes)).into();
        write_json(first, &manifest);
        let (code, report) = verify_offline(&tampered, trust);
        assert_eq!(code, Some(1), "{report}");
        assert_eq!(problem_codes(&report), ["archive_chain_broken"], "{report}");
        assert!(
            report["problems"][0]["problem"]
                .as_str()
                .unwrap()
                .contains("seq 1 content does not match its hash"),
            "{report}"
        );

        // A removed segment file fails; so does one removed from its
        // manifest too (the next segment no longer follows on).
        let removed = tmp.path().join(format!("removed-{n}"));
        copy_dir(&out, &removed);
        std::fs::remove_file(removed.join("team-a/pod-1%2Fa/1-6.jsonl.gz")).unwrap();
        let (code, report) = verify_offline(&removed, trust);
        assert_eq!(code, Some(1), "{report}");
        assert_eq!(
            problem_codes(&report),
            ["archive_segment_missing"],
            "{report}"
        );
        let first = &manifests(&removed)[0];
        let mut manifest = read_json(first);
        let listed = manifest["segments"].as_array_mut().unwrap();
        listed.retain(|s| s["file"] != "team-a/pod-1%2Fa/1-6.jsonl.gz");
        write_json(first, &manifest);
        let (code, report) = verify_offline(&removed, trust);
        assert_eq!(code, Some(1), "{report}");
        assert_eq!(
            problem_codes(&report),
            ["archive_segment_missing"],
            "{report}"
        );
        assert!(
            report["problems"][0]["problem"]
                .as_str()
                .unwrap()
                .contains("seq 1 to 6 are in no segment"),
            "{report}"
        );

        // A bad signature fails.
        let forged = tmp.path().join(format!("forged-{n}"));
        copy_dir(&out, &forged);
        let first = &manifests(&forged)[0];
        let mut manifest = read_json(first);
        let envelope: Value =
            serde_json::from_str(manifest["segments"][1]["checkpoint"].as_str().unwrap()).unwrap();
        let mut envelope = envelope;
        let sig = envelope["signatures"][0]["sig"]
            .as_str()
            .unwrap()
            .to_owned();
        let flipped = if sig.starts_with('A') { "B" } else { "A" };
        envelope["signatures"][0]["sig"] = format!("{flipped}{}", &sig[1..]).into();
        manifest["segments"][1]["checkpoint"] = envelope.to_string().into();
        write_json(first, &manifest);
        let (code, report) = verify_offline(&forged, trust);
        assert_eq!(code, Some(1), "{report}");
        assert_eq!(
            problem_codes(&report),
            ["archive_checkpoint_invalid"],
            "{report}"
        );

        // Deleting live rows without an archive still fails live verify.
        d.append_batch("team-b", "pod-x/1", records(30, 2, hours(0)))
            .await
            .unwrap();
        let gap = "DELETE FROM decisions WHERE tenant = 'team-b' AND stream = 'pod-x/1' \
                   AND seq = 5";
        match store.as_postgres() {
            Some(pg) => sqlx::query(gap).execute(pg).await.unwrap().rows_affected(),
            None => sqlx::query(gap)
                .execute(store.as_sqlite().unwrap())
                .await
                .unwrap()
                .rows_affected(),
        };
        let (code, cut) = toolgate(&["audit", "verify", "--database", &url]);
        assert_eq!(code, Some(1), "{cut}");
        let broken = cut["chains"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["ok"] == false)
            .unwrap();
        assert_eq!(broken["first_broken_seq"], 5, "{cut}");
        store.close().await;
    }
}

/// A run whose pruning failed (here: the database refuses the delete)
/// leaves its segments written, checkpointed and listed, and the rows live;
/// the next run into the same directory prunes them first, without a
/// second copy, and the archive still verifies offline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupted_archive_is_finished_by_the_next_run() {
    let tmp = tempfile::tempdir().unwrap();
    let (key_path, trust_path, _) = crate::common::key_files(tmp.path());
    let url = format!(
        "sqlite://{}?mode=rwc",
        tmp.path().join("resume.db").display()
    );
    let out = tmp.path().join("archive");
    let store = Store::connect(&url).await.unwrap();
    store
        .decisions()
        .append_batch("t", "pod/1", records(0, 5, SignedDuration::from_hours(2)))
        .await
        .unwrap();
    let lite = store.as_sqlite().unwrap();
    sqlx::raw_sql(
        "CREATE TRIGGER no_prune BEFORE DELETE ON decisions \
         BEGIN SELECT RAISE(ABORT, 'no pruning today'); END",
    )
    .execute(lite)
    .await
    .unwrap();
    let before = (Timestamp::now() - SignedDuration::from_hours(1)).to_string();
    let args = [
        "audit",
        "archive",
        "--database",
        &url,
        "--before",
        &before,
        "--out",
        out.to_str().unwrap(),
        "--key",
        key_path.as_str(),
    ];
    let (code, failed) = toolgate(&args);
    assert_eq!(code, Some(1), "{failed}");
    assert_eq!(failed["pruned"], 0, "{failed}");
    assert!(
        failed["segments"][0]["problem"]
            .as_str()
            .unwrap()
            .contains("not pruned"),
        "{failed}"
    );
    assert_eq!(
        store
            .decisions()
            .list("t", "pod/1", 0, 10)
            .await
            .unwrap()
            .len(),
        5
    );
    sqlx::raw_sql("DROP TRIGGER no_prune")
        .execute(lite)
        .await
        .unwrap();
    let (code, resumed) = toolgate(&args);
    assert_eq!(code, Some(0), "{resumed}");
    assert_eq!(resumed["pruned"], 4, "{resumed}");
    assert_eq!(resumed["segments"][0]["resumed"], true, "{resumed}");
    assert_eq!(
        resumed["manifest"],
        Value::Null,
        "no second copy: {resumed}"
    );
    assert_eq!(manifests(&out).len(), 1);
    let (code, live) = toolgate(&["audit", "verify", "--database", &url]);
    assert_eq!((code, &live["records"]), (Some(0), &1.into()), "{live}");
    let (code, offline) = toolgate(&[
        "audit",
        "verify",
        "--archive",
        out.to_str().unwrap(),
        "--trust",
        trust_path.as_str(),
    ]);
    assert_eq!(code, Some(0), "{offline}");
    assert_eq!(offline["records"], 4, "{offline}");
    store.close().await;
}
