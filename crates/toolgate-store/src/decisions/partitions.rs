//! The decision table's monthly partitions on PostgreSQL (migration 0018).
//!
//! `decisions` is partitioned by range of `created_at`, one partition per
//! UTC calendar month, plus the table as it was before 0018 (everything up
//! to the month it ran in) and a default partition for rows no month
//! covers. [`Decisions::ensure_partitions`] creates the months ahead;
//! [`Decisions::drop_archived_partitions`] finishes what archiving
//! ([`Decisions::prune_through`]) leaves of past months: a partition whose
//! every row lies at or below its stream's archived position is dropped
//! whole, and from any other partition of a past month the archived rows
//! are deleted. SQLite has no partitions: both are no-ops there.

use jiff::Timestamp;
use serde::Serialize;

use super::Decisions;
use crate::{Backend, Result, StoreError};

/// Months created ahead of the current one.
pub const PARTITION_MONTHS_AHEAD: i32 = 2;

/// What [`Decisions::drop_archived_partitions`] did.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize)]
pub struct PartitionPrune {
    /// Partitions dropped whole (every row archived).
    pub dropped: Vec<String>,
    /// Rows that went with them.
    pub rows_dropped: u64,
    /// Archived rows deleted one by one from partitions that also hold
    /// rows not archived yet.
    pub rows_deleted: u64,
}

/// One partition of `decisions`, as the catalog describes it.
struct Partition {
    name: String,
    /// Lower bound (`None`: MINVALUE, or the default partition).
    from: Option<i64>,
    /// Upper bound (`None`: the default partition).
    to: Option<i64>,
}

/// Rows of a partition and whether every one lies at or below its
/// stream's archived position.
const COVERAGE: &str = "SELECT COALESCE(sum(p.n), 0)::bigint, \
     COALESCE(bool_and(a.seq IS NOT NULL AND p.last <= a.seq), true) \
     FROM (SELECT tenant, stream, max(seq) AS last, count(*) AS n FROM ONLY {part} \
           GROUP BY tenant, stream) p \
     LEFT JOIN LATERAL (SELECT max(seq) AS seq FROM decision_archives x \
                        WHERE x.tenant = p.tenant AND x.stream = p.stream) a ON true";

/// Deletes a partition's rows at or below their stream's archived
/// position, stream by stream (an index probe each).
const DELETE_ARCHIVED: &str = "DELETE FROM ONLY {part} d \
     USING (SELECT tenant, stream, max(seq) AS seq FROM decision_archives \
            GROUP BY tenant, stream) a \
     WHERE d.tenant = a.tenant AND d.stream = a.stream AND d.seq <= a.seq";

impl Decisions<'_> {
    /// Creates the partitions of the current month and the
    /// [`PARTITION_MONTHS_AHEAD`] after it that are missing; returns how many
    /// it created. Only the tables' owner may (the owner's store calls it
    /// when it opens). A no-op on SQLite.
    pub async fn ensure_partitions(&self) -> Result<u32> {
        let Backend::Postgres(db) = &self.store.backend else {
            return Ok(0);
        };
        let made: i32 = sqlx::query_scalar("SELECT toolgate_ensure_decision_partitions($1)")
            .bind(PARTITION_MONTHS_AHEAD)
            .fetch_one(db)
            .await?;
        Ok(made.max(0) as u32)
    }

    /// Removes the archived rows [`Decisions::prune_through`] left in
    /// partitions of past months: drops each partition whose rows are all
    /// archived (a stream's head never is, so a partition holding one
    /// stays), deletes the archived rows of the others, then creates the
    /// months ahead. Each partition is handled in a transaction of its own
    /// that locks it against inserts while it is checked; dropping one
    /// briefly takes the parent table's exclusive lock, bounded by the
    /// store's lock timeout. Idempotent; a no-op on SQLite. Owner only.
    pub async fn drop_archived_partitions(&self) -> Result<PartitionPrune> {
        let Backend::Postgres(db) = &self.store.backend else {
            return Ok(PartitionPrune::default());
        };
        let this_month: i64 = sqlx::query_scalar("SELECT toolgate_decision_month($1, 0)")
            .bind(Timestamp::now().as_millisecond())
            .fetch_one(db)
            .await?;
        let mut report = PartitionPrune::default();
        for part in self.partitions().await? {
            // The current month's archived rows wait until it is past;
            // later months hold none.
            let past = part.from.is_none_or(|from| from < this_month);
            if !past {
                continue;
            }
            let quoted = quote_ident(&part.name);
            let mut tx = db.begin().await?;
            sqlx::query(&format!(
                "SET LOCAL lock_timeout = {}",
                crate::schema::lock_timeout_ms(self.store.lock_timeout)
            ))
            .execute(&mut *tx)
            .await?;
            sqlx::query(&format!("LOCK TABLE ONLY {quoted} IN SHARE MODE"))
                .execute(&mut *tx)
                .await
                .map_err(|e| crate::schema::lock_wait(e, &part.name))?;
            let (rows, covered): (i64, bool) = sqlx::query_as(&COVERAGE.replace("{part}", &quoted))
                .fetch_one(&mut *tx)
                .await?;
            let whole = covered && part.to.is_some_and(|to| to <= this_month);
            if whole {
                sqlx::query(&format!("DROP TABLE {quoted}"))
                    .execute(&mut *tx)
                    .await
                    .map_err(|e| crate::schema::lock_wait(e, "decisions"))?;
                report.dropped.push(part.name);
                report.rows_dropped += rows.max(0) as u64;
            } else {
                report.rows_deleted += sqlx::query(&DELETE_ARCHIVED.replace("{part}", &quoted))
                    .execute(&mut *tx)
                    .await?
                    .rows_affected();
            }
            tx.commit().await?;
        }
        self.ensure_partitions().await?;
        Ok(report)
    }

    /// The partitions of `decisions`, oldest first, the default last.
    async fn partitions(&self) -> Result<Vec<Partition>> {
        let Backend::Postgres(db) = &self.store.backend else {
            return Ok(Vec::new());
        };
        let rows: Vec<(String, String)> = sqlx::query_as(
            "SELECT c.relname::text, pg_catalog.pg_get_expr(c.relpartbound, c.oid) \
             FROM pg_catalog.pg_inherits i JOIN pg_catalog.pg_class c ON c.oid = i.inhrelid \
             WHERE i.inhparent = 'decisions'::regclass",
        )
        .fetch_all(db)
        .await?;
        let mut parts = rows
            .into_iter()
            .map(|(name, bound)| parse_bound(name, &bound))
            .collect::<Result<Vec<_>>>()?;
        parts.sort_by_key(|p| (p.to.is_none(), p.from.unwrap_or(i64::MIN)));
        Ok(parts)
    }
}

/// A partition from its bound as `pg_get_expr` prints it: `DEFAULT`, or
/// `FOR VALUES FROM (a) TO (b)` with `MINVALUE`/`MAXVALUE` for open ends.
fn parse_bound(name: String, bound: &str) -> Result<Partition> {
    if bound.trim() == "DEFAULT" {
        return Ok(Partition {
            name,
            from: None,
            to: None,
        });
    }
    let corrupt = || StoreError::Corrupt(format!("decision partition {name}: bound {bound:?}"));
    let rest = bound
        .strip_prefix("FOR VALUES FROM (")
        .ok_or_else(corrupt)?;
    let (from, rest) = rest.split_once(") TO (").ok_or_else(corrupt)?;
    let to = rest.strip_suffix(')').ok_or_else(corrupt)?;
    let value = |v: &str| match v.trim().trim_matches('\'') {
        "MINVALUE" | "MAXVALUE" => Ok(None),
        n => n.parse::<i64>().map(Some).map_err(|_| corrupt()),
    };
    let (from, to) = (value(from)?, value(to)?);
    Ok(Partition {
        to: to.or(Some(i64::MAX)),
        from,
        name,
    })
}

/// `name` as a quoted SQL identifier.
fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_parse_as_postgres_prints_them() {
        let p = parse_bound(
            "d".into(),
            "FOR VALUES FROM (MINVALUE) TO ('1798761600000')",
        )
        .unwrap();
        assert_eq!((p.from, p.to), (None, Some(1_798_761_600_000)));
        let p = parse_bound("d".into(), "FOR VALUES FROM (5) TO (9)").unwrap();
        assert_eq!((p.from, p.to), (Some(5), Some(9)));
        let p = parse_bound("d".into(), "DEFAULT").unwrap();
        assert_eq!((p.from, p.to), (None, None));
        assert!(parse_bound("d".into(), "FOR VALUES IN (1)").is_err());
        assert!(parse_bound("d".into(), "FOR VALUES FROM (x) TO (9)").is_err());
    }

    #[test]
    fn identifiers_are_quoted() {
        assert_eq!(quote_ident("decisions_202612"), "\"decisions_202612\"");
        assert_eq!(quote_ident("a\"b"), "\"a\"\"b\"");
    }
}
