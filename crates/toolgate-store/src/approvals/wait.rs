//! Waiting for an approval's answer: LISTEN/NOTIFY on PostgreSQL, polling
//! on SQLite. The one place the store reads the clock itself: a wait is
//! measured in real time, so it compares each re-read with the present.

use std::time::Duration;

use jiff::Timestamp;
use tokio::sync::broadcast;

use super::{Approval, ApprovalStatus, Approvals, PG_RECHECK, SQLITE_POLL};
use crate::{Result, require};

impl Approvals<'_> {
    /// Waits until the approval leaves `pending` (resolved or expired) or
    /// `deadline` elapses, and returns its state at that moment. Uses
    /// LISTEN/NOTIFY on PostgreSQL (re-reading at least every second as a
    /// safety net) and 50 ms polling on SQLite; holds no transaction while
    /// waiting. On PostgreSQL all waiters of one store share a single
    /// listening connection and borrow a pooled one only to re-read the row,
    /// so many waiters never starve other queries of connections.
    pub async fn wait(&self, tenant: &str, id: &str, deadline: Duration) -> Result<Approval> {
        require("tenant", tenant)?;
        require("id", id)?;
        let until = tokio::time::Instant::now() + deadline;
        match &self.store.backend {
            crate::Backend::Postgres(_) => {
                // Subscribe before the first read so a resolution between the
                // read and the subscription cannot be missed.
                let mut wakeups = self.store.wakeups(tenant).await;
                let wanted = format!("{tenant}/{id}");
                loop {
                    let approval = self.get(tenant, id, Timestamp::now()).await?;
                    let now = tokio::time::Instant::now();
                    if approval.status != ApprovalStatus::Pending || now >= until {
                        return Ok(approval);
                    }
                    let step = wake_at(until, &approval, PG_RECHECK);
                    match wakeups.as_mut() {
                        Some(rx) => {
                            let _ = tokio::time::timeout_at(step, async {
                                loop {
                                    match rx.recv().await {
                                        Ok(payload) if *payload == *wanted => break,
                                        Ok(_) => continue,
                                        // Missed some: re-read now.
                                        Err(broadcast::error::RecvError::Lagged(_)) => break,
                                        // Store closing: re-read on the timer.
                                        Err(broadcast::error::RecvError::Closed) => {
                                            tokio::time::sleep_until(step).await;
                                            break;
                                        }
                                    }
                                }
                            })
                            .await;
                        }
                        None => tokio::time::sleep_until(step).await,
                    }
                }
            }
            crate::Backend::Sqlite(_) => loop {
                let approval = self.get(tenant, id, Timestamp::now()).await?;
                let now = tokio::time::Instant::now();
                if approval.status != ApprovalStatus::Pending || now >= until {
                    return Ok(approval);
                }
                tokio::time::sleep_until(wake_at(until, &approval, SQLITE_POLL)).await;
            },
        }
    }
}

/// Next instant to re-read: the earliest of the caller's deadline, the
/// approval's own expiry, and one recheck interval from now.
fn wake_at(
    until: tokio::time::Instant,
    approval: &Approval,
    interval: Duration,
) -> tokio::time::Instant {
    let now = tokio::time::Instant::now();
    let mut at = until.min(now + interval);
    let to_expiry = approval.expires_at.as_millisecond() - Timestamp::now().as_millisecond();
    if to_expiry >= 0 {
        // +1ms so the re-read happens strictly after expiry.
        at = at.min(now + Duration::from_millis(to_expiry as u64 + 1));
    }
    at
}
