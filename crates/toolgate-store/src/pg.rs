//! PostgreSQL reached directly or through a transaction-mode pooler.
//!
//! A pooler in `pool_mode = transaction` (PgBouncer) lends a server
//! connection for one transaction and takes it back at the next
//! `ReadyForQuery` that says "idle". Two habits of sqlx break there:
//!
//! - it names the statements it prepares (`sqlx_s_1`, …) per client
//!   connection, so two clients create the same name on one server
//!   connection ("prepared statement already exists");
//! - it parses a statement and syncs before it binds and executes, so
//!   outside a transaction the bind can reach another server connection
//!   than the parse did.
//!
//! Through a pooler, [`PgDb`] therefore runs every statement unnamed, and a
//! statement sent outside a transaction inside one of its own. Every store
//! operation goes through these two executors ([`PgDb`] for a statement on
//! the pool, [`PgTxConn`] inside [`PgDb::begin`]), so none can forget.
//! Session state (`SET`, session advisory locks, `LISTEN`) does not survive
//! a pooler either: migrations and wake-ups use the direct URL when one is
//! given ([`crate::StoreOptions::direct_url`]).

use std::ops::{Deref, DerefMut};

use futures_util::future::BoxFuture;
use futures_util::stream::{self, BoxStream, StreamExt, TryStreamExt};
use sqlx::postgres::{
    PgArguments, PgConnectOptions, PgPoolOptions, PgQueryResult, PgRow, PgStatement, PgTypeInfo,
};
use sqlx::{Describe, Either, Execute, Executor, PgPool, Postgres, Transaction};

/// A PostgreSQL pool and how its statements must be sent.
#[derive(Debug, Clone)]
pub(crate) struct PgDb {
    pub(crate) pool: PgPool,
    /// The pool's URL points at a transaction-mode pooler.
    pub(crate) pooled: bool,
    /// Behind a pooler: how to reach the server itself, for what needs a
    /// session of its own (migrations, `LISTEN`).
    pub(crate) direct: Option<Box<PgConnectOptions>>,
}

impl PgDb {
    /// A pool of at most `max` connections that are sessions of their own on
    /// the server (for what holds one: a migration's lock, a `LISTEN`),
    /// apart from the store's pool so they never take its connections; or
    /// `None` behind a pooler without a direct URL. Connects lazily.
    pub(crate) fn sessions(&self, max: u32) -> Option<PgPool> {
        let options = if self.pooled {
            self.direct.as_deref()?.clone()
        } else {
            (*self.pool.connect_options()).clone()
        };
        Some(
            PgPoolOptions::new()
                .max_connections(max)
                .min_connections(0)
                .connect_lazy_with(options),
        )
    }

    /// Begins a transaction whose statements are sent as [`PgDb`] says.
    pub(crate) async fn begin(&self) -> Result<PgTx, sqlx::Error> {
        Ok(PgTx(PgTxConn {
            tx: self.pool.begin().await?,
            pooled: self.pooled,
        }))
    }
}

/// A transaction of [`PgDb::begin`]; `&mut *tx` is its executor.
#[derive(Debug)]
pub(crate) struct PgTx(PgTxConn);

/// The executor of a [`PgTx`].
#[derive(Debug)]
pub(crate) struct PgTxConn {
    tx: Transaction<'static, Postgres>,
    pooled: bool,
}

impl PgTx {
    pub(crate) async fn commit(self) -> Result<(), sqlx::Error> {
        self.0.tx.commit().await
    }
}

impl Deref for PgTx {
    type Target = PgTxConn;
    fn deref(&self) -> &PgTxConn {
        &self.0
    }
}

impl DerefMut for PgTx {
    fn deref_mut(&mut self) -> &mut PgTxConn {
        &mut self.0
    }
}

/// `E`, sent as an unnamed statement that no later client can collide
/// with.
struct Unnamed<E>(E);

impl<'q, E: Execute<'q, Postgres>> Execute<'q, Postgres> for Unnamed<E> {
    fn sql(&self) -> &'q str {
        self.0.sql()
    }

    fn statement(&self) -> Option<&PgStatement<'q>> {
        self.0.statement()
    }

    fn take_arguments(&mut self) -> Result<Option<PgArguments>, sqlx::error::BoxDynError> {
        self.0.take_arguments()
    }

    fn persistent(&self) -> bool {
        false
    }
}

type Step = Either<PgQueryResult, PgRow>;

impl<'p> Executor<'p> for &'p PgDb {
    type Database = Postgres;

    fn fetch_many<'e, 'q: 'e, E>(self, query: E) -> BoxStream<'e, Result<Step, sqlx::Error>>
    where
        'p: 'e,
        E: 'q + Execute<'q, Postgres>,
    {
        if !self.pooled {
            return self.pool.fetch_many(query);
        }
        // The whole answer is read inside the statement's own transaction;
        // the store's statements return a handful of rows.
        stream::once(async move {
            let mut tx = self.pool.begin().await?;
            let steps: Vec<Step> = (&mut *tx).fetch_many(Unnamed(query)).try_collect().await?;
            tx.commit().await?;
            Ok::<_, sqlx::Error>(stream::iter(steps.into_iter().map(Ok)))
        })
        .try_flatten()
        .boxed()
    }

    fn fetch_optional<'e, 'q: 'e, E>(
        self,
        query: E,
    ) -> BoxFuture<'e, Result<Option<PgRow>, sqlx::Error>>
    where
        'p: 'e,
        E: 'q + Execute<'q, Postgres>,
    {
        if !self.pooled {
            return self.pool.fetch_optional(query);
        }
        Box::pin(async move {
            let mut tx = self.pool.begin().await?;
            let row = (&mut *tx).fetch_optional(Unnamed(query)).await?;
            tx.commit().await?;
            Ok(row)
        })
    }

    fn prepare_with<'e, 'q: 'e>(
        self,
        sql: &'q str,
        parameters: &'e [PgTypeInfo],
    ) -> BoxFuture<'e, Result<PgStatement<'q>, sqlx::Error>>
    where
        'p: 'e,
    {
        self.pool.prepare_with(sql, parameters)
    }

    fn describe<'e, 'q: 'e>(
        self,
        sql: &'q str,
    ) -> BoxFuture<'e, Result<Describe<Postgres>, sqlx::Error>>
    where
        'p: 'e,
    {
        self.pool.describe(sql)
    }
}

impl<'c> Executor<'c> for &'c mut PgTxConn {
    type Database = Postgres;

    fn fetch_many<'e, 'q: 'e, E>(self, query: E) -> BoxStream<'e, Result<Step, sqlx::Error>>
    where
        'c: 'e,
        E: 'q + Execute<'q, Postgres>,
    {
        if self.pooled {
            (&mut *self.tx).fetch_many(Unnamed(query))
        } else {
            (&mut *self.tx).fetch_many(query)
        }
    }

    fn fetch_optional<'e, 'q: 'e, E>(
        self,
        query: E,
    ) -> BoxFuture<'e, Result<Option<PgRow>, sqlx::Error>>
    where
        'c: 'e,
        E: 'q + Execute<'q, Postgres>,
    {
        if self.pooled {
            (&mut *self.tx).fetch_optional(Unnamed(query))
        } else {
            (&mut *self.tx).fetch_optional(query)
        }
    }

    fn prepare_with<'e, 'q: 'e>(
        self,
        sql: &'q str,
        parameters: &'e [PgTypeInfo],
    ) -> BoxFuture<'e, Result<PgStatement<'q>, sqlx::Error>>
    where
        'c: 'e,
    {
        (&mut *self.tx).prepare_with(sql, parameters)
    }

    fn describe<'e, 'q: 'e>(
        self,
        sql: &'q str,
    ) -> BoxFuture<'e, Result<Describe<Postgres>, sqlx::Error>>
    where
        'c: 'e,
    {
        (&mut *self.tx).describe(sql)
    }
}
