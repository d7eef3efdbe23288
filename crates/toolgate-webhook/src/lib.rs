//! toolgate's Kubernetes admission webhooks.
//!
//! - `POST /mutate-pods` injects the `toolgate-sidecar` into agent pods
//!   ([`inject`]: pure pod JSON in, JSON Patch out).
//! - `POST /validate-pods` refuses a pod UPDATE (or `pods/ephemeralcontainers`
//!   update) that would change, remove or reach into the injected sidecar
//!   ([`guard`]).
//! - `POST /validate-policyprofiles` refuses a PolicyProfile that does not
//!   load and compile, naming the field and the rule ([`validate`]), or
//!   whose `escalate` glob the `allow` tier shadows; other cheap analysis
//!   findings come back as warnings ([`profile_check`]).
//! - `POST /validate-approvals` keeps an Approval well formed and its
//!   decision final once made ([`validate`]), and refuses a decision by
//!   someone who is not an approver of its profile ([`approvers`]).
//! - `GET /healthz` answers `{"status":"ok"}`.
//! - [`metrics`]: `GET /metrics` (and `/healthz`) on a separate plain-HTTP
//!   port (`--metrics-listen`, default `0.0.0.0:8081`; `off` disables it).
//!
//! [`serve`] serves them over TLS ([`tls`]) from a mounted certificate and
//! key that are re-read when they rotate; [`router`] gives the bare
//! [`axum::Router`] for embedding behind another TLS terminator.
//!
//! Every failure is a [`WebhookError`] with a stable [`code`](WebhookError::code).
//!
//! Wiring it into a CLI (`toolgate webhook`):
//!
//! ```no_run
//! # async fn webhook(args: toolgate_webhook::WebhookArgs) -> Result<(), toolgate_webhook::WebhookError> {
//! // `args` came from `#[command(flatten)]` / a `Webhook(WebhookArgs)` subcommand.
//! let config = toolgate_webhook::WebhookConfig::try_from(args)?;
//! toolgate_webhook::serve(config, async {
//!     let _ = tokio::signal::ctrl_c().await;
//! })
//! .await
//! # }
//! ```

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod approvers;
mod config;
mod error;
pub mod guard;
pub mod inject;
pub mod metrics;
pub mod profile_check;
pub mod review;
mod server;
pub mod sidecar_resources;
pub mod tls;
mod trace;
pub mod validate;

pub use config::{WebhookArgs, WebhookConfig};
pub use error::WebhookError;
pub use inject::{InjectConfig, SidecarMode, SidecarTracing};
pub use server::{Server, bind, router, router_with_metrics, serve};
