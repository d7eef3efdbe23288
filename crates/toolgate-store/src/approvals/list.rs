//! Listing approvals, decoded row by row.
//!
//! Tenants write their own approval rows (on PostgreSQL, as their own
//! role), so a row may hold what this code cannot read back: a time outside
//! what a timestamp can hold, or on SQLite a value of the wrong type. A
//! list across tenants must not let one such row hide every other tenant's
//! approvals: [`Approvals::list_all_readable`] returns the rows that read
//! back and names the ones that did not. The tenant-scoped lists still fail
//! on a bad row, as they always have.

use jiff::Timestamp;
use sqlx::{FromRow, Row};

use super::{Approval, ApprovalRow, ApprovalStatus, Approvals, COLUMNS};
use crate::{Result, StoreError, on_pool, require};

/// A stored approval that could not be read back.
#[derive(Debug)]
pub struct UnreadableApproval {
    /// The row's tenant, if that column itself reads back.
    pub tenant: Option<String>,
    /// The row's id, if that column itself reads back.
    pub id: Option<String>,
    /// Why the row did not read (`stored_data_corrupt` for a value out of
    /// range, `database_error` for one of the wrong type).
    pub error: StoreError,
}

/// What [`Approvals::list_all_readable`] found.
#[derive(Debug, Default)]
pub struct ApprovalListing {
    /// The approvals that read back, oldest first.
    pub approvals: Vec<Approval>,
    /// The rows that did not, in the same order.
    pub unreadable: Vec<UnreadableApproval>,
}

type Read = std::result::Result<Approval, UnreadableApproval>;

impl Approvals<'_> {
    /// Lists `tenant`'s approvals, oldest first, optionally only those whose
    /// effective status at `now` is `status`.
    pub async fn list(
        &self,
        tenant: &str,
        status: Option<ApprovalStatus>,
        now: Timestamp,
    ) -> Result<Vec<Approval>> {
        require("tenant", tenant)?;
        self.list_where(Some(tenant), status, now).await
    }

    /// Lists every tenant's approvals, for operators. Fails on the first
    /// row that does not read back; the controller's mirror uses
    /// [`Approvals::list_all_readable`] instead.
    pub async fn list_all(
        &self,
        status: Option<ApprovalStatus>,
        now: Timestamp,
    ) -> Result<Vec<Approval>> {
        self.list_where(None, status, now).await
    }

    /// Lists every tenant's approvals, for the controller's mirror into
    /// Approval resources and operators' `toolgate approvals list`,
    /// skipping (and naming) the rows that do not read back, so that one
    /// tenant's bad row holds back only itself. Not for tenant-facing APIs.
    pub async fn list_all_readable(
        &self,
        status: Option<ApprovalStatus>,
        now: Timestamp,
    ) -> Result<ApprovalListing> {
        let mut listing = ApprovalListing::default();
        for read in self.read_where(None, status, now).await? {
            match read {
                Ok(approval) => listing.approvals.push(approval),
                Err(bad) => listing.unreadable.push(bad),
            }
        }
        Ok(listing)
    }

    async fn list_where(
        &self,
        tenant: Option<&str>,
        status: Option<ApprovalStatus>,
        now: Timestamp,
    ) -> Result<Vec<Approval>> {
        self.read_where(tenant, status, now)
            .await?
            .into_iter()
            .map(|read| read.map_err(|bad| bad.error))
            .collect()
    }

    /// Every matching row, each decoded on its own.
    async fn read_where(
        &self,
        tenant: Option<&str>,
        status: Option<ApprovalStatus>,
        now: Timestamp,
    ) -> Result<Vec<Read>> {
        let now = now.as_millisecond();
        // The effective status applies lazy expiry, so a filter on `expired`
        // also finds pending rows whose time is up and `pending` excludes them.
        let effective = "(CASE WHEN status = 'pending' AND expires_at <= $3 \
            THEN 'expired' ELSE status END)";
        let sql = match tenant {
            Some(_) => format!(
                "SELECT {COLUMNS} FROM approvals WHERE tenant = $1 \
                 AND ($2 IS NULL OR {effective} = $2) ORDER BY created_at, id"
            ),
            None => format!(
                "SELECT {COLUMNS} FROM approvals WHERE ($1 IS NULL OR tenant = $1) \
                 AND ($2 IS NULL OR {effective} = $2) ORDER BY created_at, id"
            ),
        };
        let status = status.map(ApprovalStatus::as_str);
        // Fetched undecoded: decoding in the fetch would fail every row
        // for one that does not decode.
        let rows: Vec<std::result::Result<ApprovalRow, UnreadableApproval>> = on_pool!(self.store, pool => {
            sqlx::query(&sql)
                .bind(tenant)
                .bind(status)
                .bind(now)
                .fetch_all(pool)
                .await?
                .iter()
                .map(|row| {
                    ApprovalRow::from_row(row).map_err(|e| UnreadableApproval {
                        tenant: row.try_get("tenant").ok(),
                        id: row.try_get("id").ok(),
                        error: e.into(),
                    })
                })
                .collect()
        });
        Ok(rows
            .into_iter()
            .map(|row| {
                let row = row?;
                let (tenant, id) = (row.tenant.clone(), row.id.clone());
                row.into_approval(now).map_err(|error| UnreadableApproval {
                    tenant: Some(tenant),
                    id: Some(id),
                    error,
                })
            })
            .collect())
    }
}
