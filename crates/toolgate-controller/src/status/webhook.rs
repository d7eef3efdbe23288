//! The webhook checks of `kubectl toolgate status`: registered with an
//! unexpired CA bundle, answering `/healthz`, and presenting a serving
//! certificate that chains to that CA, names the Service and has not
//! expired.

use super::*;

/// `notAfter` of the first certificate of a PEM bundle.
fn pem_not_after(pem: &[u8]) -> Option<Timestamp> {
    let (_, block) = x509_parser::pem::parse_x509_pem(pem).ok()?;
    let cert = block.parse_x509().ok()?;
    Timestamp::from_second(cert.validity().not_after.timestamp()).ok()
}

pub(super) async fn webhook(
    client: &kube::Client,
    args: &StatusArgs,
    now: Timestamp,
) -> Vec<Check> {
    let what = "webhook";
    let api: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let configs = match api.list(&ListParams::default()).await {
        Ok(list) => list.items,
        Err(e) => return vec![check(Level::Fail, what, format!("cannot list: {e}"))],
    };
    let found = configs.iter().find_map(|c| {
        c.webhooks
            .iter()
            .flatten()
            .find(|w| w.name.ends_with("inject.toolgate.dev"))
            .map(|w| (c.name_any(), w.client_config.clone()))
    });
    let Some((config_name, client_config)) = found else {
        return vec![check(
            Level::Fail,
            what,
            "no MutatingWebhookConfiguration with a *.inject.toolgate.dev webhook",
        )];
    };
    let mut checks = Vec::new();
    let ca = client_config.ca_bundle.as_ref().map(|b| b.0.clone());
    match ca.as_deref().map(|pem| (pem, pem_not_after(pem))) {
        None => checks.push(check(
            Level::Fail,
            "webhook CA",
            format!("{config_name} has no caBundle (cert-manager's cainjector not done?)"),
        )),
        Some((_, None)) => checks.push(check(
            Level::Fail,
            "webhook CA",
            "caBundle is not a PEM certificate",
        )),
        Some((_, Some(t))) if t <= now => {
            checks.push(check(Level::Fail, "webhook CA", format!("expired at {t}")))
        }
        Some((_, Some(t))) => checks.push(check(
            Level::Ok,
            "webhook CA",
            format!("{config_name}, valid until {t}"),
        )),
    }
    let Some(service) = client_config.service else {
        // Called by URL (a webhook outside the cluster, or scripts/envtest.py's
        // local one): the API server calls exactly that URL, so probe it.
        checks.push(
            match (client_config.url.as_deref().and_then(url_authority), ca) {
                (Some((base, host)), Some(ca)) => tls_check(&base, &host, &ca, now).await,
                _ => check(Level::Warn, what, "called by URL without a CA: not probed"),
            },
        );
        return checks;
    };
    let port = service.port.unwrap_or(443);
    checks.push(match (&args.webhook_url, ca) {
        (Some(url), Some(ca)) => {
            let host = format!("{}.{}.svc", service.name, service.namespace);
            tls_check(url, &host, &ca, now).await
        }
        (Some(url), None) => check(Level::Fail, what, format!("{url}: no CA to verify it with")),
        (None, _) => {
            // Through the API server's service proxy: reachability only
            // (the proxy does not show us the certificate).
            let path = format!(
                "/api/v1/namespaces/{}/services/https:{}:{port}/proxy/healthz",
                service.namespace, service.name
            );
            let request = http::Request::get(&path).body(Vec::new());
            match request {
                Ok(req) => match client.request_text(req).await {
                    Ok(_) => check(
                        Level::Ok,
                        what,
                        format!("{}/{} answers /healthz", service.namespace, service.name),
                    ),
                    Err(e) => check(
                        Level::Fail,
                        what,
                        format!("{}/{} unreachable: {e}", service.namespace, service.name),
                    ),
                },
                Err(e) => check(Level::Fail, what, e.to_string()),
            }
        }
    });
    checks
}

/// The webhook check of [`probe_tls`]: `ok` with the certificate's expiry,
/// else `FAIL` with why.
async fn tls_check(url: &str, host: &str, ca: &[u8], now: Timestamp) -> Check {
    match probe_tls(url, host, ca).await {
        Ok(not_after) if not_after > now => check(
            Level::Ok,
            "webhook",
            format!("{url} answers /healthz; certificate for {host} valid until {not_after}"),
        ),
        Ok(not_after) => check(
            Level::Fail,
            "webhook",
            format!("{url}: serving certificate expired at {not_after}"),
        ),
        Err(e) => check(Level::Fail, "webhook", format!("{url}: {e}")),
    }
}

/// `https://HOST[:PORT]/path` → (`https://HOST:PORT`, `HOST` without the
/// brackets of an IPv6 address); `None` if not an `https://` URL.
pub(super) fn url_authority(url: &str) -> Option<(String, String)> {
    let authority = url.strip_prefix("https://")?.split(['/', '?']).next()?;
    let (host, port) = match authority.rsplit_once(':') {
        Some((host, port)) if port.parse::<u16>().is_ok() => (host, port),
        _ => (authority, "443"),
    };
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    (!bare.is_empty()).then(|| (format!("https://{host}:{port}"), bare.to_owned()))
}

/// GETs `{url}/healthz` over TLS trusting only `ca_pem` and checking the
/// certificate names `host`; returns the serving certificate's `notAfter`.
async fn probe_tls(url: &str, host: &str, ca_pem: &[u8]) -> Result<Timestamp, String> {
    use rustls::pki_types::pem::PemObject as _;
    use rustls::pki_types::{CertificateDer, ServerName};
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    let address = url
        .strip_prefix("https://")
        .ok_or("--webhook-url must be https://HOST:PORT")?
        .trim_end_matches('/');
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem) {
        let cert = cert.map_err(|e| format!("caBundle: {e}"))?;
        roots.add(cert).map_err(|e| format!("caBundle: {e}"))?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let name = ServerName::try_from(host.to_owned()).map_err(|e| e.to_string())?;
    let connect = async {
        let tcp = tokio::net::TcpStream::connect(address)
            .await
            .map_err(|e| format!("connect: {e}"))?;
        let mut tls = tokio_rustls::TlsConnector::from(Arc::new(config))
            .connect(name, tcp)
            .await
            .map_err(|e| format!("TLS: {e}"))?;
        let leaf = tls
            .get_ref()
            .1
            .peer_certificates()
            .and_then(|c| c.first())
            .map(|c| c.as_ref().to_vec())
            .ok_or("no server certificate")?;
        tls.write_all(
            format!("GET /healthz HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n")
                .as_bytes(),
        )
        .await
        .map_err(|e| e.to_string())?;
        let mut reply = Vec::new();
        let _ = tls.read_to_end(&mut reply).await;
        if !reply.starts_with(b"HTTP/1.1 200") {
            return Err(format!(
                "/healthz answered {}",
                String::from_utf8_lossy(&reply[..reply.len().min(40)])
            ));
        }
        let (_, cert) = x509_parser::parse_x509_certificate(&leaf).map_err(|e| e.to_string())?;
        Timestamp::from_second(cert.validity().not_after.timestamp()).map_err(|e| e.to_string())
    };
    tokio::time::timeout(std::time::Duration::from_secs(10), connect)
        .await
        .map_err(|_| "timed out".to_owned())?
}
