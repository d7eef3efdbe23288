//! One tenant's approval row that does not read back (a time outside what a
//! timestamp holds, or on SQLite a value of the wrong type) holds back only
//! itself: the list the controller mirrors from returns every other row and
//! names the bad one, and on PostgreSQL a tenant can no longer write such a
//! time (migration 0021). Review finding: one tenant stalled the mirror.

use std::time::Duration;

use crate::common::builders::new_approval;
use crate::common::tenants::{Fixture, approval, sqlstate};
use jiff::Timestamp;
use toolgate_store::{ApprovalListing, ApprovalStatus};

const FAR: i64 = i64::MAX;

/// A pending approval of `tenant` written around the store: its created_at
/// is `created`, its expiry `expires` (both Unix ms, as SQL text).
fn planted(tenant: &str, id: &str, created: &str, expires: &str) -> String {
    format!(
        "INSERT INTO approvals (id, tenant, invocation_id, run_id, tool, args_digest, \
         policy_version, decision_id, requested_by, created_at, expires_at) \
         VALUES ('{id}', '{tenant}', 'inv-{id}', 'run-1', 't', 'd', 'p', 'd', 'me', \
         {created}, {expires})"
    )
}

/// A row that did not read back: its tenant, its id and the error's code.
type Unread<'a> = (Option<&'a str>, Option<&'a str>, &'a str);

/// The ids that read back, and what is known of the rows that did not.
fn ids(listing: &ApprovalListing) -> (Vec<&str>, Vec<Unread<'_>>) {
    (
        listing.approvals.iter().map(|a| a.id.as_str()).collect(),
        listing
            .unreadable
            .iter()
            .map(|u| (u.tenant.as_deref(), u.id.as_deref(), u.error.code()))
            .collect(),
    )
}

both_backends!(a_row_that_does_not_read_back_holds_back_only_itself, |db| {
    let now = Timestamp::now();
    let good = db
        .store
        .approvals()
        .request(
            new_approval("team-b", "inv-b", Duration::from_secs(600)),
            now,
        )
        .await
        .unwrap();
    let soon = (now.as_millisecond() + 600_000).to_string();
    let past = (now.as_millisecond() - 1).to_string();
    // Rows from before migration 0021 (PostgreSQL), or any writer (SQLite):
    // one pending forever at a time no timestamp holds, one whose time is
    // out of range but whose expiry has passed.
    let pg = format!(
        "ALTER TABLE approvals DISABLE TRIGGER approvals_times_readable; {}; {}; \
         ALTER TABLE approvals ENABLE TRIGGER approvals_times_readable",
        planted("team-a", "bad-far", &FAR.to_string(), &FAR.to_string()),
        planted("team-a", "bad-gone", &FAR.to_string(), &past),
    );
    let sqlite = format!(
        "{}; {}; {}",
        planted("team-a", "bad-far", &FAR.to_string(), &FAR.to_string()),
        planted("team-a", "bad-gone", &FAR.to_string(), &past),
        // SQLite keeps what it is given: text where a time belongs.
        planted("team-a", "bad-text", "'soon'", &soon),
    );
    db.raw(&pg, &sqlite).await;

    // Expiring sweeps every tenant's rows: the planted one whose time is up
    // goes with them (its created_at untouched, so not checked again).
    assert_eq!(db.store.approvals().expire(now).await.unwrap(), 1);

    let a = db.store.approvals();
    let listing = a
        .list_all_readable(Some(ApprovalStatus::Pending), now)
        .await
        .unwrap();
    let (readable, unreadable) = ids(&listing);
    assert_eq!(readable, [good.id.as_str()]);
    let mut expected = vec![(Some("team-a"), Some("bad-far"), "stored_data_corrupt")];
    if db.pg().is_none() {
        expected.push((Some("team-a"), Some("bad-text"), "database_error"));
    }
    let mut unreadable = unreadable;
    unreadable.sort();
    assert_eq!(unreadable, expected);
    // The lists that always failed on a bad row still do; team-b's own
    // list never sees team-a's rows.
    assert_eq!(
        a.list_all(Some(ApprovalStatus::Pending), now)
            .await
            .unwrap_err()
            .code(),
        "stored_data_corrupt"
    );
    let own = a.list("team-b", None, now).await.unwrap();
    assert_eq!(own.len(), 1);
});

// Operators answer an approval by id alone: finding its tenant reads no
// other row, so a planted one hides no other (and is itself still found).
// Review finding: `toolgate approvals approve` without `--tenant` listed
// every row first.
both_backends!(a_bad_row_hides_no_tenant_from_a_look_up_by_id, |db| {
    let now = Timestamp::now();
    let good = db
        .store
        .approvals()
        .request(
            new_approval("team-b", "inv-lookup", Duration::from_secs(600)),
            now,
        )
        .await
        .unwrap();
    let bad = planted("team-a", "bad-lookup", &FAR.to_string(), &FAR.to_string());
    let pg = format!(
        "ALTER TABLE approvals DISABLE TRIGGER approvals_times_readable; {bad}; \
         ALTER TABLE approvals ENABLE TRIGGER approvals_times_readable"
    );
    db.raw(&pg, &bad).await;

    let a = db.store.approvals();
    assert_eq!(a.tenant_of(&good.id).await.unwrap(), "team-b");
    assert_eq!(a.tenant_of("bad-lookup").await.unwrap(), "team-a");
    let missing = a.tenant_of("nope").await.unwrap_err();
    assert_eq!(missing.code(), "not_found");
    assert!(!missing.is_unreadable_row());
    // Reading the planted row itself fails, and says it is the row's fault.
    let unread = a.get("team-a", "bad-lookup", now).await.unwrap_err();
    assert!(unread.is_unreadable_row(), "{unread}");
});

/// As tenant A's own role: no time the store cannot read is written any
/// more, and a row A planted before migration 0021 hides none of B's
/// approvals from the list the controller mirrors.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_cannot_stall_the_list_of_every_tenants_approvals() {
    let Some(mut fx) = Fixture::new().await else {
        return;
    };
    let a = fx.tenant_store("team-a").await;
    let b = fx.tenant_store("team-b").await;
    let pa = a.as_postgres().unwrap().clone();
    let now = Timestamp::now();
    let soon = (now.as_millisecond() + 600_000).to_string();
    let ok = now.as_millisecond().to_string();
    for sql in [
        planted("team-a", "x1", &FAR.to_string(), &soon),
        planted("team-a", "x2", "-1", &soon),
        planted("team-a", "x3", &ok, "'infinity'::float8::bigint"),
        planted("team-a", "x4", &ok, "253402300799999"),
    ] {
        let code = sqlstate(&pa, &sql).await;
        // x3: PostgreSQL itself refuses an infinite bigint.
        assert!(code == "TG007" || code == "22003", "{sql}: {code}");
    }
    let mine = a
        .approvals()
        .request(approval("team-a", "inv-a"), now)
        .await
        .unwrap();
    assert_eq!(
        sqlstate(
            &pa,
            &format!(
                "UPDATE approvals SET consumed_at = {FAR} WHERE id = '{}'",
                mine.id
            )
        )
        .await,
        "TG007"
    );
    assert_eq!(
        sqlstate(
            &pa,
            "INSERT INTO flow_labels (tenant, scope, subject, label, decision_id, set_at) \
             VALUES ('team-a', 'run', 'run-1', 'x', 'd', 253402300799999)"
        )
        .await,
        "23514"
    );
    // Through the store the refusal is typed.
    let mut late = approval("team-a", "inv-late");
    late.ttl = Duration::from_secs(3600);
    let end: Timestamp = "9998-12-31T23:30:00Z".parse().unwrap();
    assert_eq!(
        a.approvals().request(late, end).await.unwrap_err().code(),
        "invalid_input"
    );

    // The schema before 0021: A plants a row as its own role.
    let toggle = |on: &str| format!("ALTER TABLE approvals {on} TRIGGER approvals_times_readable");
    sqlx::raw_sql(&toggle("DISABLE"))
        .execute(fx.admin_pool())
        .await
        .unwrap();
    sqlx::raw_sql(&planted("team-a", "poison", &FAR.to_string(), &soon))
        .execute(&pa)
        .await
        .unwrap();
    sqlx::raw_sql(&toggle("ENABLE"))
        .execute(fx.admin_pool())
        .await
        .unwrap();
    let later = now + jiff::SignedDuration::from_secs(1);
    let theirs = b
        .approvals()
        .request(approval("team-b", "inv-b"), later)
        .await
        .unwrap();

    let listing = fx
        .admin
        .approvals()
        .list_all_readable(Some(ApprovalStatus::Pending), now)
        .await
        .unwrap();
    let (readable, unreadable) = ids(&listing);
    assert_eq!(readable, [mine.id.as_str(), theirs.id.as_str()]);
    assert_eq!(
        unreadable,
        [(Some("team-a"), Some("poison"), "stored_data_corrupt")]
    );
    // B's own reads never meet A's row.
    assert_eq!(
        b.approvals().list("team-b", None, now).await.unwrap().len(),
        1
    );
    a.close().await;
    b.close().await;
}
