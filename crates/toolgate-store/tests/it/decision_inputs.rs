//! The recorded inputs of the decision log (`DecisionInputs`, migrations
//! postgres 0023 / sqlite 0015) on both engines: stored and read back in
//! chunks, a decision's first input kept, oversized and out-of-range rows
//! refused, exactly the expired rows pruned, and every row checked against
//! the decision that vouches for it. The tenant-role confinement of the
//! table is in `tenant_isolation`.

use crate::common::TestDb;
use crate::common::builders::S;
use jiff::{SignedDuration, Timestamp};
use serde_json::{Value, json};
use toolgate_policy::audit::{RecordedCall, mask_arguments};
use toolgate_policy::digest::sha256_hex;
use toolgate_store::{
    DecisionInput, DecisionRecord, INPUT_SHA256_MEMBER, InputStanding, MAX_INPUT_BYTES, MAX_LOOKUP,
    Store, input_standing,
};

/// Largest time the tables accept (9999-01-01, as migrations 0021/0022).
const TIME_BOUND_MS: i64 = 253_370_764_800_000;

/// A recorded call of `tool` with `arguments` (a JSON object).
fn recorded(tool: &str, arguments: Value) -> RecordedCall {
    let Value::Object(arguments) = arguments else {
        panic!("arguments must be an object")
    };
    RecordedCall {
        tool: tool.into(),
        action: None,
        arguments,
        provenance: None,
    }
}

/// A decision message vouching for `text` as its input.
fn vouching(text: &str) -> String {
    json!({ INPUT_SHA256_MEMBER: sha256_hex(text.as_bytes()), "flow_labels_set": [] }).to_string()
}

/// A logged decision `id` of `tool` deciding arguments of `args_digest`.
fn decision(id: &str, tool: &str, args_digest: &str, message: Option<String>) -> DecisionRecord {
    DecisionRecord {
        decision_id: id.into(),
        run_id: "run-1".into(),
        step_id: format!("step-{id}"),
        tool: tool.into(),
        verdict: "allow".into(),
        reason: "allow_rule".into(),
        message,
        matched_rule: Some("r1".into()),
        policy_version: "default@0123456789ab+h01234567".into(),
        risk: "low".into(),
        args_digest: args_digest.into(),
        call_digest: None,
        definition_digest: None,
        created_at: now_ms(),
    }
}

/// Now, to the millisecond (as stored).
fn now_ms() -> Timestamp {
    Timestamp::from_millisecond(Timestamp::now().as_millisecond()).unwrap()
}

/// Decision `d` and its input `call`, recorded at the decision's time (the
/// check finds a row's decision by id and time).
fn pair(d: DecisionRecord, call: &str, masked: bool) -> (Option<DecisionRecord>, DecisionInput) {
    let input = DecisionInput {
        recorded_at: d.created_at,
        ..input(&d.decision_id, call, masked)
    };
    (Some(d), input)
}

/// An input of decision `id`, recorded now and expiring in a day (to the
/// millisecond, as stored).
fn input(id: &str, call: &str, masked: bool) -> DecisionInput {
    let now = now_ms();
    DecisionInput {
        decision_id: id.into(),
        call: call.into(),
        masked,
        recorded_at: now,
        expires_at: now + SignedDuration::from_hours(24),
    }
}

/// An input of decision `id` expiring at `expires_at`.
fn expiring(id: &str, expires_at: Timestamp) -> DecisionInput {
    DecisionInput {
        recorded_at: Timestamp::from_millisecond(0).unwrap(),
        expires_at,
        ..input(id, r#"{"arguments":{},"tool":"t"}"#, false)
    }
}

/// Stored rows of `tenant` (any tenant when `None`), counted in SQL
/// (on PostgreSQL straight to the server, not through a pooler).
async fn rows_of(db: &TestDb, tenant: Option<&str>) -> i64 {
    if let Some(pg) = db.pg() {
        let sql = "SELECT count(*) FROM decision_inputs WHERE $1::text IS NULL OR tenant = $1";
        sqlx::query_scalar(sql)
            .bind(tenant)
            .fetch_one(pg)
            .await
            .unwrap()
    } else {
        let sql = "SELECT count(*) FROM decision_inputs WHERE ?1 IS NULL OR tenant = ?1";
        sqlx::query_scalar(sql)
            .bind(tenant)
            .fetch_one(db.store.as_sqlite().unwrap())
            .await
            .unwrap()
    }
}

both_backends!(inputs_are_read_back_by_decision_id_across_chunks, |db| {
    let ins = db.store.decision_inputs();
    // Recorded and expiry times survive to the millisecond.
    let t0 = Timestamp::from_millisecond(1_780_000_000_123).unwrap();
    let stored: Vec<DecisionInput> = (0..620)
        .map(|i| DecisionInput {
            decision_id: format!("dec-{i:04}"),
            call: recorded("fs.read", json!({ "path": format!("/f/{i}"), "n": i })).to_canonical(),
            masked: i % 5 == 0,
            recorded_at: t0 + SignedDuration::from_millis(i),
            expires_at: t0 + SignedDuration::from_hours(1) + SignedDuration::from_millis(i),
        })
        .collect();
    ins.put_batch("acme", &stored).await.unwrap();
    ins.put_batch("other", &stored[..3]).await.unwrap();
    assert_eq!(rows_of(&db, Some("acme")).await, 620);

    // Present and absent ids interleaved, more than one chunk of 500.
    let wanted: Vec<String> = (0..1240)
        .map(|i| match i % 2 {
            0 => format!("dec-{:04}", i / 2),
            _ => format!("absent-{i}"),
        })
        .collect();
    let ids: Vec<&str> = wanted.iter().map(String::as_str).collect();
    let found = ins.get_many("acme", &ids).await.unwrap();
    assert_eq!(found.len(), 620);
    for want in &stored {
        assert_eq!(
            found.get(&want.decision_id),
            Some(want),
            "{}",
            want.decision_id
        );
    }
    assert!(found.keys().all(|k| k.starts_with("dec-")));

    // Ids past the first chunk alone, and nothing of another tenant.
    let late = ins
        .get_many("acme", &["dec-0619", "dec-0500"])
        .await
        .unwrap();
    assert_eq!(late.len(), 2);
    assert_eq!(late["dec-0619"].call, stored[619].call);
    assert!(ins.get_many("nobody", &ids).await.unwrap().is_empty());
    assert_eq!(ins.get_many("other", &ids).await.unwrap().len(), 3);
    assert!(ins.get_many("acme", &[]).await.unwrap().is_empty());

    let too_many = vec!["dec-0000"; MAX_LOOKUP + 1];
    let err = ins.get_many("acme", &too_many).await.unwrap_err();
    assert_eq!(err.code(), "invalid_input", "{err}");
    assert_eq!(ins.get_many("acme", &too_many[1..]).await.unwrap().len(), 1);
});

both_backends!(a_decisions_first_input_is_kept, |db| {
    let ins = db.store.decision_inputs();
    let first = input(
        "dec-1",
        &recorded("fs.read", json!({"path": "/a"})).to_canonical(),
        false,
    );
    ins.put_batch("acme", std::slice::from_ref(&first))
        .await
        .unwrap();
    let second = DecisionInput {
        call: recorded("fs.read", json!({"path": "/b"})).to_canonical(),
        masked: true,
        expires_at: first.expires_at + SignedDuration::from_hours(1),
        ..first.clone()
    };
    let new = input("dec-2", &second.call, true);
    // The batch is not refused for its duplicate: the new row is stored.
    ins.put_batch("acme", &[second, new.clone()]).await.unwrap();
    let got = ins.get_many("acme", &["dec-1", "dec-2"]).await.unwrap();
    assert_eq!(got["dec-1"], first);
    assert_eq!(got["dec-2"], new);
    // The same decision id of another tenant is another input.
    let theirs = input("dec-1", &new.call, true);
    ins.put_batch("other", std::slice::from_ref(&theirs))
        .await
        .unwrap();
    assert_eq!(
        ins.get_many("other", &["dec-1"]).await.unwrap()["dec-1"],
        theirs
    );
    assert_eq!(
        ins.get_many("acme", &["dec-1"]).await.unwrap()["dec-1"],
        first
    );
    assert_eq!(rows_of(&db, None).await, 3);
});

both_backends!(oversized_and_out_of_range_inputs_are_refused, |db| {
    let ins = db.store.decision_inputs();
    let ok = input("dec-ok", r#"{"arguments":{},"tool":"t"}"#, false);
    // The largest input is stored (the column's CHECK allows as much).
    let largest = input("dec-max", &"x".repeat(MAX_INPUT_BYTES), false);
    ins.put_batch("acme", std::slice::from_ref(&largest))
        .await
        .unwrap();
    let got = ins.get_many("acme", &["dec-max"]).await.unwrap();
    assert_eq!(got["dec-max"].call.len(), MAX_INPUT_BYTES);

    // One byte more (as a multi-byte character) refuses the whole batch.
    let over = input(
        "dec-over",
        &format!("{}\u{e9}", "x".repeat(MAX_INPUT_BYTES - 1)),
        false,
    );
    let err = ins
        .put_batch("acme", &[ok.clone(), over])
        .await
        .unwrap_err();
    assert_eq!(err.code(), "invalid_input", "{err}");
    assert_eq!(rows_of(&db, None).await, 1);

    let no_id = input("", &ok.call, false);
    let err = ins
        .put_batch("acme", &[ok.clone(), no_id])
        .await
        .unwrap_err();
    assert_eq!(err.code(), "invalid_input", "{err}");
    let err = ins
        .put_batch("", std::slice::from_ref(&ok))
        .await
        .unwrap_err();
    assert_eq!(err.code(), "invalid_input", "{err}");
    assert_eq!(rows_of(&db, None).await, 1);

    // Times up to 9999-01-01 read back; one millisecond later is refused
    // (invalid_input; the CHECK behind it holds for any other writer), and
    // the batch with it stores nothing.
    let bound = Timestamp::from_millisecond(TIME_BOUND_MS).unwrap();
    let late = expiring("dec-late", bound);
    ins.put_batch("acme", std::slice::from_ref(&late))
        .await
        .unwrap();
    assert_eq!(
        ins.get_many("acme", &["dec-late"]).await.unwrap()["dec-late"],
        late
    );
    let beyond = expiring("dec-beyond", bound + SignedDuration::from_millis(1));
    let err = ins
        .put_batch("acme", &[ok.clone(), beyond])
        .await
        .unwrap_err();
    assert_eq!(err.code(), "invalid_input", "{err}");
    let recorded_beyond = DecisionInput {
        recorded_at: bound + SignedDuration::from_millis(1),
        ..expiring("dec-beyond2", bound)
    };
    ins.put_batch("acme", &[ok, recorded_beyond])
        .await
        .unwrap_err();
    assert_eq!(rows_of(&db, None).await, 2);
});

both_backends!(pruning_deletes_exactly_the_expired_inputs, |db| {
    let ins = db.store.decision_inputs();
    let now = Timestamp::from_millisecond(1_780_000_000_000).unwrap();
    let ms = SignedDuration::from_millis;
    ins.put_batch(
        "acme",
        &[
            expiring("long-gone", now - SignedDuration::from_hours(48)),
            expiring("just-gone", now - ms(1)),
            expiring("at-now", now),
            expiring("later", now + ms(1)),
        ],
    )
    .await
    .unwrap();
    ins.put_batch(
        "other",
        &[expiring("gone", now - ms(5)), expiring("kept", now + ms(5))],
    )
    .await
    .unwrap();
    assert_eq!(ins.prune_expired(now).await.unwrap(), 3);
    assert_eq!(ins.prune_expired(now).await.unwrap(), 0);
    let ids = ["long-gone", "just-gone", "at-now", "later", "gone", "kept"];
    let mut acme: Vec<String> = ins
        .get_many("acme", &ids)
        .await
        .unwrap()
        .into_keys()
        .collect();
    acme.sort();
    assert_eq!(acme, ["at-now", "later"]);
    let other: Vec<String> = ins
        .get_many("other", &ids)
        .await
        .unwrap()
        .into_keys()
        .collect();
    assert_eq!(other, ["kept"]);

    // More expired rows than one pruning statement deletes (10,000).
    let many: Vec<DecisionInput> = (0..10_050)
        .map(|i| expiring(&format!("bulk-{i}"), now - ms(i + 1)))
        .collect();
    ins.put_batch("acme", &many).await.unwrap();
    assert_eq!(ins.prune_expired(now).await.unwrap(), 10_050);
    assert_eq!(rows_of(&db, None).await, 3);
});

/// Appends each `(decision, input)` of `acme`: the decisions to the log (a
/// `None` is not logged), then the inputs.
async fn log(store: &Store, rows: Vec<(Option<DecisionRecord>, DecisionInput)>) {
    let decisions: Vec<DecisionRecord> = rows.iter().filter_map(|r| r.0.clone()).collect();
    store
        .decisions()
        .append_batch("acme", S, decisions)
        .await
        .unwrap();
    let inputs: Vec<DecisionInput> = rows.into_iter().map(|r| r.1).collect();
    store
        .decision_inputs()
        .put_batch("acme", &inputs)
        .await
        .unwrap();
}

/// A decided call, and the input recording it as the sidecar does.
fn decided(id: &str, tool: &str, args: Value) -> (Option<DecisionRecord>, DecisionInput) {
    let call = recorded(tool, args);
    let text = call.to_canonical();
    let digest = toolgate_policy::args_digest(&call.arguments);
    pair(
        decision(id, tool, &digest, Some(vouching(&text))),
        &text,
        false,
    )
}

both_backends!(verify_tells_matching_masked_mismatched_and_orphaned, |db| {
    let secret = json!({"path": "/etc/app.env", "password": "hunter2"});
    let masked_call = recorded(
        "fs.write",
        Value::Object(mask_arguments(secret.as_object().unwrap())),
    );
    let masked_text = masked_call.to_canonical();
    assert!(!masked_text.contains("hunter2"));
    let real_digest = toolgate_policy::args_digest(secret.as_object().unwrap());
    let vouch = Some(vouching(&masked_text));
    let d_masked = decision("d-masked", "fs.write", &real_digest, vouch);
    let masked = pair(d_masked, &masked_text, true);
    // Masking that changes nothing leaves a matching row.
    let (d, mut plain_masked) = decided("d-plain-masked", "fs.read", json!({"path": "/tmp/a"}));
    plain_masked.masked = true;

    // The stored text edited after the decision vouched for the original.
    let (d_edit, mut edited) = decided("d-edited", "fs.read", json!({"path": "/tmp/a"}));
    edited.call = recorded("fs.read", json!({"path": "/etc/shadow"})).to_canonical();
    // Vouched for, but naming another tool than the decision.
    let (mut d_tool, tool_input) = decided("d-tool", "fs.read", json!({"path": "/tmp/a"}));
    d_tool.as_mut().unwrap().tool = "shell.exec".into();
    // Vouched-for garbage claiming to be masked.
    let garbled = "{\"tool\":\"fs.read\",\"arguments\":";
    let d_garbled = decision("d-garbled", "fs.read", "sha256:x", Some(vouching(garbled)));
    // Unmasked arguments that differ from the digest, though vouched for.
    let (mut d_args, args_input) = decided("d-args", "fs.read", json!({"path": "/tmp/a"}));
    d_args.as_mut().unwrap().args_digest =
        toolgate_policy::args_digest(json!({"path": "/tmp/b"}).as_object().unwrap());
    // Decisions whose message vouches for nothing.
    let (mut d_nosha, nosha_input) = decided("d-no-member", "fs.read", json!({}));
    d_nosha.as_mut().unwrap().message = Some(r#"{"flow_labels_set":["x"]}"#.into());
    let (mut d_nomsg, nomsg_input) = decided("d-no-message", "fs.read", json!({}));
    d_nomsg.as_mut().unwrap().message = None;
    // A row whose decision was never logged.
    let (_, orphan) = decided("d-orphan", "fs.read", json!({"path": "/o"}));

    log(
        &db.store,
        vec![
            decided("d-match", "fs.read", json!({"path": "/tmp/a", "n": [1, 2]})),
            masked,
            (d, plain_masked),
            (d_edit, edited),
            (d_tool, tool_input),
            pair(d_garbled, garbled, true),
            (d_args, args_input),
            (d_nosha, nosha_input),
            (d_nomsg, nomsg_input),
            (None, orphan),
        ],
    )
    .await;
    let check = db.store.decision_inputs().verify("acme").await.unwrap();
    assert_eq!(check.tenant, "acme");
    assert_eq!(check.rows, 10);
    assert_eq!(check.matching, 2, "{check:?}");
    assert_eq!(check.masked, 1, "{check:?}");
    let mut mismatched = check.mismatched.clone();
    mismatched.sort();
    assert_eq!(
        mismatched,
        [
            "d-args",
            "d-edited",
            "d-garbled",
            "d-no-member",
            "d-no-message",
            "d-tool"
        ]
    );
    assert_eq!(check.orphaned, ["d-orphan"]);
    assert!(!check.ok());
    // Another tenant's check sees none of it.
    let none = db.store.decision_inputs().verify("other").await.unwrap();
    assert_eq!((none.rows, none.ok()), (0, true));
});

both_backends!(an_orphaned_input_is_reported_but_harmless, |db| {
    let (_, orphan) = decided("d-orphan", "fs.read", json!({"path": "/o"}));
    log(
        &db.store,
        vec![
            decided("d-match", "fs.read", json!({"path": "/a"})),
            (None, orphan),
        ],
    )
    .await;
    let check = db.store.decision_inputs().verify("acme").await.unwrap();
    assert_eq!((check.rows, check.matching, check.masked), (2, 1, 0));
    assert_eq!(check.orphaned, ["d-orphan"]);
    assert!(check.mismatched.is_empty());
    assert!(check.ok(), "{check:?}");
});

both_backends!(verify_reads_every_page_of_inputs, |db| {
    // More rows than one page of the check (1000), the last one edited.
    let mut rows: Vec<_> = (0..1003)
        .map(|i| decided(&format!("d-{i:04}"), "fs.read", json!({ "i": i })))
        .collect();
    rows[1002].1.call = recorded("fs.read", json!({"i": -1})).to_canonical();
    log(&db.store, rows).await;
    let check = db.store.decision_inputs().verify("acme").await.unwrap();
    assert_eq!((check.rows, check.matching), (1003, 1002), "{check:?}");
    assert_eq!(check.mismatched, ["d-1002"]);
});

#[test]
fn standing_compares_an_input_with_its_decision() {
    let call = recorded("fs.read", json!({"path": "/a"}));
    let text = call.to_canonical();
    let digest = toolgate_policy::args_digest(&call.arguments);
    let row = input("d", &text, false);
    let vouched = vouching(&text);
    let cases = [
        (Some(vouched.as_str()), "fs.read", InputStanding::Matching),
        (
            Some(vouched.as_str()),
            "fs.write",
            InputStanding::Mismatched,
        ),
        (None, "fs.read", InputStanding::Mismatched),
        (Some("not json"), "fs.read", InputStanding::Mismatched),
        (
            Some(r#"{"input_sha256":7}"#),
            "fs.read",
            InputStanding::Mismatched,
        ),
    ];
    for (message, tool, want) in cases {
        assert_eq!(
            input_standing(&row, tool, &digest, message),
            want,
            "{message:?} {tool}"
        );
    }
    // Other arguments: masked ones are set apart, full ones contradict.
    assert_eq!(
        input_standing(&row, "fs.read", "sha256:other", Some(&vouched)),
        InputStanding::Mismatched
    );
    let masked = DecisionInput {
        masked: true,
        ..row.clone()
    };
    assert_eq!(
        input_standing(&masked, "fs.read", "sha256:other", Some(&vouched)),
        InputStanding::Masked
    );
}
