//! Approval notifications, delivered by the leader: every `approval.*`
//! event of the store (written in the transaction of the change it
//! describes) goes to each channel of the profile the approval belongs to
//! (`spec.approvals.notify`), at least once. What was delivered is
//! remembered per (channel, event) in the database, so a restart or a new
//! leader sends only what is left; a receiver that fails is retried with
//! exponential backoff (at most five minutes apart) until it answers 2xx
//! or the event is older than the retention.
//!
//! Each channel's URL and signing secret are keys of the Secret
//! `toolgate-notify` in the profile's namespace (for the cluster's default
//! channels, in the controller's): the controller reads that Secret by
//! name and no other (its RBAC names it).
//!
//! Where a URL may lead is checked at connect time ([`destination`]):
//! loopback, link-local, cloud metadata and the profile's hardline CIDRs
//! are refused unless the operator allows the range
//! (`--notify-allow-cidr`).

mod destination;
mod message;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::Secret;
use kube::{Api, ResourceExt};
use serde_json::{Value, json};
use toolgate_contract::names::NOTIFY_SECRET;
use toolgate_policy::NotifyFormat;
use toolgate_store::ApprovalEvent;

pub use destination::{Destinations, REFUSED};
pub use message::{Notice, Outgoing, decode_secret, kind_of, render, sign};

use crate::context::Context;
use crate::crd::PolicyProfile;
use crate::error::ControllerError;

/// Events read per page.
const PAGE: u32 = 500;
/// Longest wait between two attempts at one delivery.
const MAX_BACKOFF: Duration = Duration::from_secs(300);

/// One channel of one profile, its Secret keys resolved.
struct Channel {
    /// What its deliveries are remembered under: namespace, profile,
    /// format and URL key (so reordering a profile's list sends nothing
    /// twice); for a cluster default channel, `cluster/` with format and
    /// URL key, one for every profile it serves.
    key: String,
    format: NotifyFormat,
    url: String,
    secret: Option<Vec<u8>>,
    /// Where its URL may lead: the profile's rule.
    rule: Destinations,
}

/// What one pass did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct NotifyReport {
    /// Deliveries a receiver accepted.
    pub delivered: u64,
    /// Attempts that failed (to be retried).
    pub failed: u64,
    /// Deliveries waiting for their next attempt or for their channel's
    /// Secret.
    pub waiting: u64,
}

/// The profile an approval's policy version names (`NAME@…`).
fn profile_of(policy_version: &str) -> &str {
    policy_version.split('@').next().unwrap_or(policy_version)
}

/// The channels of every profile, by (namespace, profile).
#[derive(Default)]
struct Configured {
    /// Channels whose Secret keys were read.
    ready: HashMap<(String, String), Vec<Channel>>,
    /// Profiles with a channel that cannot be served now (its Secret, key
    /// or signing secret is missing or unusable): their events wait, and
    /// count as undelivered.
    waiting: HashSet<(String, String)>,
}

impl Configured {
    fn serves(&self, namespace: &str) -> bool {
        self.ready
            .keys()
            .chain(&self.waiting)
            .any(|(ns, _)| ns == namespace)
    }
}

/// Every profile's channels with their Secret read. A channel that cannot
/// be served now is logged and its profile marked waiting.
async fn channels(ctx: &Context, profiles: &[Arc<PolicyProfile>]) -> Configured {
    let mut secrets: HashMap<String, Option<Secret>> = HashMap::new();
    let mut out = Configured::default();
    let defaults = &ctx.settings.default_notify;
    for profile in profiles {
        let own = profile
            .spec
            .approvals
            .as_ref()
            .map_or(&[][..], |a| a.notify.as_slice());
        // A profile's own channels, else the cluster's default ones, whose
        // keys live in the controller's namespace.
        let (notify, secret_ns, prefix) = match (own.is_empty(), defaults.is_empty()) {
            (false, _) => (own, None, None),
            (true, false) => (
                defaults.as_slice(),
                Some(ctx.settings.namespace.clone()),
                Some("cluster"),
            ),
            (true, true) => continue,
        };
        let (ns, name) = (profile.namespace().unwrap_or_default(), profile.name_any());
        let rule = Destinations::new(ctx.settings.notify_allow.clone(), Some(profile.clone()));
        let secret_ns = secret_ns.unwrap_or_else(|| ns.clone());
        if !secrets.contains_key(&secret_ns) {
            let api: Api<Secret> = Api::namespaced(ctx.client.clone(), &secret_ns);
            let secret = api.get_opt(NOTIFY_SECRET).await.unwrap_or_else(|e| {
                tracing::warn!(namespace = %secret_ns, error = %e, "notification Secret unreadable");
                None
            });
            secrets.insert(secret_ns.clone(), secret);
        }
        let data = secrets[&secret_ns].as_ref().and_then(|s| s.data.as_ref());
        let value = |key: &str| {
            data.and_then(|d| d.get(key))
                .and_then(|v| String::from_utf8(v.0.clone()).ok())
                .map(|v| v.trim().to_owned())
        };
        for channel in notify {
            let w = &channel.webhook;
            // A default channel is one channel for every profile it serves:
            // its deliveries are remembered under one key.
            let key = match prefix {
                Some(prefix) => format!("{prefix}/{}:{}", w.format.as_str(), w.url_secret_key),
                None => format!("{ns}/{name}/{}:{}", w.format.as_str(), w.url_secret_key),
            };
            let profile_key = (ns.clone(), name.clone());
            let url = value(&w.url_secret_key);
            let secret = w.signing_secret_key.as_ref().map(|k| {
                value(k)
                    .ok_or_else(|| format!("no key {k}"))
                    .and_then(|s| decode_secret(&s))
            });
            let problem = match (&url, &secret) {
                (None, _) => Some(format!("no key {}", w.url_secret_key)),
                (_, Some(Err(e))) => Some(e.clone()),
                // A profile the compiler refused can still be in the cache:
                // a Standard Webhooks message is never sent unsigned.
                (_, None) if w.format == NotifyFormat::Standard => {
                    Some("a standard channel without a signing secret".into())
                }
                _ => None,
            };
            match (problem, url) {
                (None, Some(url)) => out.ready.entry(profile_key).or_default().push(Channel {
                    key,
                    format: w.format,
                    url,
                    secret: secret.and_then(Result::ok),
                    rule: rule.clone(),
                }),
                (problem, _) => {
                    let why = problem.unwrap_or_else(|| "no URL".into());
                    tracing::warn!(channel = %key, "{why} in Secret {NOTIFY_SECRET}: its events wait");
                    out.waiting.insert(profile_key);
                }
            }
        }
    }
    out
}

/// What people are told of `event`: the approval as the store holds it
/// now, and the command that decides it.
async fn notice(
    ctx: &Context,
    event: &ApprovalEvent,
    kind: &'static str,
) -> Option<(String, Notice)> {
    let approval = ctx
        .store
        .approvals()
        .get(&event.tenant, &event.approval_id, ctx.now())
        .await
        .ok()?;
    let payload: Value = serde_json::from_str(&event.payload).unwrap_or(Value::Null);
    let profile = profile_of(&approval.policy_version).to_owned();
    // Why it was escalated, as the Approval object carries it (absent when
    // the decision log does not hold the escalating decision).
    let escalation = crate::approval::escalation_of(&ctx.store, &approval)
        .await
        .ok()
        .flatten();
    let data = json!({
        "approval_id": approval.id,
        "namespace": approval.tenant,
        "profile": profile,
        "tool": approval.tool,
        "action": approval.action,
        "preview": approval.preview,
        "run_id": approval.run_id,
        "requested_by": approval.requested_by,
        "policy_version": approval.policy_version,
        "call_digest": approval.call_digest,
        "status": approval.status.as_str(),
        "created_at": approval.created_at.to_string(),
        "expires_at": approval.expires_at.to_string(),
        "decision": payload.get("decision"),
        "decided_by": approval.resolved_by,
        "reason": approval.reason,
        "escalation": escalation,
        "approve_command": format!(
            "kubectl toolgate approve {} -n {}",
            toolgate_k8s::names::approval_name(&approval.id),
            ctx.settings.approvals.home(&approval.tenant)
        ),
    });
    Some((
        profile,
        Notice {
            id: format!("toolgate-{}", event.id),
            kind,
            occurred_at: event.created_at.as_second(),
            data,
        },
    ))
}

/// Sends one message; `Err` says why it was not accepted.
async fn send(channel: &Channel, notice: &Notice, now: Timestamp) -> Result<(), String> {
    let out = render(
        notice,
        channel.format,
        channel.secret.as_deref(),
        now.as_second(),
    );
    destination::post(&channel.rule, &channel.url, out).await
}

/// Backoff after `attempts` failures: 2 s, 4 s, 8 s, … at most five minutes.
fn backoff(attempts: u32) -> SignedDuration {
    let seconds = 1u64 << attempts.min(9);
    SignedDuration::try_from(Duration::from_secs(seconds).min(MAX_BACKOFF)).unwrap_or_default()
}

/// One pass: every event of the last `retention` that a channel has not
/// accepted and is due is sent; the oldest still waiting sets the gauge.
pub async fn deliver_once(
    ctx: &Context,
    profiles: &[Arc<PolicyProfile>],
    retention: SignedDuration,
) -> Result<NotifyReport, ControllerError> {
    let now = ctx.now();
    // Each step boxed: the kube, store and HTTP futures are large in debug
    // builds, and this pass runs beside the controllers.
    let channels = Box::pin(channels(ctx, profiles)).await;
    let mut report = NotifyReport::default();
    // The oldest event a channel still lacks (failed or waiting).
    let mut oldest: Option<Timestamp> = None;
    let mut lacking = |at: Timestamp| oldest = Some(oldest.map_or(at, |o| o.min(at)));
    let notifications = ctx.store.notifications();
    let since = now.checked_sub(retention).unwrap_or(Timestamp::UNIX_EPOCH);
    // A clock a little ahead of the store's is not an event from the future.
    let until = now.checked_add(SignedDuration::from_mins(5)).unwrap_or(now);
    // A channel that failed is not tried again in this pass: one receiver
    // that never answers must not hold up every other.
    let mut failed_now: HashSet<String> = HashSet::new();
    let mut after = 0;
    loop {
        let events = notifications.events(since, until, after, PAGE).await?;
        let (Some(first), Some(last)) = (events.first(), events.last()) else {
            break;
        };
        let done = notifications.deliveries(first.id, last.id).await?;
        let delivered = |key: &str, id: i64| {
            done.get(&(key.to_owned(), id))
                .is_some_and(|d| d.delivered_at.is_some())
        };
        after = last.id;
        for event in &events {
            let Some(kind) = kind_of(&event.kind) else {
                continue;
            };
            // The approval is read only for a namespace with channels, and
            // only while one of them still lacks this event.
            if !channels.serves(&event.tenant) {
                continue;
            }
            // An event goes to its own profile's channels only, so once
            // some profile of the namespace (served, with channels) has it
            // on every channel, it is that profile's and it is done: a
            // profile's own keys name the profile, and profiles on the
            // cluster's default channels share theirs.
            let sent = channels.ready.iter().any(|(key, list)| {
                key.0 == event.tenant
                    && !list.is_empty()
                    && !channels.waiting.contains(key)
                    && list.iter().all(|c| delivered(&c.key, event.id))
            });
            if sent {
                continue;
            }
            let Some((profile, notice)) = Box::pin(notice(ctx, event, kind)).await else {
                continue;
            };
            let profile_key = (event.tenant.clone(), profile);
            if channels.waiting.contains(&profile_key) {
                report.waiting += 1;
                lacking(event.created_at);
            }
            let Some(targets) = channels.ready.get(&profile_key) else {
                continue;
            };
            for channel in targets {
                if delivered(&channel.key, event.id) {
                    continue;
                }
                let state = done.get(&(channel.key.clone(), event.id));
                if failed_now.contains(&channel.key)
                    || state.is_some_and(|d| d.next_attempt_at > now)
                {
                    report.waiting += 1;
                    lacking(event.created_at);
                    continue;
                }
                let format = channel.format.as_str();
                // Signed as of the moment it is sent: receivers refuse a
                // stale timestamp.
                let sent_at = ctx.now();
                match Box::pin(send(channel, &notice, sent_at)).await {
                    Ok(()) => {
                        notifications
                            .delivered(&channel.key, event.id, sent_at)
                            .await?;
                        ctx.metrics
                            .notifications_delivered
                            .with_label_values(&[format])
                            .inc();
                        report.delivered += 1;
                    }
                    Err(why) => {
                        failed_now.insert(channel.key.clone());
                        let attempts = state.map_or(0, |d| d.attempts).saturating_add(1);
                        let next = sent_at.checked_add(backoff(attempts)).unwrap_or(sent_at);
                        notifications
                            .failed(&channel.key, event.id, &why, next)
                            .await?;
                        ctx.metrics
                            .notification_failures
                            .with_label_values(&[format])
                            .inc();
                        tracing::warn!(channel = %channel.key, event = event.id, attempts, error = %why, "notification not accepted; retrying");
                        report.failed += 1;
                        lacking(event.created_at);
                    }
                }
            }
        }
    }
    let age = oldest.map_or(0, |o| (now - o).get_seconds().max(0));
    ctx.metrics.notifications_oldest_undelivered.set(age);
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_five_minutes() {
        let secs = |n| backoff(n).as_secs();
        assert_eq!((secs(1), secs(2), secs(3)), (2, 4, 8));
        assert_eq!(secs(30), 300);
    }

    #[test]
    fn the_profile_is_the_policy_versions_name() {
        assert_eq!(profile_of("safe-coding@abc+h1"), "safe-coding");
    }
}
