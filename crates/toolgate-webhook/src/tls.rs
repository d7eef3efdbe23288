//! TLS from a mounted certificate and key, re-read when they rotate.
//!
//! [`ReloadingCert`] is a rustls [`ResolvesServerCert`]: every handshake gets
//! the pair currently held. [`ReloadingCert::reload`] re-reads both files and
//! swaps in the new pair only if their bytes changed *and* they parse and
//! match; a half-written or mismatched pair is reported and the old one kept
//! (and retried on the next change). [`ReloadingCert::watch`] calls it every
//! few seconds. Kubernetes Secret volumes swap both files at once through a
//! symlink, so a reader sees either the old pair or the new one.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use rustls::ServerConfig;
use rustls::crypto::CryptoProvider;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use crate::WebhookError;

struct Held {
    key: Arc<CertifiedKey>,
    cert_pem: Vec<u8>,
    key_pem: Vec<u8>,
    /// Bytes of the last pair that failed to load, so it is reported once.
    rejected: Option<(Vec<u8>, Vec<u8>)>,
}

/// A server certificate and key loaded from files and reloaded on change.
pub struct ReloadingCert {
    cert_path: PathBuf,
    key_path: PathBuf,
    provider: Arc<CryptoProvider>,
    held: RwLock<Held>,
}

impl fmt::Debug for ReloadingCert {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReloadingCert")
            .field("cert_path", &self.cert_path)
            .field("key_path", &self.key_path)
            .finish_non_exhaustive()
    }
}

impl ReloadingCert {
    /// Loads the pair; fails if it cannot be read, parsed or does not match.
    pub fn load(
        cert_path: impl Into<PathBuf>,
        key_path: impl Into<PathBuf>,
    ) -> Result<Arc<Self>, WebhookError> {
        let cert_path = cert_path.into();
        let key_path = key_path.into();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let (cert_pem, key_pem) = read_pair(&cert_path, &key_path)?;
        let key = parse_pair(&cert_path, &cert_pem, &key_pem, &provider)?;
        Ok(Arc::new(Self {
            cert_path,
            key_path,
            provider,
            held: RwLock::new(Held {
                key,
                cert_pem,
                key_pem,
                rejected: None,
            }),
        }))
    }

    /// The pair served now.
    pub fn current(&self) -> Arc<CertifiedKey> {
        self.held
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .key
            .clone()
    }

    /// Re-reads the files. `Ok(true)`: a new pair is now served; `Ok(false)`:
    /// nothing changed (or the same bad pair as last time); `Err`: the files
    /// changed but do not load, and the old pair is kept.
    pub fn reload(&self) -> Result<bool, WebhookError> {
        let (cert_pem, key_pem) = read_pair(&self.cert_path, &self.key_path)?;
        {
            let held = self.held.read().unwrap_or_else(|e| e.into_inner());
            let unchanged = held.cert_pem == cert_pem && held.key_pem == key_pem;
            let known_bad = held
                .rejected
                .as_ref()
                .is_some_and(|(c, k)| *c == cert_pem && *k == key_pem);
            if unchanged || known_bad {
                return Ok(false);
            }
        }
        let parsed = parse_pair(&self.cert_path, &cert_pem, &key_pem, &self.provider);
        let mut held = self.held.write().unwrap_or_else(|e| e.into_inner());
        match parsed {
            Ok(key) => {
                *held = Held {
                    key,
                    cert_pem,
                    key_pem,
                    rejected: None,
                };
                Ok(true)
            }
            Err(e) => {
                held.rejected = Some((cert_pem, key_pem));
                Err(e)
            }
        }
    }

    /// Calls [`reload`](Self::reload) every `interval` until the task is
    /// aborted, logging each rotation and each rejected pair.
    pub fn watch(self: Arc<Self>, interval: Duration) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(interval);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            ticks.tick().await;
            loop {
                ticks.tick().await;
                let this = self.clone();
                match tokio::task::spawn_blocking(move || this.reload()).await {
                    Ok(Ok(true)) => {
                        tracing::info!(cert = %self.cert_path.display(), "webhook TLS certificate reloaded")
                    }
                    Ok(Ok(false)) => {}
                    Ok(Err(e)) => {
                        tracing::warn!(error = %e, code = e.code(), "new webhook TLS pair rejected; keeping the previous one")
                    }
                    Err(e) => tracing::warn!(error = %e, "webhook TLS reload task failed"),
                }
            }
        })
    }

    /// A rustls server config (TLS 1.2 and 1.3, HTTP/1.1 ALPN) resolving
    /// through this pair.
    pub fn server_config(self: &Arc<Self>) -> Result<Arc<ServerConfig>, WebhookError> {
        let mut config = ServerConfig::builder_with_provider(self.provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| tls_error(&self.cert_path, &e.to_string()))?
            .with_no_client_auth()
            .with_cert_resolver(self.clone());
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }
}

impl ResolvesServerCert for ReloadingCert {
    fn resolve(&self, _client_hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

fn read_pair(cert_path: &Path, key_path: &Path) -> Result<(Vec<u8>, Vec<u8>), WebhookError> {
    let read = |path: &Path| std::fs::read(path).map_err(|e| tls_error(path, &e.to_string()));
    Ok((read(cert_path)?, read(key_path)?))
}

fn parse_pair(
    cert_path: &Path,
    cert_pem: &[u8],
    key_pem: &[u8],
    provider: &CryptoProvider,
) -> Result<Arc<CertifiedKey>, WebhookError> {
    let chain = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| tls_error(cert_path, &format!("certificate PEM: {e}")))?;
    if chain.is_empty() {
        return Err(tls_error(cert_path, "no CERTIFICATE block found"));
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem)
        .map_err(|e| tls_error(cert_path, &format!("private key PEM: {e}")))?;
    let certified = CertifiedKey::from_der(chain, key, provider).map_err(|e| {
        tls_error(
            cert_path,
            &format!("certificate and key do not form a usable pair: {e}"),
        )
    })?;
    Ok(Arc::new(certified))
}

fn tls_error(path: &Path, message: &str) -> WebhookError {
    WebhookError::Tls {
        path: path.display().to_string(),
        message: message.to_owned(),
    }
}
