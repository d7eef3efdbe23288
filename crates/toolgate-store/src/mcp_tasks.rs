//! MCP tasks the gateway holds (`toolgate_mcp::tasks`): an escalated
//! `tools/call` waiting for its approval, kept so that a restarted sidecar
//! resumes it (migration postgres 0019, sqlite 0013).
//!
//! A task is `held` until its approval is decided; [`McpTasks::claim_forward`]
//! moves it to `forwarding` — one process wins that, and it is committed
//! before the request is sent — and it ends `completed`, `failed` or
//! `cancelled`. A task still `forwarding` when a sidecar starts was being
//! sent when the last one stopped: it is never sent again, and
//! [`McpTasks::fail_interrupted`] fails it with its outcome unknown.

use jiff::Timestamp;

use crate::fields::{require, require_opt, ts_from_ms};
use crate::{Result, Store, StoreError, on_pool};

/// The error text of a task interrupted while forwarding.
pub const FORWARD_INTERRUPTED: &str = "outcome unknown: the sidecar stopped while forwarding";

/// Where a held task stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum McpTaskState {
    /// Waiting on its approval.
    Held,
    /// Claimed and being sent upstream (or sent, its answer awaited).
    Forwarding,
    /// The server's result is in `outcome`.
    Completed,
    /// The error is in `outcome`.
    Failed,
    /// Cancelled by its client while held.
    Cancelled,
}

impl McpTaskState {
    /// The stored spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Held => "held",
            Self::Forwarding => "forwarding",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
        }
    }

    fn parse(text: &str) -> Result<Self> {
        Ok(match text {
            "held" => Self::Held,
            "forwarding" => Self::Forwarding,
            "completed" => Self::Completed,
            "failed" => Self::Failed,
            "cancelled" => Self::Cancelled,
            other => {
                return Err(StoreError::Corrupt(format!("mcp task state {other:?}")));
            }
        })
    }

    /// Whether the task has ended.
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Completed | Self::Failed | Self::Cancelled)
    }
}

/// A task to hold.
#[derive(Debug, Clone)]
pub struct NewMcpTask<'a> {
    /// The tenant whose sidecar holds it.
    pub tenant: &'a str,
    /// The task id the client was given.
    pub task_id: &'a str,
    /// The MCP server (upstream) name.
    pub server: &'a str,
    /// The run that made the call.
    pub run_id: &'a str,
    /// The MCP session it belongs to, if any.
    pub session: Option<&'a str>,
    /// The approval it waits on.
    pub approval_id: &'a str,
    /// The digest the approval is bound to, if known.
    pub call_digest: Option<&'a str>,
    /// What the gateway needs to forward the call (opaque JSON text).
    pub request: &'a str,
    /// When it was held.
    pub at: Timestamp,
    /// When it is given up.
    pub expires_at: Timestamp,
}

/// A held task as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct McpTask {
    /// The tenant.
    pub tenant: String,
    /// The task id.
    pub task_id: String,
    /// The MCP server name.
    pub server: String,
    /// The run.
    pub run_id: String,
    /// The MCP session.
    pub session: Option<String>,
    /// The approval waited on.
    pub approval_id: String,
    /// The digest the approval is bound to.
    pub call_digest: Option<String>,
    /// What the gateway forwards.
    pub request: String,
    /// Where it stands.
    pub state: McpTaskState,
    /// The result or error (JSON text) once ended.
    pub outcome: Option<String>,
    /// When it was held.
    pub created_at: Timestamp,
    /// Its last change.
    pub updated_at: Timestamp,
    /// When it is given up.
    pub expires_at: Timestamp,
}

type Row = (
    String,
    String,
    String,
    String,
    Option<String>,
    String,
    Option<String>,
    String,
    String,
    Option<String>,
    i64,
    i64,
    i64,
);

const COLUMNS: &str = "tenant, task_id, server, run_id, session, approval_id, call_digest, \
    request, state, outcome, created_at, updated_at, expires_at";

fn task(row: Row) -> Result<McpTask> {
    let (tenant, task_id, server, run_id, session, approval_id, call_digest, request, state) = (
        row.0, row.1, row.2, row.3, row.4, row.5, row.6, row.7, row.8,
    );
    Ok(McpTask {
        tenant,
        task_id,
        server,
        run_id,
        session,
        approval_id,
        call_digest,
        request,
        state: McpTaskState::parse(&state)?,
        outcome: row.9,
        created_at: ts_from_ms(row.10)?,
        updated_at: ts_from_ms(row.11)?,
        expires_at: ts_from_ms(row.12)?,
    })
}

/// The MCP tasks of a tenant's gateways.
pub struct McpTasks<'a> {
    pub(crate) store: &'a Store,
}

impl McpTasks<'_> {
    /// Holds a new task (`held`). Durable when it returns: the client is
    /// given the task id only after. A task id already held is a conflict.
    pub async fn hold(&self, t: &NewMcpTask<'_>) -> Result<()> {
        require("tenant", t.tenant)?;
        require("task_id", t.task_id)?;
        require("server", t.server)?;
        require("run_id", t.run_id)?;
        require("approval_id", t.approval_id)?;
        require_opt("session", t.session)?;
        require_opt("call_digest", t.call_digest)?;
        let sql = format!(
            "INSERT INTO mcp_tasks ({COLUMNS}) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 'held', NULL, $9, $9, $10)"
        );
        let at = t.at.as_millisecond();
        on_pool!(self.store, pool => {
            sqlx::query(&sql)
                .bind(t.tenant)
                .bind(t.task_id)
                .bind(t.server)
                .bind(t.run_id)
                .bind(t.session)
                .bind(t.approval_id)
                .bind(t.call_digest)
                .bind(t.request)
                .bind(at)
                .bind(t.expires_at.as_millisecond())
                .execute(pool)
                .await?;
        });
        Ok(())
    }

    /// Task `task_id` of `tenant`, if it is stored.
    pub async fn get(&self, tenant: &str, task_id: &str) -> Result<Option<McpTask>> {
        require("tenant", tenant)?;
        require("task_id", task_id)?;
        let sql = format!("SELECT {COLUMNS} FROM mcp_tasks WHERE tenant = $1 AND task_id = $2");
        let row: Option<Row> = on_pool!(self.store, pool => {
            sqlx::query_as(&sql).bind(tenant).bind(task_id).fetch_optional(pool).await?
        });
        row.map(task).transpose()
    }

    /// The tasks of `tenant` not yet ended (`held` or `forwarding`), of
    /// `server` when given, oldest first.
    pub async fn list_open(&self, tenant: &str, server: Option<&str>) -> Result<Vec<McpTask>> {
        require("tenant", tenant)?;
        require_opt("server", server)?;
        let sql = format!(
            "SELECT {COLUMNS} FROM mcp_tasks WHERE tenant = $1 \
             AND state IN ('held', 'forwarding') AND ($2 IS NULL OR server = $2) \
             ORDER BY created_at, task_id"
        );
        let rows: Vec<Row> = on_pool!(self.store, pool => {
            sqlx::query_as(&sql).bind(tenant).bind(server).fetch_all(pool).await?
        });
        rows.into_iter().map(task).collect()
    }

    /// The tasks of `run_id` in `session` (the ones its client may see),
    /// ended or not, oldest first, at most `limit`.
    pub async fn list_of_session(
        &self,
        tenant: &str,
        server: &str,
        run_id: &str,
        session: Option<&str>,
        limit: u32,
    ) -> Result<Vec<McpTask>> {
        require("tenant", tenant)?;
        require("server", server)?;
        require("run_id", run_id)?;
        require_opt("session", session)?;
        let same = if self.store.is_postgres() {
            "IS NOT DISTINCT FROM"
        } else {
            "IS"
        };
        let sql = format!(
            "SELECT {COLUMNS} FROM mcp_tasks WHERE tenant = $1 AND server = $2 \
             AND run_id = $3 AND session {same} $4 \
             ORDER BY created_at, task_id LIMIT $5"
        );
        let rows: Vec<Row> = on_pool!(self.store, pool => {
            sqlx::query_as(&sql)
                .bind(tenant)
                .bind(server)
                .bind(run_id)
                .bind(session)
                .bind(i64::from(limit))
                .fetch_all(pool)
                .await?
        });
        rows.into_iter().map(task).collect()
    }

    /// Moves `held` task `task_id` to `forwarding`, if it is still held and
    /// not expired at `at`: `true` for the one caller that did so. Committed
    /// when it returns, so it is called before the request is sent.
    pub async fn claim_forward(&self, tenant: &str, task_id: &str, at: Timestamp) -> Result<bool> {
        self.transition(tenant, task_id, &["held"], "forwarding", None, at, true)
            .await
    }

    /// Ends `forwarding` task `task_id` with the server's `result` (JSON
    /// text); `false` when it was not forwarding.
    pub async fn complete(
        &self,
        tenant: &str,
        task_id: &str,
        result: &str,
        at: Timestamp,
    ) -> Result<bool> {
        let from = ["forwarding"];
        self.transition(tenant, task_id, &from, "completed", Some(result), at, false)
            .await
    }

    /// Ends task `task_id`, held or forwarding, with `error` (JSON text);
    /// `false` when it had ended already.
    pub async fn fail(
        &self,
        tenant: &str,
        task_id: &str,
        error: &str,
        at: Timestamp,
    ) -> Result<bool> {
        let from = ["held", "forwarding"];
        self.transition(tenant, task_id, &from, "failed", Some(error), at, false)
            .await
    }

    /// Cancels `held` task `task_id`; `false` when it was no longer held.
    pub async fn cancel(&self, tenant: &str, task_id: &str, at: Timestamp) -> Result<bool> {
        self.transition(tenant, task_id, &["held"], "cancelled", None, at, false)
            .await
    }

    /// Fails every task of `tenant`'s `server` left `forwarding` by a
    /// sidecar that stopped (see [`FORWARD_INTERRUPTED`]), with `error`
    /// (JSON text); returns their ids. Called once at start, before any of
    /// this sidecar's own tasks can be forwarding.
    pub async fn fail_interrupted(
        &self,
        tenant: &str,
        server: &str,
        error: &str,
        at: Timestamp,
    ) -> Result<Vec<String>> {
        require("tenant", tenant)?;
        require("server", server)?;
        let mut ids: Vec<String> = on_pool!(self.store, pool => {
            sqlx::query_scalar(
                "UPDATE mcp_tasks SET state = 'failed', outcome = $3, updated_at = $4 \
                 WHERE tenant = $1 AND server = $2 AND state = 'forwarding' RETURNING task_id",
            )
            .bind(tenant)
            .bind(server)
            .bind(error)
            .bind(at.as_millisecond())
            .fetch_all(pool)
            .await?
        });
        ids.sort();
        Ok(ids)
    }

    /// Deletes `tenant`'s tasks that expired before `before`; returns how
    /// many.
    pub async fn purge_expired(&self, tenant: &str, before: Timestamp) -> Result<u64> {
        require("tenant", tenant)?;
        let done = on_pool!(self.store, pool => {
            sqlx::query("DELETE FROM mcp_tasks WHERE tenant = $1 AND expires_at < $2")
                .bind(tenant)
                .bind(before.as_millisecond())
                .execute(pool)
                .await?
                .rows_affected()
        });
        Ok(done)
    }

    #[allow(clippy::too_many_arguments)]
    async fn transition(
        &self,
        tenant: &str,
        task_id: &str,
        from: &[&str],
        to: &str,
        outcome: Option<&str>,
        at: Timestamp,
        unexpired: bool,
    ) -> Result<bool> {
        require("tenant", tenant)?;
        require("task_id", task_id)?;
        let states = from
            .iter()
            .map(|s| format!("'{s}'"))
            .collect::<Vec<_>>()
            .join(", ");
        let sql = format!(
            "UPDATE mcp_tasks SET state = $3, outcome = COALESCE($4, outcome), updated_at = $5 \
             WHERE tenant = $1 AND task_id = $2 AND state IN ({states}) \
             AND (NOT $6 OR expires_at > $5) RETURNING task_id"
        );
        let won: Option<String> = on_pool!(self.store, pool => {
            sqlx::query_scalar(&sql)
                .bind(tenant)
                .bind(task_id)
                .bind(to)
                .bind(outcome)
                .bind(at.as_millisecond())
                .bind(unexpired)
                .fetch_optional(pool)
                .await?
        });
        Ok(won.is_some())
    }
}
