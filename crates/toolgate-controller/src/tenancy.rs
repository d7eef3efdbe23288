//! Each namespace that holds a PolicyProfile gets its own database
//! credential: the controller provisions the namespace's PostgreSQL tenant
//! role (`toolgate tenant provision` does the same by hand) and writes the
//! URL into the Secret the injected sidecars read (`toolgate-database`,
//! key `url`). A sidecar can then reach only its own tenant's rows, append
//! decisions but never rewrite them, and request approvals but never
//! resolve them; see the store's migration 0003.
//!
//! The Secret is created once. An existing Secret of that name is left as
//! it is: one the controller made already holds a working credential
//! (provisioning again would rotate the password under running pods), and
//! one a human made is theirs — a Warning Event says that its credential is
//! not tenant-scoped by toolgate. On SQLite (single-user) nothing happens.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ObjectReference, Secret};
use kube::api::{Api, PostParams};
use kube::runtime::events::EventType;

use crate::context::Context;
use crate::error::ControllerError;

/// Default name of the per-namespace Secret (the chart's `sidecar.databaseSecret`).
pub const DATABASE_SECRET: &str = toolgate_contract::names::DATABASE_SECRET;
/// Key of the URL inside the Secret.
pub const DATABASE_URL_KEY: &str = toolgate_contract::names::DATABASE_SECRET_KEY;
/// Annotation naming the PostgreSQL role a managed Secret logs in as.
pub use toolgate_k8s::names::ANN_TENANT_ROLE;

/// The Secret holding `url` for namespace `namespace`.
pub fn database_secret(name: &str, namespace: &str, role: &str, url: &str) -> Secret {
    let annotations = BTreeMap::from([(ANN_TENANT_ROLE.to_owned(), role.to_owned())]);
    crate::keys::managed_secret(
        name,
        namespace,
        Some(annotations),
        DATABASE_URL_KEY,
        url.as_bytes(),
    )
}

/// Whether the controller made `secret` (and so it holds a tenant credential).
pub fn is_managed(secret: &Secret) -> bool {
    secret
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(toolgate_k8s::names::LABEL_MANAGED_BY))
        .is_some_and(|m| m == crate::MANAGER)
        && secret
            .metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(ANN_TENANT_ROLE))
}

/// Makes sure `namespace` has its tenant database Secret (see the module
/// docs). Done once per namespace and process; `regarding` is the profile
/// that Events are about.
pub async fn ensure_database_secret(
    ctx: &Context,
    namespace: &str,
    regarding: &ObjectReference,
) -> Result<(), ControllerError> {
    let Some(name) = ctx.settings.tenant_secret.as_deref() else {
        return Ok(());
    };
    if ctx.store.as_postgres().is_none() || ctx.is_provisioned(namespace) {
        return Ok(());
    }
    let api: Api<Secret> = Api::namespaced(ctx.client.clone(), namespace);
    let existing = match api.get_opt(name).await? {
        Some(existing) => existing,
        None => {
            let creds = match &ctx.settings.tenant_base_url {
                Some(base) => ctx.store.provision_tenant_at(namespace, base).await?,
                None => ctx.store.provision_tenant(namespace).await?,
            };
            let secret = database_secret(name, namespace, &creds.role, &creds.database_url);
            match api.create(&PostParams::default(), &secret).await {
                Ok(_) => {
                    tracing::info!(%namespace, role = %creds.role, "provisioned tenant database role");
                    ctx.event(
                        regarding,
                        EventType::Normal,
                        "TenantProvisioned",
                        "Provision",
                        format!(
                            "database role {} for tenant {namespace} written to Secret {name}",
                            creds.role
                        ),
                    )
                    .await;
                    ctx.mark_provisioned(namespace);
                    return Ok(());
                }
                // Someone created it meanwhile: judge theirs below.
                Err(kube::Error::Api(e)) if e.code == 409 => api.get(name).await?,
                Err(e) => return Err(e.into()),
            }
        }
    };
    if !is_managed(&existing) {
        tracing::warn!(%namespace, secret = %name, "database Secret not managed by toolgate; left as is");
        ctx.event(
            regarding,
            EventType::Warning,
            "DatabaseSecretUnmanaged",
            "Provision",
            format!(
                "Secret {namespace}/{name} was not written by toolgate; sidecars use its \
                     credential as is. Delete it to have a tenant-scoped role provisioned."
            ),
        )
        .await;
    }
    ctx.mark_provisioned(namespace);
    Ok(())
}
