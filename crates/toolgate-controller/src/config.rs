//! Command-line flags of `toolgate controller` and the configuration they
//! produce, the same `Args → Config` pattern as the webhook and the sidecar.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use jiff::SignedDuration;
use toolgate_bundle::parse_duration;

use crate::archive::schedule::ArchiveSchedule;
use crate::context::Settings;

/// Command-line arguments of `toolgate controller`.
#[derive(Debug, Clone, clap::Args)]
pub struct ControllerArgs {
    /// Database URL (`postgres://…` or `sqlite://path?mode=rwc`).
    #[arg(long, env = toolgate_contract::env::DATABASE_URL)]
    pub database: String,
    /// Namespace the controller runs in: signing key Secret, trust ConfigMap, leader Lease.
    #[arg(long, env = toolgate_contract::env::POD_NAMESPACE, default_value = "toolgate-system")]
    pub namespace: String,
    /// One namespace for the Approval objects of every tenant (a central
    /// queue). Default: each approval in its tenant's own namespace, so
    /// RBAC there decides who sees and answers it.
    #[arg(long, env = "TOOLGATE_APPROVALS_NAMESPACE", value_parser = namespace_name)]
    pub approvals_namespace: Option<String>,
    /// The namespace request Approvals used to live in: a decision already
    /// made there is still recorded, and undecided ones move to their home.
    /// Default with per-tenant namespaces: --namespace (the chart's old
    /// queue); `none` turns it off.
    #[arg(long, env = "TOOLGATE_MIGRATE_APPROVALS_FROM", value_parser = migrate_from)]
    pub migrate_approvals_from: Option<MigrateFrom>,
    /// Address of the /metrics, /healthz and /readyz endpoint.
    #[arg(long, default_value = "0.0.0.0:8080")]
    pub metrics_listen: SocketAddr,
    /// Validity of signed bundles (e.g. `24h`, `90m`); re-signed when a third remains.
    #[arg(long, default_value = "24h", value_parser = parse_duration)]
    pub bundle_validity: SignedDuration,
    /// How often pending approvals are mirrored from the database.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub approval_sync_interval: SignedDuration,
    /// Identity in the leader Lease (default: $POD_NAME, else the hostname).
    #[arg(long, env = toolgate_contract::env::POD_NAME)]
    pub identity: Option<String>,
    /// Leader lease duration.
    #[arg(long, default_value = "15s", value_parser = parse_duration)]
    pub lease_duration: SignedDuration,
    /// Secret (key `url`) written into each namespace that has a PolicyProfile,
    /// holding that namespace's own PostgreSQL tenant role; the injected sidecars
    /// read it. Needs CREATEROLE for the controller's database user.
    #[arg(long, env = "TOOLGATE_TENANT_SECRET", default_value = crate::tenancy::DATABASE_SECRET)]
    pub tenant_secret: String,
    /// Do not provision tenant roles or write tenant Secrets (manage them yourself
    /// with `toolgate tenant provision`).
    #[arg(long)]
    pub no_tenant_provisioning: bool,
    /// Base URL for tenant URLs (host, port, database and options the sidecars use);
    /// default: --database.
    #[arg(long, env = "TOOLGATE_TENANT_DATABASE_URL")]
    pub tenant_database_url: Option<String>,
    /// How often the leader signs each changed decision-stream head and
    /// publishes every tenant's latest checkpoints (ConfigMap
    /// `toolgate-checkpoints` in its namespace).
    #[arg(long, default_value = "10m", value_parser = parse_duration)]
    pub checkpoint_interval: SignedDuration,
    /// Do not sign checkpoints (sign them yourself with `toolgate audit checkpoint`).
    #[arg(long)]
    pub no_checkpoints: bool,
    /// Archive the decision log on a schedule: every --archive-interval the
    /// leader moves each stream's rows created more than this long ago (e.g.
    /// `30d`; a stream's last row always stays) into --archive-dir as signed
    /// segments, as `toolgate audit archive` does, and deletes them from the
    /// database. Off when not given.
    #[arg(long, value_parser = parse_duration, requires = "archive_dir")]
    pub archive_after: Option<SignedDuration>,
    /// Directory the scheduled archive writes into, every pass the same one
    /// (required with --archive-after). Copy its files to durable storage;
    /// `toolgate audit verify --archive DIR` checks them.
    #[arg(long, requires = "archive_after")]
    pub archive_dir: Option<PathBuf>,
    /// How often the leader archives (with --archive-after).
    #[arg(long, default_value = "1h", value_parser = parse_duration)]
    pub archive_interval: SignedDuration,
    /// How often the leader sends approval notifications that are due
    /// (`spec.approvals.notify`).
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    pub notify_interval: SignedDuration,
    /// How long an approval event is still worth telling people about: a
    /// receiver down longer misses what is older.
    #[arg(long, default_value = "24h", value_parser = parse_duration)]
    pub notify_retention: SignedDuration,
    /// Where approvers are told about the approvals of every profile that
    /// names no channels of its own: a JSON list shaped like
    /// `spec.approvals.notify`, whose keys are read from Secret
    /// `toolgate-notify` in the controller's namespace.
    #[arg(long, env = "TOOLGATE_DEFAULT_NOTIFY", value_parser = parse_channels)]
    pub default_notify: Option<DefaultChannels>,
    /// A range (CIDR, or one address) approval notifications may be sent
    /// to although it is loopback, link-local, a cloud metadata endpoint or
    /// in the profile's hardline CIDRs, which are refused otherwise (e.g. an
    /// in-cluster relay's address). Repeatable.
    #[arg(long = "notify-allow-cidr", value_name = "CIDR", value_parser = parse_cidr)]
    pub notify_allow_cidr: Vec<ipnet::IpNet>,
}

/// The cluster's default notification channels, as checked.
#[derive(Debug, Clone, Default)]
pub struct DefaultChannels(pub Vec<toolgate_policy::NotifyChannel>);

fn parse_channels(text: &str) -> Result<DefaultChannels, String> {
    let channels: Vec<toolgate_policy::NotifyChannel> =
        toolgate_policy::load::from_str(text).map_err(|e| e.to_string())?;
    toolgate_policy::notify::check_channels("--default-notify", &channels)
        .map_err(|e| e.to_string())?;
    Ok(DefaultChannels(channels))
}

/// A CIDR, or a single address as its /32 or /128.
fn parse_cidr(text: &str) -> Result<ipnet::IpNet, String> {
    text.parse::<ipnet::IpNet>()
        .or_else(|_| text.parse::<std::net::IpAddr>().map(ipnet::IpNet::from))
        .map(|n| n.trunc())
        .map_err(|_| format!("`{text}` is not a CIDR (e.g. 10.0.0.0/8, fd00::/8) or an address"))
}

/// Everything [`run_controller`](crate::run_controller) needs, resolved from
/// the flags: durations as `std` durations, the lease identity chosen, the
/// reconcilers' [`Settings`] built.
#[derive(Debug, Clone)]
pub struct ControllerConfig {
    /// Database URL (`postgres://…` or `sqlite://…`).
    pub database_url: String,
    /// Address of the /metrics, /healthz and /readyz endpoint.
    pub metrics_listen: SocketAddr,
    /// Identity in the leader Lease.
    pub identity: String,
    /// Leader lease duration.
    pub lease_duration: Duration,
    /// How often pending approvals are mirrored from the database.
    pub approval_sync_interval: Duration,
    /// How often checkpoints are signed and published; `None`: never.
    pub checkpoint_interval: Option<Duration>,
    /// When and where the decision log is archived; `None`: never.
    pub archive: Option<ArchiveSchedule>,
    /// Tunables of the reconcilers; `settings.namespace` is the namespace
    /// the controller runs in (signing key, trust set, lease).
    pub settings: Settings,
}

/// `--migrate-approvals-from`: a namespace, or `none`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MigrateFrom {
    /// Honour and empty this old queue.
    Namespace(String),
    /// Migrate nothing.
    Off,
}

fn namespace_name(text: &str) -> Result<String, String> {
    if toolgate_k8s::names::is_namespace_name(text) {
        Ok(text.to_owned())
    } else {
        Err(format!("`{text}` is not a namespace name"))
    }
}

fn migrate_from(text: &str) -> Result<MigrateFrom, String> {
    match text {
        "none" => Ok(MigrateFrom::Off),
        ns => namespace_name(ns).map(MigrateFrom::Namespace),
    }
}

/// A flag duration as a `std` one (the flags' parser refuses zero and
/// negative durations, so the fallback is never reached from flags).
fn std_duration(d: SignedDuration) -> Duration {
    Duration::try_from(d).unwrap_or(Duration::from_secs(1))
}

impl From<ControllerArgs> for ControllerConfig {
    /// Cannot fail: every flag is checked by its parser, and
    /// `--archive-after` and `--archive-dir` require each other (arguments
    /// built by hand with only one of them archive nothing). The identity
    /// falls back to `$HOSTNAME`, then to `toolgate-controller-<pid>`.
    fn from(args: ControllerArgs) -> Self {
        let mut settings = Settings::new(&args.namespace);
        settings.bundle_validity = args.bundle_validity;
        if let Some(queue) = &args.approvals_namespace {
            settings.approvals = crate::approval::Placement::central(queue);
        }
        match args.migrate_approvals_from {
            Some(MigrateFrom::Namespace(old)) => settings.approvals.migrate_from = Some(old),
            Some(MigrateFrom::Off) => settings.approvals.migrate_from = None,
            None => {}
        }
        settings.tenant_secret = (!args.no_tenant_provisioning).then_some(args.tenant_secret);
        settings.tenant_base_url = args.tenant_database_url;
        settings.notify_interval = std_duration(args.notify_interval);
        settings.notify_retention = args.notify_retention;
        settings.default_notify = args.default_notify.unwrap_or_default().0;
        settings.notify_allow = args.notify_allow_cidr.into();
        let archive = match (args.archive_after, args.archive_dir) {
            (Some(after), Some(dir)) => Some(ArchiveSchedule {
                after,
                dir,
                interval: std_duration(args.archive_interval),
            }),
            _ => None,
        };
        let identity = args
            .identity
            .or_else(|| std::env::var("HOSTNAME").ok())
            .unwrap_or_else(|| format!("toolgate-controller-{}", std::process::id()));
        Self {
            database_url: args.database,
            metrics_listen: args.metrics_listen,
            identity,
            lease_duration: std_duration(args.lease_duration),
            approval_sync_interval: std_duration(args.approval_sync_interval),
            checkpoint_interval: (!args.no_checkpoints)
                .then(|| std_duration(args.checkpoint_interval)),
            archive,
            settings,
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: ControllerArgs,
    }

    fn parse(extra: &[&str]) -> Result<ControllerArgs, clap::Error> {
        let base = ["controller", "--database", "sqlite::memory:"];
        Cli::try_parse_from(base.iter().chain(extra)).map(|c| c.args)
    }

    #[test]
    fn default_channels_are_checked_like_a_profiles() {
        let json = r#"[{"webhook": {"urlSecretKey": "url", "signingSecretKey": "signing"}},
                        {"webhook": {"urlSecretKey": "slack-url", "format": "slack"}}]"#;
        let config = ControllerConfig::from(parse(&["--default-notify", json]).unwrap());
        assert_eq!(config.settings.default_notify.len(), 2);
        assert!(
            ControllerConfig::from(parse(&[]).unwrap())
                .settings
                .default_notify
                .is_empty()
        );
        for bad in [
            r#"[{"webhook": {"urlSecretKey": "url"}}]"#,
            r#"[{"webhook": {"urlSecretKey": "u", "format": "slack"}}, {"webhook": {"urlSecretKey": "u", "format": "slack"}}]"#,
            r#"[{"webhook": {"urlSecretKey": "u", "format": "slack", "url": "https://x"}}]"#,
            "not json",
        ] {
            let err = parse(&["--default-notify", bad])
                .expect_err(bad)
                .to_string();
            assert!(
                err.contains("--default-notify")
                    || err.contains("unknown field")
                    || err.contains("expected"),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn notification_allowances_are_cidrs() {
        let config = ControllerConfig::from(
            parse(&[
                "--notify-allow-cidr",
                "127.0.0.0/8",
                "--notify-allow-cidr",
                "10.1.2.3",
                "--notify-allow-cidr",
                "fd00::1/8",
            ])
            .unwrap(),
        );
        let allowed: Vec<String> = config
            .settings
            .notify_allow
            .iter()
            .map(|n| n.to_string())
            .collect();
        assert_eq!(allowed, ["127.0.0.0/8", "10.1.2.3/32", "fd00::/8"]);
        let config = ControllerConfig::from(parse(&[]).unwrap());
        assert!(config.settings.notify_allow.is_empty());
        for bad in ["loopback", "10.0.0.0/33", ""] {
            let err = parse(&["--notify-allow-cidr", bad]).err().unwrap();
            assert!(
                err.to_string().contains("--notify-allow-cidr"),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn duration_flags_take_the_bundle_syntax() {
        let args = parse(&["--bundle-validity", "7d", "--checkpoint-interval", "1h30m"]).unwrap();
        assert_eq!(args.bundle_validity, SignedDuration::from_hours(7 * 24));
        assert_eq!(args.checkpoint_interval, SignedDuration::from_mins(90));
        assert_eq!(
            parse(&[]).unwrap().checkpoint_interval,
            SignedDuration::from_mins(10)
        );
        assert!(parse(&["--lease-duration", "0s"]).is_err());
        assert!(parse(&["--approval-sync-interval", "soon"]).is_err());
    }

    #[test]
    fn archiving_is_off_unless_asked_for_and_needs_a_directory() {
        let config = ControllerConfig::from(parse(&[]).unwrap());
        assert_eq!(config.archive, None);
        let config = ControllerConfig::from(
            parse(&[
                "--archive-after",
                "30d",
                "--archive-dir",
                "/var/lib/archive",
            ])
            .unwrap(),
        );
        assert_eq!(
            config.archive,
            Some(ArchiveSchedule {
                after: SignedDuration::from_hours(30 * 24),
                dir: PathBuf::from("/var/lib/archive"),
                interval: Duration::from_secs(3600),
            })
        );
        let config = ControllerConfig::from(
            parse(&[
                "--archive-after",
                "2s",
                "--archive-dir",
                "a",
                "--archive-interval",
                "500ms",
            ])
            .unwrap(),
        );
        let schedule = config.archive.unwrap();
        assert_eq!(schedule.after, SignedDuration::from_secs(2));
        assert_eq!(schedule.interval, Duration::from_millis(500));
        // Each without the other is a usage error naming the missing flag.
        let err = parse(&["--archive-after", "30d"]).err().unwrap();
        assert_eq!(err.kind(), clap::error::ErrorKind::MissingRequiredArgument);
        assert!(err.to_string().contains("--archive-dir"), "{err}");
        let err = parse(&["--archive-dir", "a"]).err().unwrap();
        assert!(err.to_string().contains("--archive-after"), "{err}");
        for bad in ["0s", "-1d", "monthly"] {
            assert!(
                parse(&["--archive-after", bad, "--archive-dir", "a"]).is_err(),
                "{bad}"
            );
            assert!(parse(&["--archive-interval", bad]).is_err(), "{bad}");
        }
    }

    #[test]
    fn flags_build_the_settings() {
        let config = ControllerConfig::from(parse(&[]).unwrap());
        assert_eq!(config.database_url, "sqlite::memory:");
        assert_eq!(config.metrics_listen, "0.0.0.0:8080".parse().unwrap());
        assert_eq!(config.lease_duration, Duration::from_secs(15));
        assert_eq!(config.approval_sync_interval, Duration::from_secs(5));
        assert_eq!(config.checkpoint_interval, Some(Duration::from_secs(600)));
        assert_eq!(
            config.settings.bundle_validity,
            SignedDuration::from_hours(24)
        );
        assert_eq!(
            config.settings.approvals,
            crate::approval::Placement::per_tenant(&config.settings.namespace)
        );
        assert_eq!(
            config.settings.tenant_secret.as_deref(),
            Some(crate::tenancy::DATABASE_SECRET)
        );
        let config = ControllerConfig::from(
            parse(&[
                "--namespace",
                "ops",
                "--approvals-namespace",
                "queue",
                "--identity",
                "me",
                "--no-tenant-provisioning",
                "--no-checkpoints",
                "--tenant-database-url",
                "postgres://db/toolgate",
            ])
            .unwrap(),
        );
        assert_eq!(config.settings.namespace, "ops");
        assert_eq!(
            config.settings.approvals,
            crate::approval::Placement::central("queue")
        );
        assert_eq!(config.identity, "me");
        assert_eq!(config.settings.tenant_secret, None);
        assert_eq!(config.checkpoint_interval, None);
        assert_eq!(
            config.settings.tenant_base_url.as_deref(),
            Some("postgres://db/toolgate")
        );
    }

    #[test]
    fn approvals_move_from_the_old_queue_unless_told_otherwise() {
        let per_tenant = |extra: &[&str]| ControllerConfig::from(parse(extra).unwrap()).settings;
        let s = per_tenant(&["--namespace", "ops"]);
        assert_eq!(s.approvals.central, None);
        assert_eq!(s.approvals.migrate_from.as_deref(), Some("ops"));
        let s = per_tenant(&["--migrate-approvals-from", "old-queue"]);
        assert_eq!(s.approvals.migrate_from.as_deref(), Some("old-queue"));
        let s = per_tenant(&["--migrate-approvals-from", "none"]);
        assert_eq!(s.approvals.migrate_from, None);
        // A central queue can migrate from an earlier one too.
        let s = per_tenant(&[
            "--approvals-namespace",
            "q2",
            "--migrate-approvals-from",
            "q1",
        ]);
        assert_eq!(s.approvals.home("team-a"), "q2");
        assert!(s.approvals.honours("q1", "team-a"));
        for bad in [
            ["--approvals-namespace", "Not_A_Namespace"],
            ["--migrate-approvals-from", "a.b"],
        ] {
            assert!(parse(&bad).is_err(), "{bad:?}");
        }
    }
}
