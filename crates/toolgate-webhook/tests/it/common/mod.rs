//! Test support shared by the HTTPS tests and the benchmark: a throwaway CA,
//! a webhook server on loopback, and a keep-alive HTTPS client that trusts
//! the CA and records the certificate the server presented.

pub mod admission;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt as _, Full};
use hyper::body::Bytes;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, SerialNumber};
use rustls::pki_types::{CertificateDer, ServerName};
use toolgate_webhook::{InjectConfig, SidecarMode, WebhookConfig};

/// A test CA that issues server certificates for `localhost` / 127.0.0.1.
pub struct Pki {
    pub ca_der: CertificateDer<'static>,
    issuer: Issuer<'static, KeyPair>,
}

/// One issued certificate.
pub struct Issued {
    pub cert_pem: String,
    pub key_pem: String,
    pub der: Vec<u8>,
}

impl Pki {
    pub fn new() -> Self {
        let key = KeyPair::generate().expect("CA key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, "toolgate test CA");
        let cert = params.self_signed(&key).expect("CA cert");
        Self {
            ca_der: cert.der().clone(),
            issuer: Issuer::new(params, key),
        }
    }

    /// A server certificate with the given common name and serial.
    pub fn issue(&self, common_name: &str, serial: u64) -> Issued {
        let key = KeyPair::generate().expect("server key");
        let mut params =
            CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
                .expect("server params");
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        params.serial_number = Some(SerialNumber::from(serial));
        let cert = params.signed_by(&key, &self.issuer).expect("server cert");
        Issued {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            der: cert.der().to_vec(),
        }
    }
}

/// Writes a pair the way a rotation would: each file replaced atomically.
pub fn write_pair(dir: &Path, cert_pem: &str, key_pem: &str) -> (PathBuf, PathBuf) {
    let cert = dir.join("tls.crt");
    let key = dir.join("tls.key");
    for (path, text) in [(&cert, cert_pem), (&key, key_pem)] {
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, text).expect("write pem");
        std::fs::rename(&tmp, path).expect("rename pem");
    }
    (cert, key)
}

/// A running webhook server on an ephemeral loopback port.
pub struct TestServer {
    pub addr: SocketAddr,
    pub metrics_addr: SocketAddr,
    pub pki: Pki,
    pub dir: tempfile::TempDir,
    pub first: Issued,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<Result<(), toolgate_webhook::WebhookError>>>,
}

pub fn inject_config(mode: SidecarMode, default_profile: Option<&str>) -> InjectConfig {
    InjectConfig::new(
        "ghcr.io/example/toolgate:0.1.0",
        default_profile.map(str::to_owned),
        mode,
        "toolgate-database",
    )
}

/// The user the test server lets create request Approvals.
pub const CONTROLLER_USER: &str = "system:serviceaccount:toolgate-system:toolgate";

impl TestServer {
    pub async fn start(inject: InjectConfig, reload: Duration) -> Self {
        let pki = Pki::new();
        let dir = tempfile::tempdir().expect("tempdir");
        let first = pki.issue("toolgate-webhook.toolgate.svc", 1);
        let (tls_cert, tls_key) = write_pair(dir.path(), &first.cert_pem, &first.key_pem);
        let config = WebhookConfig {
            listen: "127.0.0.1:0".parse().expect("addr"),
            metrics_listen: Some("127.0.0.1:0".parse().expect("addr")),
            tls_cert,
            tls_key,
            tls_reload_interval: reload,
            max_body_bytes: 2 * 1024 * 1024,
            inject,
            // The profile of tests/fixtures/approval-resolve.json.
            profiles: toolgate_webhook::approvers::Profiles::fixed([(
                ("agents".to_owned(), "safe-coding".to_owned()),
                vec![
                    "bob@example.com".to_owned(),
                    "group:platform-oncall".to_owned(),
                ],
            )]),
            controller_user: Some(CONTROLLER_USER.to_owned()),
        };
        let server = toolgate_webhook::bind(config).await.expect("bind");
        let addr = server.local_addr().expect("addr");
        let metrics_addr = server.metrics_addr().expect("metrics address");
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(server.run(async move {
            let _ = rx.await;
        }));
        Self {
            addr,
            metrics_addr,
            pki,
            dir,
            first,
            stop: Some(tx),
            task: Some(task),
        }
    }

    /// `GET /metrics` over plain HTTP.
    pub async fn metrics(&self) -> String {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let mut tcp = tokio::net::TcpStream::connect(self.metrics_addr)
            .await
            .expect("connect to metrics");
        tcp.write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            .await
            .expect("write");
        let mut out = String::new();
        tcp.read_to_string(&mut out).await.expect("read");
        assert!(out.starts_with("HTTP/1.1 200"), "{out}");
        out.split_once("\r\n\r\n")
            .expect("headers end")
            .1
            .to_owned()
    }

    pub async fn client(&self) -> Client {
        Client::connect(self.addr, &self.pki.ca_der).await
    }

    /// Stops the server and checks it exited cleanly.
    pub async fn stop(mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(task) = self.task.take() {
            task.await.expect("server task").expect("server result");
        }
    }
}

/// One keep-alive HTTPS connection.
pub struct Client {
    sender: SendRequest<Full<Bytes>>,
    /// DER of the end-entity certificate the server presented.
    pub peer_cert: Vec<u8>,
}

impl Client {
    pub async fn connect(addr: SocketAddr, ca: &CertificateDer<'static>) -> Self {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(ca.clone()).expect("trust CA");
        let config = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
        let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
        let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
        tcp.set_nodelay(true).expect("nodelay");
        let name = ServerName::try_from("localhost").expect("name");
        let tls = connector.connect(name, tcp).await.expect("TLS handshake");
        let peer_cert = tls
            .get_ref()
            .1
            .peer_certificates()
            .expect("server certificate")[0]
            .to_vec();
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
            .await
            .expect("HTTP handshake");
        tokio::spawn(connection);
        Self { sender, peer_cert }
    }

    pub async fn request(&mut self, method: &str, path: &str, body: Vec<u8>) -> (u16, Vec<u8>) {
        self.sender.ready().await.expect("connection ready");
        let request = hyper::Request::builder()
            .method(method)
            .uri(path)
            .header(hyper::header::HOST, "localhost")
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(body)))
            .expect("request");
        let response =
            tokio::time::timeout(Duration::from_secs(10), self.sender.send_request(request))
                .await
                .expect("response in time")
                .expect("response");
        let status = response.status().as_u16();
        let body = response
            .into_body()
            .collect()
            .await
            .expect("body")
            .to_bytes()
            .to_vec();
        (status, body)
    }

    pub async fn post(&mut self, path: &str, body: Vec<u8>) -> (u16, serde_json::Value) {
        let (status, body) = self.request("POST", path, body).await;
        let json = serde_json::from_slice(&body).unwrap_or_else(|e| {
            panic!(
                "response is not JSON ({e}): {}",
                String::from_utf8_lossy(&body)
            )
        });
        (status, json)
    }
}

pub fn fixture(name: &str) -> Vec<u8> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

pub fn fixture_json(name: &str) -> serde_json::Value {
    serde_json::from_slice(&fixture(name)).expect("fixture is JSON")
}

/// A webhook serving native sidecars with profile `baseline` by default.
pub async fn native_server() -> TestServer {
    TestServer::start(
        inject_config(SidecarMode::Native, Some("baseline")),
        Duration::from_secs(5),
    )
    .await
}

/// Posts a review and returns its `response`, checking the envelope.
pub async fn review(
    client: &mut Client,
    path: &str,
    body: &serde_json::Value,
) -> serde_json::Value {
    let uid = body["request"]["uid"].clone();
    let (status, reply) = client.post(path, serde_json::to_vec(body).unwrap()).await;
    assert_eq!(status, 200, "{reply}");
    assert_eq!(reply["apiVersion"], "admission.k8s.io/v1");
    assert_eq!(reply["kind"], "AdmissionReview");
    assert_eq!(reply["response"]["uid"], uid, "uid must be echoed");
    reply["response"].clone()
}
