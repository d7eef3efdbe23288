//! The bundle signing key (Secret `toolgate-signing-key`) and the published
//! trust set (ConfigMap `toolgate-trust`).
//!
//! The key is generated once, at the first start, and stored as PKCS#8 PEM
//! under `signing.key`. Creating the Secret is atomic, so two replicas that
//! race on a fresh cluster end up with the same key (the loser re-reads).
//! The trust ConfigMap keeps every key it already lists and appends the
//! current one, so rotating the Secret never strands sidecars that still
//! hold bundles signed by the previous key.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, ObjectMeta, PostParams};
use toolgate_bundle::{SigningKey, TrustSet};

use toolgate_k8s::names;

use crate::error::ControllerError;

/// Secret holding the signing key.
pub const SIGNING_SECRET: &str = "toolgate-signing-key";
/// Key of the PEM inside [`SIGNING_SECRET`].
pub const SIGNING_KEY_FIELD: &str = "signing.key";
/// ConfigMap holding the trusted public keys.
pub use toolgate_k8s::names::TRUST_CONFIGMAP;
/// Key of the PEM inside [`TRUST_CONFIGMAP`].
pub use toolgate_k8s::names::TRUST_FIELD;

/// Labels of every object the controller creates outside a profile's ownership.
pub(crate) fn labels() -> BTreeMap<String, String> {
    BTreeMap::from([
        (
            names::LABEL_MANAGED_BY.to_owned(),
            crate::MANAGER.to_owned(),
        ),
        (names::LABEL_PART_OF.to_owned(), names::PART_OF.to_owned()),
    ])
}

/// Decodes the signing key from a Secret.
pub fn key_from_secret(secret: &Secret) -> Result<SigningKey, ControllerError> {
    let bytes = secret
        .data
        .as_ref()
        .and_then(|d| d.get(SIGNING_KEY_FIELD))
        .ok_or_else(|| {
            ControllerError::Key(format!(
                "secret {SIGNING_SECRET} has no `{SIGNING_KEY_FIELD}` entry"
            ))
        })?;
    let text = std::str::from_utf8(&bytes.0).map_err(|_| {
        ControllerError::Key(format!(
            "{SIGNING_SECRET}/{SIGNING_KEY_FIELD} is not UTF-8 PEM"
        ))
    })?;
    SigningKey::from_pkcs8_pem(text).map_err(|e| ControllerError::Key(e.to_string()))
}

/// A Secret holding `key` (what the controller creates on first start).
pub fn secret_for(key: &SigningKey, namespace: &str) -> Result<Secret, ControllerError> {
    let pem = key
        .to_pkcs8_pem()
        .map_err(|e| ControllerError::Key(e.to_string()))?;
    Ok(managed_secret(
        SIGNING_SECRET,
        namespace,
        None,
        SIGNING_KEY_FIELD,
        pem.as_bytes(),
    ))
}

/// An Opaque Secret the controller manages (its [`labels`]), holding
/// `value` under `field`.
pub(crate) fn managed_secret(
    name: &str,
    namespace: &str,
    annotations: Option<BTreeMap<String, String>>,
    field: &str,
    value: &[u8],
) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(namespace.to_owned()),
            labels: Some(labels()),
            annotations,
            ..Default::default()
        },
        type_: Some("Opaque".into()),
        data: Some(BTreeMap::from([(
            field.to_owned(),
            ByteString(value.to_vec()),
        )])),
        ..Default::default()
    }
}

/// Loads the signing key from the Secret in `namespace`, generating and
/// storing a fresh one when the Secret does not exist.
pub async fn ensure_signing_key(
    client: &kube::Client,
    namespace: &str,
) -> Result<SigningKey, ControllerError> {
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    if let Some(secret) = api.get_opt(SIGNING_SECRET).await? {
        return key_from_secret(&secret);
    }
    let key = SigningKey::generate();
    match api
        .create(&PostParams::default(), &secret_for(&key, namespace)?)
        .await
    {
        Ok(_) => {
            tracing::info!(keyid = %key.key_id(), namespace, "generated bundle signing key");
            Ok(key)
        }
        // Another replica won the race: use its key.
        Err(kube::Error::Api(e)) if e.code == 409 => {
            key_from_secret(&api.get(SIGNING_SECRET).await?)
        }
        Err(e) => Err(e.into()),
    }
}

/// The trust PEM after adding `key` to `existing`: keeps every valid block
/// already there (previous keys stay trusted), appends the new key once.
/// Returns `None` when `existing` already trusts the key.
pub fn merged_trust(
    existing: Option<&str>,
    key: &SigningKey,
) -> Result<Option<String>, ControllerError> {
    let public = key.public_key();
    let pem = public
        .to_spki_pem()
        .map_err(|e| ControllerError::Key(e.to_string()))?;
    let block = format!("# {} (toolgate-controller)\n{pem}", public.key_id());
    match existing.map(|text| (text, TrustSet::from_pem(text))) {
        Some((_, Ok(set))) if set.get(&public.key_id()).is_some() => Ok(None),
        Some((text, Ok(_))) => {
            let mut merged = text.to_owned();
            if !merged.ends_with('\n') {
                merged.push('\n');
            }
            merged.push_str(&block);
            Ok(Some(merged))
        }
        Some((_, Err(e))) => {
            tracing::warn!(error = %e, "existing trust set is unreadable; replacing it with the current key");
            Ok(Some(block))
        }
        None => Ok(Some(block)),
    }
}

/// Makes ConfigMap `toolgate-trust` in `namespace` list the public half of
/// `key`, keeping the keys it already lists. Uses a resourceVersion-guarded
/// replace, so a concurrent writer makes this fail (and the caller retry)
/// rather than silently dropping a key.
pub async fn ensure_trust(
    client: &kube::Client,
    namespace: &str,
    key: &SigningKey,
) -> Result<(), ControllerError> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let current = api.get_opt(TRUST_CONFIGMAP).await?;
    let existing = current
        .as_ref()
        .and_then(|cm| cm.data.as_ref())
        .and_then(|d| d.get(TRUST_FIELD))
        .map(String::as_str);
    let Some(pem) = merged_trust(existing, key)? else {
        return Ok(());
    };
    match current {
        Some(mut cm) => {
            cm.data
                .get_or_insert_with(BTreeMap::new)
                .insert(TRUST_FIELD.into(), pem);
            api.replace(TRUST_CONFIGMAP, &PostParams::default(), &cm)
                .await?;
        }
        None => {
            let cm = ConfigMap {
                metadata: ObjectMeta {
                    name: Some(TRUST_CONFIGMAP.into()),
                    namespace: Some(namespace.into()),
                    labels: Some(labels()),
                    ..Default::default()
                },
                data: Some(BTreeMap::from([(TRUST_FIELD.to_owned(), pem)])),
                ..Default::default()
            };
            api.create(&PostParams::default(), &cm).await?;
        }
    }
    tracing::info!(namespace, keyid = %key.key_id(), "published trust set");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_round_trips_and_trust_keeps_old_keys() {
        let old = SigningKey::from_seed(&[1; 32]);
        let new = SigningKey::from_seed(&[2; 32]);
        let secret = secret_for(&new, "ns").unwrap();
        assert_eq!(key_from_secret(&secret).unwrap().key_id(), new.key_id());

        let first = merged_trust(None, &old).unwrap().unwrap();
        assert!(
            merged_trust(Some(&first), &old).unwrap().is_none(),
            "already trusted"
        );
        let both = merged_trust(Some(&first), &new).unwrap().unwrap();
        let set = TrustSet::from_pem(&both).unwrap();
        assert!(set.get(&old.key_id()).is_some() && set.get(&new.key_id()).is_some());
        let replaced = merged_trust(Some("garbage"), &new).unwrap().unwrap();
        assert_eq!(TrustSet::from_pem(&replaced).unwrap().len(), 1);
    }
}
