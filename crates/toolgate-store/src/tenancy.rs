//! Per-tenant PostgreSQL login roles.
//!
//! Migration 0003 (PostgreSQL only) gives every table row-level security
//! keyed by tenant (the agent pod's Kubernetes namespace) and creates the
//! NOLOGIN group role `toolgate_tenant` holding what a sidecar needs:
//! decisions insert-only, intents forward-only, approvals request and
//! consume (never resolve), run events, profile loads, heartbeats and bundle
//! high-water marks of its own tenant. [`Store::provision_tenant`] creates
//! (or re-keys) one LOGIN role per tenant in that group and returns a
//! database URL for it, so a compromised sidecar can neither read nor alter
//! another tenant's records, nor rewrite its own history.
//!
//! SQLite is single-user: there, provisioning fails with
//! `tenancy_unsupported`.

use std::fmt;
use std::sync::Arc;

use crate::pg::PgDb;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::{Backend, Result, Store, StoreError};

/// What a tenant's sidecar needs to connect as its own role.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TenantCredentials {
    /// The tenant (Kubernetes namespace).
    pub tenant: String,
    /// Its PostgreSQL login role.
    pub role: String,
    /// The admin URL with the tenant role and its fresh password as user
    /// and password (host, port, database and parameters unchanged).
    pub database_url: String,
}

impl fmt::Debug for TenantCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TenantCredentials")
            .field("tenant", &self.tenant)
            .field("role", &self.role)
            .field("database_url", &"<redacted>")
            .finish()
    }
}

/// A connection URL that never appears in `Debug` output.
#[derive(Clone)]
pub(crate) struct SecretUrl(Arc<str>);

impl SecretUrl {
    pub(crate) fn new(url: &str) -> Self {
        Self(Arc::from(url))
    }
}

impl fmt::Debug for SecretUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted url>")
    }
}

/// Prefix of every tenant login role.
pub const ROLE_PREFIX: &str = "tg_t_";

/// PBKDF2 iterations of the SCRAM verifier (PostgreSQL's default).
const SCRAM_ITERATIONS: u32 = 4096;

/// Checks that `tenant` is a Kubernetes namespace name (an RFC 1123 label:
/// 1-63 lowercase letters, digits and `-`, starting and ending with a letter
/// or digit).
pub fn validate_tenant(tenant: &str) -> Result<()> {
    let ok = !tenant.is_empty()
        && tenant.len() <= 63
        && tenant
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !tenant.starts_with('-')
        && !tenant.ends_with('-');
    if ok {
        Ok(())
    } else {
        Err(StoreError::InvalidInput(format!(
            "tenant {tenant:?} is not a Kubernetes namespace name (RFC 1123 label: \
             1-63 characters of a-z, 0-9 and '-', starting and ending alphanumeric)"
        )))
    }
}

/// The login role of `tenant` in the toolgate schema `schema` of `database`:
/// `tg_t_` + the tenant with `-` as `_` (at most 47 characters) + `_` + 10
/// hex digits of SHA-256 over database, schema and tenant. Deterministic,
/// a valid unquoted identifier, at most 63 bytes, and distinct per
/// deployment: roles are cluster-global, so two databases on one server
/// must not share (and rotate) one role.
pub fn tenant_role_name(tenant: &str, database: &str, schema: &str) -> String {
    let sanitized: String = tenant
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .take(47)
        .collect();
    let digest = Sha256::digest(format!("{database}\0{schema}\0{tenant}").as_bytes());
    format!("{ROLE_PREFIX}{sanitized}_{}", &hex::encode(digest)[..10])
}

impl Store {
    /// Creates `tenant`'s PostgreSQL LOGIN role, or gives it a fresh
    /// password if it exists (the old password stops working), makes it a
    /// member of `toolgate_tenant`, grants it CONNECT on this database,
    /// records it in `tenant_roles`, and returns a URL for it derived from
    /// the URL this store connected with.
    ///
    /// The store must be connected as an admin role with CREATEROLE (the
    /// role that ran the migrations, or a superuser). Errors: `invalid_input`
    /// for a tenant that is not a namespace name (or a store built from a
    /// pool, which has no URL: use [`Store::provision_tenant_at`]);
    /// `tenancy_unsupported` on SQLite; `permission_denied` when the role
    /// may not create roles.
    pub async fn provision_tenant(&self, tenant: &str) -> Result<TenantCredentials> {
        let url = self.url.clone().ok_or_else(|| {
            StoreError::InvalidInput(
                "this store was built from a pool and has no URL; use provision_tenant_at".into(),
            )
        });
        match &self.backend {
            Backend::Sqlite(_) => Err(StoreError::TenancyUnsupported("SQLite")),
            Backend::Postgres(_) => self.provision_tenant_at(tenant, &url?.0).await,
        }
    }

    /// [`Store::provision_tenant`] with the URL to derive the tenant's URL
    /// from given explicitly (its user and password are replaced).
    pub async fn provision_tenant_at(
        &self,
        tenant: &str,
        base_url: &str,
    ) -> Result<TenantCredentials> {
        let pool = match &self.backend {
            Backend::Sqlite(_) => return Err(StoreError::TenancyUnsupported("SQLite")),
            Backend::Postgres(pool) => pool,
        };
        validate_tenant(tenant)?;
        let mut url = url::Url::parse(base_url)
            .map_err(|e| StoreError::InvalidInput(format!("bad database url: {e}")))?;
        if !matches!(url.scheme(), "postgres" | "postgresql") || !url.has_host() {
            return Err(StoreError::InvalidInput(
                "database url must be postgres://host/... or postgresql://host/...".into(),
            ));
        }
        let (database, schema): (String, Option<String>) =
            sqlx::query_as("SELECT current_database()::text, current_schema()::text")
                .fetch_one(pool)
                .await?;
        let schema = schema.ok_or_else(|| {
            StoreError::SchemaMismatch("no current schema (empty search_path)".into())
        })?;
        let role = tenant_role_name(tenant, &database, &schema);
        let password = random_password();
        let verifier = scram_verifier(&password, &random_bytes::<16>());
        // GRANT CONNECT ON DATABASE rewrites the database's catalog row, and
        // two provisions at once fail with "tuple concurrently updated": one
        // at a time, behind a lock on tenant_roles. Locking it in this mode
        // needs UPDATE, DELETE or TRUNCATE on it, which no tenant role has,
        // and it does not conflict with the ACCESS SHARE lock a tenant's
        // identity lookups take, so no tenant can hold provisioning up (an
        // advisory key, used before, any role can take and keep). The wait is
        // bounded all the same.
        // The catalog row can still be rewritten under the GRANT by what
        // the lock does not cover (VACUUM's in-place update of
        // pg_database): PostgreSQL then answers "tuple concurrently
        // updated", and the whole transaction is tried again.
        let mut attempt = 0;
        loop {
            attempt += 1;
            match self.provision_once(pool, tenant, &role, &verifier).await {
                Err(StoreError::Database(sqlx::Error::Database(e)))
                    if attempt < 4 && e.message().contains("tuple concurrently updated") =>
                {
                    tokio::time::sleep(std::time::Duration::from_millis(50 * attempt)).await;
                }
                other => break other?,
            }
        }
        url.set_username(&role)
            .and_then(|()| url.set_password(Some(&password)))
            .map_err(|()| StoreError::InvalidInput("database url cannot carry a user".into()))?;
        Ok(TenantCredentials {
            tenant: tenant.to_owned(),
            role,
            database_url: url.to_string(),
        })
    }

    /// One provisioning transaction (see [`Store::provision_tenant_at`]).
    async fn provision_once(
        &self,
        pool: &PgDb,
        tenant: &str,
        role: &str,
        verifier: &str,
    ) -> Result<()> {
        let mut tx = pool.begin().await?;
        let ms = crate::schema::lock_timeout_ms(self.lock_timeout);
        sqlx::query(&format!("SET LOCAL lock_timeout = {ms}"))
            .execute(&mut *tx)
            .await?;
        sqlx::query("LOCK TABLE tenant_roles IN SHARE ROW EXCLUSIVE MODE")
            .execute(&mut *tx)
            .await
            .map_err(|e| {
                crate::schema::lock_wait(
                    e,
                    "provisioning lock (table tenant_roles); another provisioning or a long \
                     transaction of the admin role holds it",
                )
            })?;
        sqlx::query("SELECT toolgate_provision_tenant($1, $2, $3)")
            .bind(tenant)
            .bind(role)
            .bind(verifier)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    /// The tenant this store's PostgreSQL session is restricted to, or
    /// `None` for an admin session (and always on SQLite).
    pub async fn session_tenant(&self) -> Result<Option<String>> {
        match &self.backend {
            Backend::Sqlite(_) => Ok(None),
            Backend::Postgres(pool) => pg_session_tenant(pool).await,
        }
    }
}

/// The tenant a PostgreSQL session's login role is mapped to, if any. A
/// mapped session appends decisions through `toolgate_append_decision`.
pub(crate) async fn pg_session_tenant(pool: &PgDb) -> Result<Option<String>> {
    if !has_tenancy(pool).await? {
        return Ok(None);
    }
    Ok(sqlx::query_scalar("SELECT toolgate_current_tenant()")
        .fetch_one(pool)
        .await?)
}

async fn has_tenancy(pool: &PgDb) -> Result<bool> {
    Ok(
        sqlx::query_scalar("SELECT to_regprocedure('toolgate_tenant_session()') IS NOT NULL")
            .fetch_one(pool)
            .await?,
    )
}

/// Whether this session is a tenant role (which may not migrate).
pub(crate) async fn is_tenant_session(pool: &PgDb) -> Result<bool> {
    if !has_tenancy(pool).await? {
        return Ok(false);
    }
    Ok(sqlx::query_scalar("SELECT toolgate_tenant_session()")
        .fetch_one(pool)
        .await?)
}

// ---- passwords --------------------------------------------------------------

/// `N` bytes from the operating system's CSPRNG (by way of UUIDv4, which
/// draws 122 random bits from it per id), whitened through SHA-256.
fn random_bytes<const N: usize>() -> [u8; N] {
    let mut out = [0u8; N];
    let mut filled = 0;
    while filled < N {
        let mut h = Sha256::new();
        for _ in 0..3 {
            h.update(uuid::Uuid::new_v4().as_bytes());
        }
        let block = h.finalize();
        let n = (N - filled).min(block.len());
        out[filled..filled + n].copy_from_slice(&block[..n]);
        filled += n;
    }
    out
}

/// A fresh password: 32 random bytes as 64 lowercase hex digits.
fn random_password() -> String {
    hex::encode(random_bytes::<32>())
}

fn hmac_sha256(key: &[u8], msg: &[u8]) -> [u8; 32] {
    let mut block = [0u8; 64];
    if key.len() > 64 {
        block[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        block[..key.len()].copy_from_slice(key);
    }
    let mut inner = Sha256::new();
    inner.update(block.map(|b| b ^ 0x36));
    inner.update(msg);
    let mut outer = Sha256::new();
    outer.update(block.map(|b| b ^ 0x5c));
    outer.update(inner.finalize());
    outer.finalize().into()
}

/// PBKDF2-HMAC-SHA-256 with a 32-byte output (one block).
fn pbkdf2_sha256(password: &[u8], salt: &[u8], iterations: u32) -> [u8; 32] {
    let mut msg = salt.to_vec();
    msg.extend_from_slice(&1u32.to_be_bytes());
    let mut u = hmac_sha256(password, &msg);
    let mut out = u;
    for _ in 1..iterations {
        u = hmac_sha256(password, &u);
        for (o, x) in out.iter_mut().zip(u) {
            *o ^= x;
        }
    }
    out
}

fn scram_keys(password: &str, salt: &[u8], iterations: u32) -> ([u8; 32], [u8; 32]) {
    let salted = pbkdf2_sha256(password.as_bytes(), salt, iterations);
    let client_key = hmac_sha256(&salted, b"Client Key");
    let stored_key: [u8; 32] = Sha256::digest(client_key).into();
    let server_key = hmac_sha256(&salted, b"Server Key");
    (stored_key, server_key)
}

/// The SCRAM-SHA-256 verifier PostgreSQL stores for `password` (RFC 5803
/// form), so that CREATE/ALTER ROLE never carries the cleartext password:
/// it cannot end up in server logs or `pg_stat_activity`. `password` must
/// be ASCII (SASLprep is then the identity).
fn scram_verifier(password: &str, salt: &[u8]) -> String {
    let (stored, server) = scram_keys(password, salt, SCRAM_ITERATIONS);
    format!(
        "SCRAM-SHA-256${SCRAM_ITERATIONS}:{}${}:{}",
        base64_encode(salt),
        base64_encode(&stored),
        base64_encode(&server)
    )
}

/// Whether `password` matches a stored SCRAM-SHA-256 verifier (as found in
/// `pg_authid.rolpassword`). For tests and diagnostics.
#[doc(hidden)]
pub fn scram_verifier_matches(verifier: &str, password: &str) -> bool {
    let parse = || -> Option<bool> {
        let rest = verifier.strip_prefix("SCRAM-SHA-256$")?;
        let (params, keys) = rest.split_once('$')?;
        let (iterations, salt) = params.split_once(':')?;
        let (stored, server) = keys.split_once(':')?;
        let (s, v) = scram_keys(password, &base64_decode(salt)?, iterations.parse().ok()?);
        Some(base64_decode(stored)? == s && base64_decode(server)? == v)
    };
    parse().unwrap_or(false)
}

const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

fn base64_encode(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(B64[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

fn base64_decode(text: &str) -> Option<Vec<u8>> {
    let text = text.trim_end_matches('=');
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0);
    for c in text.bytes() {
        let v = B64.iter().position(|&b| b == c)? as u32;
        acc = acc << 6 | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tenant_names_are_namespaces() {
        for ok in ["a", "team-a", "0", &"x".repeat(63)] {
            validate_tenant(ok).unwrap();
        }
        for bad in [
            "",
            "-a",
            "a-",
            "Team",
            "a_b",
            "a.b",
            "a b",
            &"x".repeat(64),
            "é",
        ] {
            assert_eq!(validate_tenant(bad).unwrap_err().code(), "invalid_input");
        }
    }

    #[test]
    fn role_names_are_safe_and_deterministic() {
        let r = tenant_role_name("team-a", "db", "public");
        assert_eq!(r, tenant_role_name("team-a", "db", "public"));
        assert!(r.starts_with("tg_t_team_a_"));
        assert_ne!(r, tenant_role_name("team-a", "db2", "public"));
        assert_ne!(r, tenant_role_name("team_a", "db", "public"));
        let long = tenant_role_name(&"x".repeat(63), "db", "public");
        assert!(long.len() <= 63, "{long}");
        assert!(
            long.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        );
    }

    #[test]
    fn base64_round_trips() {
        for n in 0..20 {
            let bytes: Vec<u8> = (0..n).map(|i| (i * 37 + 11) as u8).collect();
            assert_eq!(base64_decode(&base64_encode(&bytes)).unwrap(), bytes);
        }
        assert_eq!(base64_encode(b"foobar"), "Zm9vYmFy");
        assert_eq!(base64_encode(b"fo"), "Zm8=");
    }

    /// RFC 4231 test case 2 and RFC 7914's PBKDF2-HMAC-SHA-256 vector; the
    /// tenancy integration test checks a verifier PostgreSQL computed.
    #[test]
    fn hmac_pbkdf2_and_scram() {
        assert_eq!(
            hex::encode(hmac_sha256(b"Jefe", b"what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        assert_eq!(
            hex::encode(pbkdf2_sha256(b"passwd", b"salt", 1)),
            "55ac046e56e3089fec1691c22544b605f94185216dde0465e68b9d57c20dacbc"
        );
        let salt = base64_decode("W22ZaJ0SNY7soEsUEjb6gQ==").unwrap();
        let (stored, server) = scram_keys("pencil", &salt, 4096);
        let verifier = scram_verifier("pencil", &salt);
        assert!(verifier.ends_with(&format!(
            "{}:{}",
            base64_encode(&stored),
            base64_encode(&server)
        )));
        assert!(scram_verifier_matches(&verifier, "pencil"));
        assert!(!scram_verifier_matches(&verifier, "pencil2"));
        assert_eq!(random_password().len(), 64);
        assert_ne!(random_password(), random_password());
    }
}
