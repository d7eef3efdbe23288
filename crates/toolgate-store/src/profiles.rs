//! Loaded policy profile versions and the process-wide event stream.
//!
//! Every version a process loads is recorded with its full content hashes so
//! a decision's `policy_version` can be traced to exact rules across deploys.
//! The accompanying `policy.profile.loaded` process event carries a
//! content-derived idempotency key, so reloading the same version (in this or
//! another process) never produces a second event.

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::{BeginWrite, Result, Store, StoreError, on_pool, require, ts_from_ms};

/// Kind of the event written by [`Profiles::record_profile_load`].
const PROFILE_LOADED: &str = "policy.profile.loaded";

/// A profile version a process has just loaded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProfileLoad {
    /// Profile name.
    pub profile: String,
    /// Namespace the profile lives in.
    pub namespace: String,
    /// Content-addressed version, `{profile}@{sha12}+h{sha8}`.
    pub policy_version: String,
    /// Full lowercase hex SHA-256 of the spec.
    pub spec_sha256: String,
    /// Full lowercase hex SHA-256 of the hardline rules.
    pub hardline_sha256: String,
    /// Digest of the bundle it came from, if any.
    pub bundle_digest: Option<String>,
    /// Identity of the loading process (e.g. pod name).
    pub loaded_by: String,
}

/// One recorded load.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProfileVersion {
    /// What was loaded.
    #[serde(flatten)]
    pub load: ProfileLoad,
    /// When it was first recorded for this loader.
    pub loaded_at: Timestamp,
}

/// One process-wide operational event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProcessEvent {
    /// Monotonic event id.
    pub id: i64,
    /// Event kind, e.g. `policy.profile.loaded`.
    pub kind: String,
    /// Content-derived deduplication key.
    pub idempotency_key: String,
    /// Event body.
    pub payload: serde_json::Value,
    /// When it was written.
    pub created_at: Timestamp,
}

#[derive(sqlx::FromRow)]
struct ProfileRow {
    profile: String,
    namespace: String,
    policy_version: String,
    spec_sha256: String,
    hardline_sha256: String,
    bundle_digest: Option<String>,
    loaded_by: String,
    loaded_at: i64,
}

#[derive(sqlx::FromRow)]
struct EventRow {
    id: i64,
    kind: String,
    idempotency_key: String,
    payload: String,
    created_at: i64,
}

fn require_sha256(field: &str, value: &str) -> Result<()> {
    if value.len() == 64
        && value
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    {
        Ok(())
    } else {
        Err(StoreError::InvalidInput(format!(
            "{field} must be 64 lowercase hex characters"
        )))
    }
}

/// Idempotency key of the profile-loaded event for `policy_version`.
fn loaded_event_key(policy_version: &str) -> String {
    toolgate_policy::digest::sha256_hex(format!("{PROFILE_LOADED}:{policy_version}").as_bytes())
}

/// Profile and process-event operations. Obtain with [`Store::profiles`].
#[derive(Debug, Clone, Copy)]
pub struct Profiles<'a> {
    pub(crate) store: &'a Store,
}

impl Profiles<'_> {
    /// Records a loaded profile version and, in the same transaction, its
    /// `policy.profile.loaded` event. Idempotent: a repeat by the same loader
    /// of the same namespace changes nothing, and the event exists once per
    /// policy version and writer's tenant. Returns `true` if this call wrote
    /// the event. Both rows are stamped with the caller's `now`.
    ///
    /// On PostgreSQL both keys include the tenant (migration 0012), so no
    /// tenant's rows can suppress another's, and a tenant role may only
    /// record loads by `sidecar:{its namespace}/…`.
    pub async fn record_profile_load(&self, load: ProfileLoad, now: Timestamp) -> Result<bool> {
        require("profile", &load.profile)?;
        require("namespace", &load.namespace)?;
        require("policy_version", &load.policy_version)?;
        require("loaded_by", &load.loaded_by)?;
        require_sha256("spec_sha256", &load.spec_sha256)?;
        require_sha256("hardline_sha256", &load.hardline_sha256)?;
        crate::require_opt("bundle_digest", load.bundle_digest.as_deref())?;
        let now = now.as_millisecond();
        let key = loaded_event_key(&load.policy_version);
        let payload = serde_json::json!({
            "profile": load.profile,
            "namespace": load.namespace,
            "policy_version": load.policy_version,
            "spec_sha256": load.spec_sha256,
            "hardline_sha256": load.hardline_sha256,
            "bundle_digest": load.bundle_digest,
            "loaded_by": load.loaded_by,
        })
        .to_string();
        let insert_profile = "INSERT INTO policy_profiles (profile, namespace, policy_version, \
            spec_sha256, hardline_sha256, bundle_digest, loaded_by, loaded_at) \
            VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT DO NOTHING";
        let insert_event = "INSERT INTO process_events (kind, idempotency_key, payload, \
            created_at) VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING";
        on_pool!(self.store, pool => {
            let mut tx = pool.begin_write().await?;
            sqlx::query(insert_profile)
                .bind(&load.profile)
                .bind(&load.namespace)
                .bind(&load.policy_version)
                .bind(&load.spec_sha256)
                .bind(&load.hardline_sha256)
                .bind(&load.bundle_digest)
                .bind(&load.loaded_by)
                .bind(now)
                .execute(&mut *tx)
                .await?;
            let wrote = sqlx::query(insert_event)
                .bind(PROFILE_LOADED)
                .bind(&key)
                .bind(&payload)
                .bind(now)
                .execute(&mut *tx)
                .await?
                .rows_affected();
            tx.commit().await?;
            Ok(wrote == 1)
        })
    }

    /// Raises the durable high-water mark of `namespace/profile` to
    /// `sequence` (with the bundle's digest). A lower or equal sequence
    /// leaves the mark as it is, so concurrent sidecars can only move it up.
    /// A raised mark is stamped with the caller's `now`.
    pub async fn record_bundle_sequence(
        &self,
        namespace: &str,
        profile: &str,
        sequence: u64,
        bundle_digest: &str,
        now: Timestamp,
    ) -> Result<()> {
        require("profile", profile)?;
        require("bundle_digest", bundle_digest)?;
        if namespace.len() > crate::MAX_FIELD_LEN || namespace.chars().any(char::is_control) {
            return Err(StoreError::InvalidInput(
                "namespace is not a valid name".into(),
            ));
        }
        self.store.check_file()?;
        let sequence = i64::try_from(sequence)
            .map_err(|_| StoreError::InvalidInput("bundle sequence is too large".into()))?;
        let sql = "INSERT INTO bundle_high_water (namespace, profile, sequence, bundle_digest, \
            updated_at) VALUES ($1, $2, $3, $4, $5) \
            ON CONFLICT (namespace, profile) DO UPDATE SET sequence = excluded.sequence, \
            bundle_digest = excluded.bundle_digest, updated_at = excluded.updated_at \
            WHERE excluded.sequence > bundle_high_water.sequence";
        on_pool!(self.store, pool => {
            sqlx::query(sql)
                .bind(namespace)
                .bind(profile)
                .bind(sequence)
                .bind(bundle_digest)
                .bind(now.as_millisecond())
                .execute(pool)
                .await?;
        });
        Ok(())
    }

    /// The highest bundle sequence (and its digest) recorded for
    /// `namespace/profile`, if any.
    pub async fn bundle_high_water(
        &self,
        namespace: &str,
        profile: &str,
    ) -> Result<Option<(u64, String)>> {
        let sql = "SELECT sequence, bundle_digest FROM bundle_high_water \
            WHERE namespace = $1 AND profile = $2";
        let row: Option<(i64, String)> = on_pool!(self.store, pool => {
            sqlx::query_as(sql).bind(namespace).bind(profile).fetch_optional(pool).await?
        });
        row.map(|(seq, digest)| {
            u64::try_from(seq)
                .map(|seq| (seq, digest))
                .map_err(|_| StoreError::Corrupt(format!("bundle sequence {seq}")))
        })
        .transpose()
    }

    /// Recorded loads, oldest first, optionally for one profile name.
    pub async fn list_profile_versions(
        &self,
        profile: Option<&str>,
    ) -> Result<Vec<ProfileVersion>> {
        let sql = "SELECT profile, namespace, policy_version, spec_sha256, hardline_sha256, \
            bundle_digest, loaded_by, loaded_at FROM policy_profiles \
            WHERE ($1 IS NULL OR profile = $1) ORDER BY id";
        let rows: Vec<ProfileRow> = on_pool!(self.store, pool => {
            sqlx::query_as(sql).bind(profile).fetch_all(pool).await?
        });
        rows.into_iter()
            .map(|r| {
                Ok(ProfileVersion {
                    loaded_at: ts_from_ms(r.loaded_at)?,
                    load: ProfileLoad {
                        profile: r.profile,
                        namespace: r.namespace,
                        policy_version: r.policy_version,
                        spec_sha256: r.spec_sha256,
                        hardline_sha256: r.hardline_sha256,
                        bundle_digest: r.bundle_digest,
                        loaded_by: r.loaded_by,
                    },
                })
            })
            .collect()
    }

    /// Process events with id greater than `after_id`, oldest first,
    /// optionally of one kind. Consumers page by remembering the last id.
    pub async fn list_process_events(
        &self,
        kind: Option<&str>,
        after_id: i64,
    ) -> Result<Vec<ProcessEvent>> {
        let sql = "SELECT id, kind, idempotency_key, payload, created_at FROM process_events \
            WHERE ($1 IS NULL OR kind = $1) AND id > $2 ORDER BY id LIMIT 10000";
        let rows: Vec<EventRow> = on_pool!(self.store, pool => {
            sqlx::query_as(sql).bind(kind).bind(after_id).fetch_all(pool).await?
        });
        rows.into_iter()
            .map(|r| {
                Ok(ProcessEvent {
                    payload: crate::parse_json(&r.payload, "process event payload")?,
                    created_at: ts_from_ms(r.created_at)?,
                    id: r.id,
                    kind: r.kind,
                    idempotency_key: r.idempotency_key,
                })
            })
            .collect()
    }
}
