//! HTTP routes and the TLS server around them.

use axum::serve::ListenerExt;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tracing::Instrument;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;

use crate::inject::{self, InjectConfig, Plan};
use crate::metrics::{self, Metrics};
use crate::review::{AdmissionRequest, AdmissionResponse, AdmissionReview};
use crate::tls::ReloadingCert;
use crate::{WebhookConfig, WebhookError, validate};

const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug)]
struct AppState {
    inject: InjectConfig,
    profiles: crate::approvers::Profiles,
    controller_user: Option<String>,
    max_body_bytes: usize,
    metrics: Metrics,
}

#[derive(Debug, Clone, Copy)]
enum Hook {
    MutatePods,
    ValidatePods,
    ValidatePolicyProfiles,
    ValidateApprovals,
}

impl Hook {
    fn name(self) -> &'static str {
        match self {
            Self::MutatePods => "mutate-pods",
            Self::ValidatePods => "validate-pods",
            Self::ValidatePolicyProfiles => "validate-policyprofiles",
            Self::ValidateApprovals => "validate-approvals",
        }
    }
}

/// The webhook routes, without TLS: `POST /mutate-pods`, `POST /validate-pods`,
/// `POST /validate-policyprofiles`, `POST /validate-approvals`, `GET /healthz`.
/// Only `config.inject`, `config.profiles` and `config.max_body_bytes` are used; requests are
/// counted in a registry of their own (see [`router_with_metrics`]).
pub fn router(config: &WebhookConfig) -> Router {
    router_with_metrics(config, Metrics::default())
}

/// [`router`], counting requests in `metrics`.
pub fn router_with_metrics(config: &WebhookConfig, metrics: Metrics) -> Router {
    let state = Arc::new(AppState {
        inject: config.inject.clone(),
        profiles: config.profiles.clone(),
        controller_user: config.controller_user.clone(),
        max_body_bytes: config.max_body_bytes,
        metrics,
    });
    Router::new()
        .route("/mutate-pods", post(mutate_pods))
        .route("/validate-pods", post(validate_pods))
        .route("/validate-policyprofiles", post(validate_policy_profiles))
        .route("/validate-approvals", post(validate_approvals))
        .route("/healthz", get(healthz))
        .with_state(state)
}

async fn healthz() -> Response {
    json_response(StatusCode::OK, br#"{"status":"ok"}"#.to_vec())
}

async fn mutate_pods(State(state): State<Arc<AppState>>, request: Request) -> Response {
    admit(Hook::MutatePods, &state, request).await
}

async fn validate_pods(State(state): State<Arc<AppState>>, request: Request) -> Response {
    admit(Hook::ValidatePods, &state, request).await
}

async fn validate_policy_profiles(
    State(state): State<Arc<AppState>>,
    request: Request,
) -> Response {
    admit(Hook::ValidatePolicyProfiles, &state, request).await
}

async fn validate_approvals(State(state): State<Arc<AppState>>, request: Request) -> Response {
    admit(Hook::ValidateApprovals, &state, request).await
}

async fn admit(hook: Hook, state: &AppState, request: Request) -> Response {
    let started = std::time::Instant::now();
    let span = crate::trace::admission(hook.name(), request.headers());
    let (response, allowed) = answer(hook, state, request).instrument(span).await;
    state
        .metrics
        .observe(hook.name(), allowed, started.elapsed());
    response
}

/// The HTTP answer and the `allowed` label it is counted under.
async fn answer(hook: Hook, state: &AppState, request: Request) -> (Response, &'static str) {
    let body = match read_body(request.into_body(), state.max_body_bytes).await {
        Ok(body) => body,
        Err(e) => {
            tracing::warn!(hook = hook.name(), code = e.code(), error = %e, "admission request refused");
            crate::trace::unreadable(e.code());
            return (error_response(&e), "error");
        }
    };
    let request = match AdmissionReview::from_slice(&body) {
        Ok(request) => request,
        Err(e) => {
            tracing::warn!(hook = hook.name(), code = e.code(), error = %e, "undecodable AdmissionReview");
            crate::trace::unreadable(e.code());
            return match AdmissionReview::salvage_uid(&body) {
                Some(uid) => (review_response(&AdmissionResponse::deny(uid, &e)), "false"),
                None => (error_response(&e), "error"),
            };
        }
    };
    let mut response = match hook {
        Hook::ValidatePolicyProfiles => crate::profile_check::review(&request).await,
        _ => decide(hook, &request, &state.inject),
    };
    if matches!(hook, Hook::ValidateApprovals) && response.allowed {
        // Well formed and attributed: now whether the writer may create a
        // request, and the decider decide.
        let judged = match validate::request_creator(&request, state.controller_user.as_deref()) {
            Ok(()) => crate::approvers::check(&request, &state.profiles).await,
            Err(e) => Err(e),
        };
        if let Err(e) = judged {
            response = AdmissionResponse::deny(&request.uid, &e);
        }
    }
    crate::trace::reviewed(&request, &response);
    if response.allowed {
        tracing::debug!(hook = hook.name(), uid = %request.uid, patched = response.patch.is_some(), "admitted");
    } else {
        tracing::info!(
            hook = hook.name(),
            uid = %request.uid,
            namespace = request.namespace.as_deref().unwrap_or_default(),
            name = request.name.as_deref().unwrap_or_default(),
            reason = response.status.as_ref().map(|s| s.reason.as_str()).unwrap_or_default(),
            "denied"
        );
    }
    let allowed = if response.allowed { "true" } else { "false" };
    (review_response(&response), allowed)
}

fn decide(hook: Hook, request: &AdmissionRequest, config: &InjectConfig) -> AdmissionResponse {
    let result = match hook {
        Hook::MutatePods => mutate(request, config),
        Hook::ValidatePods => {
            validate::pod(request).map(|()| AdmissionResponse::allow(&request.uid))
        }
        // Answered by `profile_check::review` (with the analysis); this
        // arm only compiles the profile.
        Hook::ValidatePolicyProfiles => {
            validate::policy_profile(request).map(|_| AdmissionResponse::allow(&request.uid))
        }
        Hook::ValidateApprovals => {
            validate::approval(request).map(|()| AdmissionResponse::allow(&request.uid))
        }
    };
    result.unwrap_or_else(|e| AdmissionResponse::deny(&request.uid, &e))
}

fn mutate(
    request: &AdmissionRequest,
    config: &InjectConfig,
) -> Result<AdmissionResponse, WebhookError> {
    let allow = AdmissionResponse::allow(&request.uid);
    if request.operation != "CREATE" {
        return Ok(allow);
    }
    let pod = request
        .object
        .as_ref()
        .ok_or_else(|| WebhookError::InvalidObject {
            field: "request.object".into(),
            message: "missing for CREATE".into(),
        })?;
    let plan = inject::plan(pod, request.namespace.as_deref(), config)?;
    match &plan {
        Plan::Skip { warning, .. } => Ok(allow.with_warnings(warning.iter().cloned().collect())),
        Plan::Inject { ops, .. } | Plan::TopUp { ops } => {
            if let Plan::Inject { profile, .. } = &plan {
                tracing::info!(
                    uid = %request.uid,
                    namespace = request.namespace.as_deref().unwrap_or_default(),
                    profile = %profile,
                    "injecting toolgate sidecar"
                );
            }
            let patch =
                serde_json::to_vec(ops).map_err(|e| WebhookError::Internal(e.to_string()))?;
            Ok(allow.with_patch(&patch))
        }
    }
}

/// How much of an oversized body is still read, and dropped, before the
/// 413 goes out. A client is usually still sending when the limit is
/// crossed; closing a connection with its bytes unread resets it, and the
/// client then sees a broken pipe instead of the answer. Beyond this much
/// the connection is cut anyway.
const DRAIN_PAST_LIMIT: usize = 8 * 1024 * 1024;

/// The request body, at most `limit` bytes.
async fn read_body(mut body: Body, limit: usize) -> Result<Bytes, WebhookError> {
    use http_body_util::BodyExt as _;
    let mut kept = Vec::new();
    let mut seen = 0usize;
    while let Some(frame) = body.frame().await {
        let frame = frame
            .map_err(|e| WebhookError::MalformedReview(format!("could not read the body: {e}")))?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        seen = seen.saturating_add(data.len());
        if seen <= limit {
            kept.extend_from_slice(&data);
        } else if seen > limit.saturating_add(DRAIN_PAST_LIMIT) {
            break;
        }
    }
    if seen > limit {
        return Err(WebhookError::BodyTooLarge { limit });
    }
    Ok(Bytes::from(kept))
}

fn review_response(response: &AdmissionResponse) -> Response {
    match response.to_review_json() {
        Ok(body) => json_response(StatusCode::OK, body),
        Err(e) => error_response(&e),
    }
}

fn error_response(error: &WebhookError) -> Response {
    let status = StatusCode::from_u16(error.http_status()).unwrap_or(StatusCode::BAD_REQUEST);
    json_response(status, error.to_json().to_string().into_bytes())
}

fn json_response(status: StatusCode, body: Vec<u8>) -> Response {
    (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// A bound, not yet running webhook server. [`bind`] then [`Server::run`];
/// [`serve`] does both.
pub struct Server {
    listener: TcpListener,
    metrics_listener: Option<TcpListener>,
    metrics: Metrics,
    certs: Arc<ReloadingCert>,
    acceptor: TlsAcceptor,
    router: Router,
    reload_interval: Duration,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("addr", &self.listener.local_addr().ok())
            .field("metrics_addr", &self.metrics_addr())
            .field("certs", &self.certs)
            .finish_non_exhaustive()
    }
}

/// Loads the certificate pair and binds the listen address.
pub async fn bind(config: WebhookConfig) -> Result<Server, WebhookError> {
    let certs = ReloadingCert::load(&config.tls_cert, &config.tls_key)?;
    let acceptor = TlsAcceptor::from(certs.server_config()?);
    let listener = TcpListener::bind(config.listen)
        .await
        .map_err(|source| WebhookError::Io {
            context: format!("binding {}", config.listen),
            source,
        })?;
    let metrics_listener = match config.metrics_listen {
        Some(addr) => Some(
            TcpListener::bind(addr)
                .await
                .map_err(|source| WebhookError::Io {
                    context: format!("binding {addr} (metrics)"),
                    source,
                })?,
        ),
        None => None,
    };
    let metrics = Metrics::new(Some(certs.clone()));
    Ok(Server {
        listener,
        metrics_listener,
        router: router_with_metrics(&config, metrics.clone()),
        metrics,
        certs,
        acceptor,
        reload_interval: config.tls_reload_interval,
    })
}

/// Serves the webhooks over TLS on `config.listen` until `shutdown`
/// completes, then drains open connections (at most 10 s).
pub async fn serve(
    config: WebhookConfig,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), WebhookError> {
    bind(config).await?.run(shutdown).await
}

impl Server {
    /// The bound address (useful with port 0).
    pub fn local_addr(&self) -> Result<SocketAddr, WebhookError> {
        self.listener
            .local_addr()
            .map_err(|source| WebhookError::Io {
                context: "reading the bound address".into(),
                source,
            })
    }

    /// The bound address of the plain-HTTP `/metrics` endpoint, if any.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics_listener.as_ref().and_then(metrics::describe)
    }

    /// The webhook's metrics.
    pub fn metrics(&self) -> Metrics {
        self.metrics.clone()
    }

    /// Accepts connections until `shutdown` completes.
    pub async fn run(self, shutdown: impl Future<Output = ()> + Send) -> Result<(), WebhookError> {
        let Server {
            listener,
            metrics_listener,
            metrics,
            certs,
            acceptor,
            router,
            reload_interval,
        } = self;
        let watcher = certs.watch(reload_interval);
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let metrics_server = metrics_listener.map(|listener| {
            tracing::info!(addr = ?listener.local_addr().ok(), "webhook metrics listening (plain HTTP)");
            let mut stop = stop_rx.clone();
            tokio::spawn(async move {
                let _ = axum::serve(
                    listener.tap_io(|tcp| {
                        let _ = tcp.set_nodelay(true);
                    }),
                    metrics::router(metrics),
                )
                    .with_graceful_shutdown(async move {
                        let _ = stop.wait_for(|s| *s).await;
                    })
                    .await;
            })
        });
        let mut connections = JoinSet::new();
        tokio::pin!(shutdown);
        tracing::info!(addr = ?listener.local_addr().ok(), "toolgate webhook listening");
        loop {
            let (tcp, peer) = tokio::select! {
                () = &mut shutdown => break,
                accepted = listener.accept() => match accepted {
                    Ok(pair) => pair,
                    Err(e) => {
                        // Out of file descriptors and the like: back off, do not die.
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                },
            };
            while connections.try_join_next().is_some() {}
            let _ = tcp.set_nodelay(true);
            let acceptor = acceptor.clone();
            let service = TowerToHyperService::new(router.clone());
            let mut stop = stop_rx.clone();
            connections.spawn(async move {
                let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await
                {
                    Ok(Ok(tls)) => tls,
                    Ok(Err(e)) => return tracing::debug!(%peer, error = %e, "TLS handshake failed"),
                    Err(_) => return tracing::debug!(%peer, "TLS handshake timed out"),
                };
                let connection = hyper::server::conn::http1::Builder::new()
                    .timer(TokioTimer::new())
                    .header_read_timeout(HEADER_READ_TIMEOUT)
                    .serve_connection(TokioIo::new(tls), service);
                tokio::pin!(connection);
                let result = tokio::select! {
                    result = connection.as_mut() => result,
                    _ = stop.changed() => {
                        connection.as_mut().graceful_shutdown();
                        connection.await
                    }
                };
                if let Err(e) = result {
                    tracing::debug!(%peer, error = %e, "connection ended with an error");
                }
            });
        }
        watcher.abort();
        let _ = stop_tx.send(true);
        if let Some(task) = metrics_server {
            let _ = tokio::time::timeout(DRAIN_TIMEOUT, task).await;
        }
        let drained = tokio::time::timeout(DRAIN_TIMEOUT, async {
            while connections.join_next().await.is_some() {}
        })
        .await;
        if drained.is_err() {
            tracing::warn!("webhook connections did not drain in time; closing them");
            connections.abort_all();
        }
        Ok(())
    }
}
