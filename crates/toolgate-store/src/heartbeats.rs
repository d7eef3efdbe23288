//! Sidecar heartbeats: the latest report of each pod, so the controller can
//! show how many pods enforce which policy version.

use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use sqlx::{FromRow, Row};

use crate::shadow_tally::ShadowTally;
use crate::{Result, Store, StoreError, on_pool, require, ts_from_ms};

/// One sidecar's latest report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Heartbeat {
    /// Pod name.
    pub pod_name: String,
    /// Pod namespace.
    pub pod_namespace: String,
    /// Profile the sidecar enforces.
    pub profile: String,
    /// Policy version it has loaded.
    pub policy_version: String,
    /// Sidecar-local counter, increasing per heartbeat.
    pub sequence: i64,
    /// When the sidecar sent it.
    pub last_seen: Timestamp,
    /// What the bundle's candidate decided since the sidecar loaded it,
    /// when the bundle shadows one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shadow: Option<ShadowTally>,
}

#[derive(FromRow)]
struct HeartbeatRow {
    pod_name: String,
    pod_namespace: String,
    profile: String,
    policy_version: String,
    sequence: i64,
    last_seen: i64,
    shadow: Option<String>,
}

impl HeartbeatRow {
    fn into_heartbeat(self) -> Result<Heartbeat> {
        Ok(Heartbeat {
            last_seen: ts_from_ms(self.last_seen)?,
            pod_name: self.pod_name,
            pod_namespace: self.pod_namespace,
            profile: self.profile,
            policy_version: self.policy_version,
            sequence: self.sequence,
            shadow: self.shadow.as_deref().and_then(ShadowTally::from_text),
        })
    }
}

/// A stored heartbeat that could not be read back.
#[derive(Debug)]
pub struct UnreadableHeartbeat {
    /// The pod's namespace, if that column itself reads back.
    pub pod_namespace: Option<String>,
    /// The pod's name, if that column itself reads back.
    pub pod_name: Option<String>,
    /// Why the row did not read (`stored_data_corrupt` for a time out of
    /// range, `database_error` for a value of the wrong type).
    pub error: StoreError,
}

/// What [`Heartbeats::list_profile_heartbeats`] found.
#[derive(Debug, Default)]
pub struct HeartbeatListing {
    /// The heartbeats that read back, by pod name.
    pub heartbeats: Vec<Heartbeat>,
    /// The rows that did not, in the same order.
    pub unreadable: Vec<UnreadableHeartbeat>,
}

/// Upserts a heartbeat, `$1` namespace through `$7` shadow tally.
const UPSERT: &str = "INSERT INTO sidecar_heartbeats (pod_namespace, pod_name, profile, \
    policy_version, sequence, last_seen, shadow) VALUES ($1, $2, $3, $4, $5, $6, $7) \
    ON CONFLICT (pod_namespace, pod_name) DO UPDATE SET profile = excluded.profile, \
    policy_version = excluded.policy_version, sequence = excluded.sequence, \
    last_seen = excluded.last_seen, shadow = excluded.shadow";

/// The columns a heartbeat is read from.
const COLUMNS: &str =
    "pod_name, pod_namespace, profile, policy_version, sequence, last_seen, shadow";

fn check(hb: &Heartbeat) -> Result<()> {
    require("pod_name", &hb.pod_name)?;
    require("pod_namespace", &hb.pod_namespace)?;
    require("profile", &hb.profile)?;
    require("policy_version", &hb.policy_version)?;
    if hb.sequence < 0 {
        return Err(StoreError::InvalidInput(
            "sequence must not be negative".into(),
        ));
    }
    if hb
        .shadow
        .as_ref()
        .is_some_and(|s| s.to_text().len() > crate::shadow_tally::MAX_TALLY_BYTES)
    {
        return Err(StoreError::InvalidInput(
            "shadow tally exceeds its size limit".into(),
        ));
    }
    Ok(())
}

/// Heartbeat operations. Obtain with [`Store::heartbeats`].
#[derive(Debug, Clone, Copy)]
pub struct Heartbeats<'a> {
    pub(crate) store: &'a Store,
}

impl Heartbeats<'_> {
    /// Upserts the pod's heartbeat (one row per namespace and pod name).
    pub async fn record_heartbeat(&self, hb: &Heartbeat) -> Result<()> {
        check(hb)?;
        on_pool!(self.store, pool => {
            sqlx::query(UPSERT)
                .bind(&hb.pod_namespace)
                .bind(&hb.pod_name)
                .bind(&hb.profile)
                .bind(&hb.policy_version)
                .bind(hb.sequence)
                .bind(hb.last_seen.as_millisecond())
                .bind(hb.shadow.as_ref().map(ShadowTally::to_text))
                .execute(pool)
                .await?;
        });
        Ok(())
    }

    /// [`Heartbeats::record_heartbeat`], then [`crate::Intents::open_counts`]
    /// of `tenant`: on PostgreSQL in one statement, since every idle
    /// sidecar of a fleet sends it on a timer.
    pub async fn record_heartbeat_and_count(
        &self,
        hb: &Heartbeat,
        tenant: &str,
    ) -> Result<(i64, i64)> {
        check(hb)?;
        require("tenant", tenant)?;
        match &self.store.backend {
            crate::Backend::Postgres(db) => {
                let counts = crate::intents::open_counts_sql(8);
                let sql = format!("WITH beat AS ({UPSERT} RETURNING 1) {counts}");
                Ok(sqlx::query_as(&sql)
                    .bind(&hb.pod_namespace)
                    .bind(&hb.pod_name)
                    .bind(&hb.profile)
                    .bind(&hb.policy_version)
                    .bind(hb.sequence)
                    .bind(hb.last_seen.as_millisecond())
                    .bind(hb.shadow.as_ref().map(ShadowTally::to_text))
                    .bind(tenant)
                    .fetch_one(db)
                    .await?)
            }
            crate::Backend::Sqlite(_) => {
                self.record_heartbeat(hb).await?;
                self.store.intents().open_counts(tenant).await
            }
        }
    }

    /// Latest heartbeat of every pod, optionally only pods on `profile`,
    /// ordered by namespace and pod name.
    pub async fn list_heartbeats(&self, profile: Option<&str>) -> Result<Vec<Heartbeat>> {
        let sql = format!(
            "SELECT {COLUMNS} FROM sidecar_heartbeats WHERE ($1 IS NULL OR profile = $1) \
            ORDER BY pod_namespace, pod_name"
        );
        let rows: Vec<HeartbeatRow> = on_pool!(self.store, pool => {
            sqlx::query_as(&sql).bind(profile).fetch_all(pool).await?
        });
        rows.into_iter().map(HeartbeatRow::into_heartbeat).collect()
    }

    /// The heartbeats of the pods in `namespace` on `profile` (a profile's
    /// own fleet), decoded row by row: a row that does not read back (a
    /// tenant role writes its pods' heartbeats itself) is named, not a
    /// failure, so it holds back nothing but itself. Only `namespace`'s
    /// rows are read, so another tenant's never reach this profile.
    pub async fn list_profile_heartbeats(
        &self,
        namespace: &str,
        profile: &str,
    ) -> Result<HeartbeatListing> {
        require("namespace", namespace)?;
        require("profile", profile)?;
        let sql = format!(
            "SELECT {COLUMNS} FROM sidecar_heartbeats WHERE pod_namespace = $1 AND profile = $2 \
            ORDER BY pod_name"
        );
        let mut listing = HeartbeatListing::default();
        // Fetched undecoded: decoding in the fetch fails every row for one.
        let rows: Vec<std::result::Result<Heartbeat, UnreadableHeartbeat>> = on_pool!(self.store, pool => {
            sqlx::query(&sql)
                .bind(namespace)
                .bind(profile)
                .fetch_all(pool)
                .await?
                .iter()
                .map(|row| {
                    HeartbeatRow::from_row(row)
                        .map_err(StoreError::from)
                        .and_then(HeartbeatRow::into_heartbeat)
                        .map_err(|error| UnreadableHeartbeat {
                            pod_namespace: row.try_get("pod_namespace").ok(),
                            pod_name: row.try_get("pod_name").ok(),
                            error,
                        })
                })
                .collect()
        });
        for row in rows {
            match row {
                Ok(hb) => listing.heartbeats.push(hb),
                Err(bad) => listing.unreadable.push(bad),
            }
        }
        Ok(listing)
    }
}
