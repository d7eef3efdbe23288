//! Approval notifications: the approval events to tell people about, and
//! which channel has been sent which. The events are the `approval.*` rows
//! of `run_events`, each written in the transaction of the change it
//! describes (the outbox); deliveries are remembered per (channel, event),
//! never as a cursor, so an event committed after a later one was sent is
//! still found (migration 0014 / sqlite 0010).

use std::collections::HashMap;

use jiff::Timestamp;

use crate::{Result, Store, StoreError, on_pool, require, ts_from_ms};

/// Longest channel key.
pub const MAX_CHANNEL_LEN: usize = 600;

/// One approval event to notify about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalEvent {
    /// The event's id (`run_events.id`): with the channel, what a delivery
    /// is keyed by, and what receivers de-duplicate on.
    pub id: i64,
    /// Tenant (namespace) of the approval.
    pub tenant: String,
    /// `approval.requested`, `approval.resolved`, `approval.expired` or
    /// `approval.cancelled`.
    pub kind: String,
    /// The approval's id.
    pub approval_id: String,
    /// The event's own JSON (for `approval.resolved`: the decision and who
    /// made it).
    pub payload: String,
    /// When the change committed its event.
    pub created_at: Timestamp,
}

/// What is known of one (channel, event) delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    /// Attempts made so far.
    pub attempts: u32,
    /// Not to be tried again before this.
    pub next_attempt_at: Timestamp,
    /// When a receiver accepted it.
    pub delivered_at: Option<Timestamp>,
    /// The last failure, as the sender described it.
    pub last_error: Option<String>,
}

#[derive(sqlx::FromRow)]
struct EventRow {
    id: i64,
    tenant: String,
    kind: String,
    subject_id: String,
    payload: String,
    created_at: i64,
}

#[derive(sqlx::FromRow)]
struct DeliveryRow {
    channel: String,
    event_id: i64,
    attempts: i64,
    next_attempt_at: i64,
    delivered_at: Option<i64>,
    last_error: Option<String>,
}

/// Notification bookkeeping. Obtain with [`Store::notifications`]; the
/// controller's leader is its only user (owner role).
#[derive(Debug, Clone, Copy)]
pub struct Notifications<'a> {
    pub(crate) store: &'a Store,
}

impl Notifications<'_> {
    /// Approval events created from `since` to `until` with an id above
    /// `after`, oldest first, at most `limit`: page through a window with
    /// the last id seen. The window is bounded both ways, so a row whose
    /// time is out of range (a tenant role can write its own run events)
    /// is never read, let alone kept in the window for ever.
    pub async fn events(
        &self,
        since: Timestamp,
        until: Timestamp,
        after: i64,
        limit: u32,
    ) -> Result<Vec<ApprovalEvent>> {
        let sql = "SELECT id, tenant, kind, subject_id, payload, created_at FROM run_events \
            WHERE kind LIKE 'approval.%' AND created_at BETWEEN $1 AND $2 AND id > $3 \
            ORDER BY id LIMIT $4";
        let rows: Vec<EventRow> = on_pool!(self.store, pool => {
            sqlx::query_as(sql)
                .bind(since.as_millisecond())
                .bind(until.as_millisecond())
                .bind(after)
                .bind(i64::from(limit))
                .fetch_all(pool)
                .await?
        });
        rows.into_iter()
            .map(|r| {
                Ok(ApprovalEvent {
                    created_at: ts_from_ms(r.created_at)?,
                    id: r.id,
                    tenant: r.tenant,
                    kind: r.kind,
                    approval_id: r.subject_id,
                    payload: r.payload,
                })
            })
            .collect()
    }

    /// The deliveries recorded for events `first..=last`, every channel,
    /// keyed by (channel, event id).
    pub async fn deliveries(
        &self,
        first: i64,
        last: i64,
    ) -> Result<HashMap<(String, i64), Delivery>> {
        let sql = "SELECT channel, event_id, attempts, next_attempt_at, delivered_at, last_error \
            FROM notification_deliveries WHERE event_id BETWEEN $1 AND $2";
        let rows: Vec<DeliveryRow> = on_pool!(self.store, pool => {
            sqlx::query_as(sql).bind(first).bind(last).fetch_all(pool).await?
        });
        rows.into_iter()
            .map(|r| {
                let delivery = Delivery {
                    attempts: u32::try_from(r.attempts).unwrap_or(u32::MAX),
                    next_attempt_at: ts_from_ms(r.next_attempt_at)?,
                    delivered_at: r.delivered_at.map(ts_from_ms).transpose()?,
                    last_error: r.last_error,
                };
                Ok(((r.channel, r.event_id), delivery))
            })
            .collect()
    }

    /// Records that `channel` accepted event `event_id` at `now`.
    pub async fn delivered(&self, channel: &str, event_id: i64, now: Timestamp) -> Result<()> {
        check_channel(channel)?;
        let sql = "INSERT INTO notification_deliveries (channel, event_id, attempts, \
            next_attempt_at, delivered_at, last_error) VALUES ($1, $2, 1, $3, $3, NULL) \
            ON CONFLICT (channel, event_id) DO UPDATE SET attempts = \
            notification_deliveries.attempts + 1, delivered_at = excluded.delivered_at, \
            last_error = NULL";
        on_pool!(self.store, pool => {
            sqlx::query(sql)
                .bind(channel)
                .bind(event_id)
                .bind(now.as_millisecond())
                .execute(pool)
                .await?;
        });
        Ok(())
    }

    /// Records a failed attempt of `channel` at event `event_id`: `error`
    /// (cut to 1,000 characters) and when to try again.
    pub async fn failed(
        &self,
        channel: &str,
        event_id: i64,
        error: &str,
        next_attempt_at: Timestamp,
    ) -> Result<()> {
        check_channel(channel)?;
        let error: String = error.chars().take(1000).collect();
        let sql = "INSERT INTO notification_deliveries (channel, event_id, attempts, \
            next_attempt_at, delivered_at, last_error) VALUES ($1, $2, 1, $3, NULL, $4) \
            ON CONFLICT (channel, event_id) DO UPDATE SET attempts = \
            notification_deliveries.attempts + 1, next_attempt_at = excluded.next_attempt_at, \
            last_error = excluded.last_error WHERE notification_deliveries.delivered_at IS NULL";
        on_pool!(self.store, pool => {
            sqlx::query(sql)
                .bind(channel)
                .bind(event_id)
                .bind(next_attempt_at.as_millisecond())
                .bind(&error)
                .execute(pool)
                .await?;
        });
        Ok(())
    }
}

fn check_channel(channel: &str) -> Result<()> {
    require("channel", channel)?;
    if channel.len() > MAX_CHANNEL_LEN {
        return Err(StoreError::InvalidInput(format!(
            "channel is longer than {MAX_CHANNEL_LEN} bytes"
        )));
    }
    Ok(())
}
