//! Command-line flags and the configuration they produce.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::WebhookError;
use crate::approvers::Profiles;
use crate::inject::{InjectConfig, SidecarMode, SidecarTracing};
use crate::sidecar_resources::{SidecarResources, cpu_flag, memory_flag};

/// `none` or a user id.
fn parse_user(text: &str) -> Result<String, String> {
    match text {
        "none" => Ok(text.to_owned()),
        id => id
            .parse::<u32>()
            .map(|n| n.to_string())
            .map_err(|_| format!("`{id}` is neither a user id nor `none`")),
    }
}

/// Default limit on an AdmissionReview body.
pub const DEFAULT_MAX_BODY_BYTES: usize = 2 * 1024 * 1024;
/// Default interval between checks of the certificate files.
pub const DEFAULT_TLS_RELOAD_INTERVAL: Duration = Duration::from_secs(5);

/// Flags of `toolgate webhook`; each also reads a `TOOLGATE_WEBHOOK_*` /
/// `TOOLGATE_*` variable. Flatten into a clap command with `#[command(flatten)]`.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct WebhookArgs {
    /// Address to serve HTTPS on.
    #[arg(long, env = "TOOLGATE_WEBHOOK_LISTEN", default_value = "0.0.0.0:8443")]
    pub listen: SocketAddr,
    /// PEM certificate chain (re-read when it changes).
    #[arg(
        long,
        env = "TOOLGATE_WEBHOOK_TLS_CERT",
        default_value = "/etc/toolgate/webhook-tls/tls.crt"
    )]
    pub tls_cert: PathBuf,
    /// PEM private key (re-read when it changes).
    #[arg(
        long,
        env = "TOOLGATE_WEBHOOK_TLS_KEY",
        default_value = "/etc/toolgate/webhook-tls/tls.key"
    )]
    pub tls_key: PathBuf,
    /// Address of the plain-HTTP `/metrics` endpoint, or `off`.
    #[arg(
        long,
        env = "TOOLGATE_WEBHOOK_METRICS_LISTEN",
        default_value = "0.0.0.0:8081",
        value_parser = check_metrics_listen
    )]
    pub metrics_listen: String,
    /// Image of the injected sidecar container.
    #[arg(long, env = "TOOLGATE_SIDECAR_IMAGE")]
    pub sidecar_image: String,
    /// Profile for pods without a `toolgate.dev/profile` annotation.
    #[arg(long, env = "TOOLGATE_DEFAULT_PROFILE")]
    pub default_profile: Option<String>,
    /// Inject a native sidecar (init container, restartPolicy Always) or a regular container.
    #[arg(long, env = "TOOLGATE_SIDECAR_MODE", value_enum, default_value_t = SidecarMode::Native)]
    pub sidecar_mode: SidecarMode,
    /// `imagePullPolicy` of the injected sidecar.
    #[arg(
        long,
        env = "TOOLGATE_SIDECAR_PULL_POLICY",
        default_value = "IfNotPresent",
        value_parser = ["Always", "IfNotPresent", "Never"]
    )]
    pub sidecar_pull_policy: String,
    /// User and group id of the injected sidecar, or `none` to let the
    /// platform assign one (OpenShift).
    #[arg(long, env = "TOOLGATE_SIDECAR_RUN_AS_USER", default_value = "65532", value_parser = parse_user)]
    pub sidecar_run_as_user: String,
    /// CPU request of the injected sidecar (pods: `toolgate.dev/sidecar-cpu-request`).
    #[arg(long, env = "TOOLGATE_SIDECAR_CPU_REQUEST", default_value = "10m", value_parser = cpu_flag)]
    pub sidecar_cpu_request: String,
    /// CPU limit of the injected sidecar (pods: `toolgate.dev/sidecar-cpu-limit`).
    #[arg(long, env = "TOOLGATE_SIDECAR_CPU_LIMIT", default_value = "500m", value_parser = cpu_flag)]
    pub sidecar_cpu_limit: String,
    /// Memory request of the injected sidecar (pods: `toolgate.dev/sidecar-memory-request`).
    #[arg(long, env = "TOOLGATE_SIDECAR_MEMORY_REQUEST", default_value = "32Mi", value_parser = memory_flag)]
    pub sidecar_memory_request: String,
    /// Memory limit of the injected sidecar (pods: `toolgate.dev/sidecar-memory-limit`).
    #[arg(long, env = "TOOLGATE_SIDECAR_MEMORY_LIMIT", default_value = "128Mi", value_parser = memory_flag)]
    pub sidecar_memory_limit: String,
    /// Secret (in the pod's namespace) whose key `url` is the database URL.
    #[arg(
        long,
        env = "TOOLGATE_DATABASE_SECRET",
        default_value = toolgate_contract::names::DATABASE_SECRET
    )]
    pub database_secret: String,
    /// OTLP/HTTP endpoint injected sidecars export traces to
    /// (`http://collector:4318`); empty: they export none.
    #[arg(long, env = "TOOLGATE_SIDECAR_OTLP_ENDPOINT", default_value = "", value_parser = check_http_url)]
    pub sidecar_otlp_endpoint: String,
    /// Share (0-1) of the traces a sidecar starts itself that it samples;
    /// a trace the agent started follows the agent's sampling decision.
    #[arg(long, env = "TOOLGATE_SIDECAR_TRACE_SAMPLE_RATIO", default_value = "1", value_parser = check_ratio)]
    pub sidecar_trace_sample_ratio: String,
    /// `transaction` when the database URL of the Secret reaches a
    /// transaction-mode pooler (PgBouncer); `none` otherwise.
    #[arg(long, env = "TOOLGATE_SIDECAR_DATABASE_POOLER", default_value = "none", value_parser = check_pooler)]
    pub sidecar_database_pooler: String,
    /// Base URL of the wake-up relay (`toolgate wakeups serve`) injected
    /// sidecars hear stops from; empty: each uses its database's `LISTEN`
    /// (or, behind a pooler, reads stops every second).
    #[arg(long, env = "TOOLGATE_SIDECAR_WAKEUPS_URL", default_value = "", value_parser = check_http_url)]
    pub sidecar_wakeups_url: String,
    /// The username the controller authenticates as
    /// (`system:serviceaccount:NS:NAME`): only it may create request
    /// Approvals. Unset: whoever RBAC lets create them may.
    #[arg(long, env = "TOOLGATE_CONTROLLER_USER")]
    pub controller_user: Option<String>,
}

/// `none` or `transaction`, the values of the sidecar's `--database-pooler`.
fn check_pooler(text: &str) -> Result<String, String> {
    match text.trim() {
        "none" | "" => Ok("none".into()),
        "transaction" => Ok("transaction".into()),
        other => Err(format!("`{other}` is neither `none` nor `transaction`")),
    }
}

/// Empty, or an `http(s)://` URL (an OTLP endpoint, the wake-up relay).
fn check_http_url(text: &str) -> Result<String, String> {
    let text = text.trim();
    if text.is_empty() || text.starts_with("http://") || text.starts_with("https://") {
        Ok(text.to_owned())
    } else {
        Err(format!("`{text}` is not an http:// or https:// URL"))
    }
}

/// A number from 0 to 1, as the sampler reads it.
fn check_ratio(text: &str) -> Result<String, String> {
    match text.trim().parse::<f64>() {
        Ok(r) if (0.0..=1.0).contains(&r) => Ok(r.to_string()),
        _ => Err(format!("`{text}` is not a ratio from 0 to 1")),
    }
}

/// `off` (or empty) or a socket address.
fn check_metrics_listen(text: &str) -> Result<String, String> {
    match text {
        "off" | "" => Ok(String::new()),
        addr => addr
            .parse::<SocketAddr>()
            .map(|a| a.to_string())
            .map_err(|e| format!("`{addr}` is not an address: {e}")),
    }
}

/// Everything [`serve`](crate::serve) and [`router`](crate::router) need.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookConfig {
    /// Address to serve HTTPS on (port 0 picks a free one).
    pub listen: SocketAddr,
    /// Plain-HTTP `/metrics` address; `None`: no metrics endpoint.
    pub metrics_listen: Option<SocketAddr>,
    /// PEM certificate chain.
    pub tls_cert: PathBuf,
    /// PEM private key.
    pub tls_key: PathBuf,
    /// How often the certificate files are checked for rotation.
    pub tls_reload_interval: Duration,
    /// Largest accepted body; larger ones get HTTP 413.
    pub max_body_bytes: usize,
    /// What to inject.
    pub inject: InjectConfig,
    /// Where the approvers of a decided Approval's profile are read.
    pub profiles: Profiles,
    /// The only user who may create request Approvals (the controller).
    pub controller_user: Option<String>,
}

impl TryFrom<WebhookArgs> for WebhookConfig {
    type Error = WebhookError;

    /// Fails when a sidecar resource request is above its limit.
    fn try_from(args: WebhookArgs) -> Result<Self, WebhookError> {
        let resources = SidecarResources::from_flags(
            &args.sidecar_cpu_request,
            &args.sidecar_cpu_limit,
            &args.sidecar_memory_request,
            &args.sidecar_memory_limit,
        )
        .map_err(|message| WebhookError::Injection {
            field: "--sidecar-*-request".into(),
            message,
        })?;
        Ok(Self {
            listen: args.listen,
            // Checked by the flag's parser: empty means off.
            metrics_listen: args.metrics_listen.parse().ok(),
            tls_cert: args.tls_cert,
            tls_key: args.tls_key,
            tls_reload_interval: DEFAULT_TLS_RELOAD_INTERVAL,
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            inject: InjectConfig {
                sidecar_image: args.sidecar_image,
                default_profile: args.default_profile.filter(|p| !p.is_empty()),
                mode: args.sidecar_mode,
                database_secret: args.database_secret,
                resources,
                pull_policy: args.sidecar_pull_policy,
                run_as_user: args.sidecar_run_as_user.parse().ok(),
                tracing: (!args.sidecar_otlp_endpoint.is_empty()).then_some(SidecarTracing {
                    endpoint: args.sidecar_otlp_endpoint,
                    sample_ratio: args.sidecar_trace_sample_ratio,
                }),
                transaction_pooler: args.sidecar_database_pooler == "transaction",
                wakeups_url: (!args.sidecar_wakeups_url.is_empty())
                    .then_some(args.sidecar_wakeups_url),
            },
            profiles: Profiles::kube(),
            controller_user: args.controller_user.filter(|u| !u.is_empty()),
        })
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: WebhookArgs,
    }

    #[test]
    fn flags_parse_into_a_config() {
        let cli = Cli::try_parse_from([
            "x",
            "--listen",
            "127.0.0.1:9443",
            "--sidecar-image",
            "img:1",
            "--sidecar-mode",
            "container",
            "--default-profile",
            "base",
            "--database-secret",
            "db",
            "--tls-cert",
            "/c",
            "--tls-key",
            "/k",
        ])
        .unwrap();
        let config = WebhookConfig::try_from(cli.args).unwrap();
        assert_eq!(config.listen.port(), 9443);
        assert_eq!(config.inject.mode, SidecarMode::Container);
        assert_eq!(config.inject.default_profile.as_deref(), Some("base"));
        assert_eq!(config.tls_key, PathBuf::from("/k"));
        assert_eq!(config.metrics_listen, Some("0.0.0.0:8081".parse().unwrap()));
        let off =
            Cli::try_parse_from(["x", "--sidecar-image", "i", "--metrics-listen", "off"]).unwrap();
        assert_eq!(
            WebhookConfig::try_from(off.args).unwrap().metrics_listen,
            None
        );
        // Sidecar knobs: canonical quantities, `none` user, checked pairs.
        let knobs = Cli::try_parse_from([
            "x",
            "--sidecar-image",
            "i",
            "--sidecar-cpu-limit",
            "2000m",
            "--sidecar-memory-limit",
            "1024Mi",
            "--sidecar-run-as-user",
            "none",
            "--sidecar-pull-policy",
            "Always",
        ])
        .unwrap();
        let inject = WebhookConfig::try_from(knobs.args).unwrap().inject;
        assert_eq!(inject.resources.cpu_limit, 2000);
        assert_eq!(inject.resources.memory_limit, 1 << 30);
        assert_eq!(inject.run_as_user, None);
        assert_eq!(inject.pull_policy, "Always");
        let default = Cli::try_parse_from(["x", "--sidecar-image", "i"]).unwrap();
        assert_eq!(
            WebhookConfig::try_from(default.args)
                .unwrap()
                .inject
                .run_as_user,
            Some(65532)
        );
        for bad in [
            ["--sidecar-cpu-request", "0.5"],
            ["--sidecar-memory-limit", "1G"],
            ["--sidecar-run-as-user", "root"],
            ["--sidecar-pull-policy", "Sometimes"],
        ] {
            let args = ["x", "--sidecar-image", "i", bad[0], bad[1]];
            assert!(Cli::try_parse_from(args).is_err(), "{bad:?}");
        }
        let inverted = Cli::try_parse_from([
            "x",
            "--sidecar-image",
            "i",
            "--sidecar-memory-request",
            "1Gi",
        ])
        .unwrap();
        assert!(WebhookConfig::try_from(inverted.args).is_err());
        assert!(
            Cli::try_parse_from(["x", "--sidecar-image", "i", "--sidecar-mode", "pod"]).is_err()
        );
    }
}
