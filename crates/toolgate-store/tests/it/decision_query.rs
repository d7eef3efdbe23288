//! Reading the decision log page by page (`Decisions::query`, what
//! `toolgate audit log` prints) on both engines: every filter, keyset
//! pages that return each row once and in order, the chain of a page
//! verified (and a tampered row caught), and, as tenant roles on
//! PostgreSQL, each tenant reading only its own decisions.

use crate::common::tenants::TwoTenants;
use crate::common::unique;
use jiff::{SignedDuration, Timestamp};
use toolgate_policy::{Decision, Reason};
use toolgate_store::{
    DecisionFilter, DecisionRecord, Decisions, LogCursor, LoggedDecision, MAX_QUERY_LIMIT,
};

/// The `i`th record of the suite: runs `run-0`/`run-1`, tools `bash` and
/// `fs.read`, every third denied, policy `p1` then `p2`, one second apart
/// from `t0`, and labels set by every fourth.
fn rec(i: usize, t0: Timestamp) -> DecisionRecord {
    let deny = i.is_multiple_of(3);
    DecisionRecord {
        decision_id: format!("dec-{i}"),
        run_id: format!("run-{}", i % 2),
        step_id: format!("step-{i}"),
        tool: if i < 6 { "bash" } else { "fs.read" }.into(),
        verdict: if deny { "deny" } else { "allow" }.into(),
        reason: if deny { "deny_rule" } else { "allow_rule" }.into(),
        message: i
            .is_multiple_of(4)
            .then(|| format!(r#"{{"flow_labels_set":["label-{i}"]}}"#)),
        matched_rule: Some(format!("rule-{i}")),
        policy_version: if i < 8 { "p1" } else { "p2" }.into(),
        risk: "low".into(),
        args_digest: format!("sha256:{i}"),
        call_digest: Some(format!("sha256:call-{i}")),
        definition_digest: None,
        created_at: t0 + SignedDuration::from_secs(i as i64),
    }
}

/// Every page of `filter`, `limit` rows at a time.
async fn all_pages(d: Decisions<'_>, filter: &DecisionFilter, limit: u32) -> Vec<LoggedDecision> {
    let mut out = Vec::new();
    let mut after: Option<LogCursor> = None;
    loop {
        let page = d.query(filter, after.as_ref(), limit).await.unwrap();
        assert!(page.rows.len() <= limit as usize);
        out.extend(page.rows);
        match page.next {
            // The printed form is what a person passes back.
            Some(next) => after = Some(next.to_string().parse().unwrap()),
            None => return out,
        }
    }
}

fn ids(rows: &[LoggedDecision]) -> Vec<String> {
    rows.iter()
        .map(|r| r.decision.record.decision_id.clone())
        .collect()
}

both_backends!(the_log_is_filtered_and_paged_in_order, |db| {
    let d = db.store.decisions();
    let (ta, tb) = (unique("qa"), unique("qb"));
    let t0 = Timestamp::from_millisecond(Timestamp::now().as_millisecond()).unwrap();
    // Two streams of A written in turns, and B: twelve rows each.
    for i in 0..12 {
        let stream = if i % 3 == 0 { "pod-a/2" } else { "pod-a/1" };
        d.append(&ta, stream, rec(i, t0)).await.unwrap();
        d.append(&tb, "pod-b/1", rec(i, t0)).await.unwrap();
    }
    let of = |tenant: &str| DecisionFilter {
        tenant: Some(tenant.to_owned()),
        ..DecisionFilter::default()
    };
    let want: Vec<String> = (0..12).map(|i| format!("dec-{i}")).collect();
    let every = all_pages(d, &of(&ta), MAX_QUERY_LIMIT).await;
    assert_eq!(ids(&every), want);
    let row4 = &every[4];
    assert_eq!(row4.flow_labels_set, ["label-4"]);
    assert_eq!(
        (row4.decision.stream.as_str(), row4.decision.seq),
        ("pod-a/1", 3)
    );
    assert_eq!(row4.decision.record.matched_rule.as_deref(), Some("rule-4"));
    // Pages of 5 and of 1 return the same rows once each, in order.
    for limit in [1, 5, 11, 12] {
        assert_eq!(ids(&all_pages(d, &of(&ta), limit).await), want);
    }
    let both = all_pages(d, &DecisionFilter::default(), 5).await;
    let mine: Vec<_> = both
        .iter()
        .filter(|r| [&ta, &tb].contains(&&r.decision.tenant))
        .map(|r| {
            (
                r.decision.tenant.clone(),
                r.decision.record.decision_id.clone(),
            )
        })
        .collect();
    let mut sorted = mine.clone();
    sorted.sort_by_key(|(t, id)| (t.clone(), id[4..].parse::<u32>().unwrap()));
    assert_eq!((mine.len(), mine), (24, sorted), "tenant, then time");

    // A cursor of another tenant: the key's order decides ("qa-" < "qb-").
    let b_first = d.query(&of(&tb), None, 1).await.unwrap().rows[0].cursor();
    let after_b = d.query(&of(&ta), Some(&b_first), 100).await.unwrap();
    assert!(after_b.rows.is_empty());

    // Each filter, on A.
    let page = |f: DecisionFilter| async move {
        let rows = d.query(&f, None, 100).await.unwrap().rows;
        ids(&rows)
    };
    let a = of(&ta);
    let run = page(DecisionFilter {
        run_id: Some("run-1".into()),
        ..a.clone()
    });
    assert_eq!(
        run.await,
        ["dec-1", "dec-3", "dec-5", "dec-7", "dec-9", "dec-11"]
    );
    let denied_bash = page(DecisionFilter {
        tool: Some("bash".into()),
        verdict: Some(Decision::Deny),
        ..a.clone()
    });
    assert_eq!(denied_bash.await, ["dec-0", "dec-3"]);
    let by_reason = page(DecisionFilter {
        reason: Some(Reason::DenyRule),
        policy_version: Some("p2".into()),
        ..a.clone()
    });
    assert_eq!(by_reason.await, ["dec-9"]);
    let window = page(DecisionFilter {
        since: Some(t0 + SignedDuration::from_secs(2)),
        until: Some(t0 + SignedDuration::from_secs(5)),
        ..a.clone()
    });
    assert_eq!(
        window.await,
        ["dec-2", "dec-3", "dec-4"],
        "until is exclusive"
    );
    let none = page(DecisionFilter {
        verdict: Some(Decision::Escalate),
        ..a.clone()
    });
    assert!(none.await.is_empty());

    // Bad requests are refused, typed.
    for (filter, limit) in [
        (a.clone(), 0),
        (a.clone(), MAX_QUERY_LIMIT + 1),
        (
            DecisionFilter {
                since: Some(t0),
                until: Some(t0),
                ..a.clone()
            },
            10,
        ),
        (
            DecisionFilter {
                tool: Some(" ".into()),
                ..a.clone()
            },
            10,
        ),
    ] {
        let err = d.query(&filter, None, limit).await.unwrap_err();
        assert_eq!(err.code(), "invalid_input", "{err}");
    }
});

both_backends!(a_pages_chain_is_verified_and_a_tampered_row_caught, |db| {
    let d = db.store.decisions();
    let tenant = unique("qv");
    let t0 = Timestamp::from_millisecond(Timestamp::now().as_millisecond()).unwrap();
    for i in 0..10 {
        d.append(&tenant, "pod/1", rec(i, t0)).await.unwrap();
    }
    let filter = DecisionFilter {
        tenant: Some(tenant.clone()),
        verdict: Some(Decision::Allow),
        ..DecisionFilter::default()
    };
    let rows = |page: Vec<LoggedDecision>| page.into_iter().map(|r| r.decision).collect::<Vec<_>>();
    // The second page of allowed rows: seq 5 on.
    let first = d.query(&filter, None, 3).await.unwrap();
    let second = d.query(&filter, first.next.as_ref(), 3).await.unwrap().rows;
    assert_eq!(ids(&second), ["dec-5", "dec-7", "dec-8"]);
    let second = rows(second);
    let reports = d.verify_rows(&second).await.unwrap();
    assert_eq!(reports.len(), 1);
    assert!(reports[0].ok, "{reports:?}");
    assert!(d.verify_rows(&[]).await.unwrap().is_empty());

    // The owner turns a denial into an allowance: the row now matches the
    // filter, is shown, and fails its check.
    let sql =
        format!("UPDATE decisions SET verdict = 'allow' WHERE tenant = '{tenant}' AND seq = 7");
    db.raw_both(&sql).await;
    let shown = rows(d.query(&filter, first.next.as_ref(), 3).await.unwrap().rows);
    assert_eq!(shown[1].record.decision_id, "dec-6");
    let reports = d.verify_rows(&shown).await.unwrap();
    assert!(!reports[0].ok);
    assert_eq!(reports[0].first_broken_seq, Some(7), "{reports:?}");
    // A page before the tampered row still chains on to the head through
    // it, so the break shows there too.
    let reports = d.verify_rows(&rows(first.rows)).await.unwrap();
    assert_eq!(reports[0].first_broken_seq, Some(7), "{reports:?}");
});

/// As tenant roles, each tenant's log holds only its own decisions, even
/// when it names the other tenant; the owner reads both and filters.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_role_reads_only_its_own_log() {
    let Some(t) = TwoTenants::new().await else {
        return;
    };
    let t0 = Timestamp::from_millisecond(Timestamp::now().as_millisecond()).unwrap();
    for i in 0..4 {
        t.a.decisions()
            .append(&t.ta, "pod-a/1", rec(i, t0))
            .await
            .unwrap();
        t.b.decisions()
            .append(&t.tb, "pod-b/1", rec(i + 4, t0))
            .await
            .unwrap();
    }
    let all = DecisionFilter::default();
    let tenants = |rows: &[LoggedDecision]| {
        rows.iter()
            .map(|r| r.decision.tenant.clone())
            .collect::<std::collections::BTreeSet<_>>()
    };
    for (store, own) in [(&t.a, &t.ta), (&t.b, &t.tb)] {
        let rows = all_pages(store.decisions(), &all, 3).await;
        assert_eq!(rows.len(), 4);
        assert_eq!(tenants(&rows), [own.clone()].into());
        let reports = store
            .decisions()
            .verify_rows(&rows.into_iter().map(|r| r.decision).collect::<Vec<_>>())
            .await
            .unwrap();
        assert!(reports.iter().all(|r| r.ok), "{reports:?}");
    }
    let other = DecisionFilter {
        tenant: Some(t.tb.clone()),
        ..DecisionFilter::default()
    };
    assert!(all_pages(t.a.decisions(), &other, 10).await.is_empty());
    let owner = t.fx.admin.decisions();
    assert_eq!(
        tenants(&all_pages(owner, &all, 3).await),
        [t.ta.clone(), t.tb.clone()].into()
    );
    let b_rows = all_pages(owner, &other, 3).await;
    assert_eq!(ids(&b_rows), ["dec-4", "dec-5", "dec-6", "dec-7"]);
    t.close().await;
}
