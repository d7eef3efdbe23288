//! The PolicyProfile reconcile itself: the Kubernetes and database I/O
//! around the pure planning ([`super::plan`]) and status ([`super::status`])
//! functions. Every bundle, new or re-signed, goes out through [`publish`].

use std::sync::Arc;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::runtime::finalizer::{Event as Finalizer, finalizer};
use kube::{Resource, ResourceExt};
use toolgate_bundle::{BundleDocument, BundleInput, ProfileRef, TrustSet};
use toolgate_policy::{Grant, PolicyError, PolicySpec, PolicyVersion};
use toolgate_store::ProfileLoad;

use super::candidate::{self, Candidate, Resolved};
use super::{
    BundlePlan, FINALIZER, LastGoodRejection, PublishReason, Published, PublishedBundle, Serving,
    Shadowing, active_grants, approvers_of, bundle_configmap, configmap_name, invalid_status,
    last_good, plan_bundle, ready_status, rejection_message, usable_grants,
};
use crate::context::Context;
use crate::crd::{Approval, ConditionType, PolicyProfile};
use crate::error::ControllerError;

fn to_std(d: SignedDuration) -> Duration {
    Duration::try_from(d)
        .unwrap_or(Duration::ZERO)
        .max(Duration::from_secs(1))
}

fn ns_and_name(p: &PolicyProfile) -> Result<(String, String), ControllerError> {
    let ns = p
        .namespace()
        .ok_or_else(|| ControllerError::InvalidObject("PolicyProfile without namespace".into()))?;
    Ok((ns, p.name_any()))
}

/// Reconciles one PolicyProfile (the `Controller`'s reconcile fn): adds the
/// finalizer, then applies or cleans up.
pub async fn reconcile(
    profile: Arc<PolicyProfile>,
    ctx: Arc<Context>,
) -> Result<Action, ControllerError> {
    let timer = ctx.metrics.start("policyprofile");
    let (ns, name) = ns_and_name(&profile)?;
    let span = tracing::info_span!("reconcile", controller = "policyprofile", namespace = %ns, profile = %name);
    let api: Api<PolicyProfile> = Api::namespaced(ctx.client.clone(), &ns);
    let traced_span = crate::trace::reconcile("PolicyProfile", &ns, &name);
    let work = tracing::Instrument::instrument(
        async {
            finalizer(&api, FINALIZER, profile, |event| async {
                match event {
                    Finalizer::Apply(p) => apply(&p, &ctx).await,
                    Finalizer::Cleanup(p) => cleanup(&p, &ctx).await,
                }
            })
            .await
            .map_err(ControllerError::from)
        },
        span,
    );
    let result = crate::trace::traced(traced_span, work).await;
    timer.finish(&result);
    result
}

/// What the Controller does after a failed reconcile: log and retry soon.
pub fn error_policy(
    profile: Arc<PolicyProfile>,
    error: &ControllerError,
    _ctx: Arc<Context>,
) -> Action {
    tracing::warn!(profile = %profile.name_any(), code = error.code(), %error, "reconcile failed");
    Action::requeue(Duration::from_secs(15))
}

/// An Event about `profile`.
async fn note(
    ctx: &Context,
    profile: &PolicyProfile,
    type_: EventType,
    reason: &str,
    action: &str,
    note: String,
) {
    ctx.event(&profile.object_ref(&()), type_, reason, action, note)
        .await;
}

/// Builds `input` (with `candidate` as the section it shadows), signs it,
/// applies it as the profile's bundle ConfigMap and records its version in
/// the store: the one way a bundle is published.
async fn publish(
    profile: &PolicyProfile,
    ctx: &Context,
    input: BundleInput,
    candidate: Option<&Candidate>,
) -> Result<(PublishedBundle, BundleDocument), ControllerError> {
    let span = crate::trace::pass("toolgate.bundle.publish");
    crate::trace::traced(span, publish_signed(profile, ctx, input, candidate)).await
}

async fn publish_signed(
    profile: &PolicyProfile,
    ctx: &Context,
    input: BundleInput,
    candidate: Option<&Candidate>,
) -> Result<(PublishedBundle, BundleDocument), ControllerError> {
    let (ns, name) = ns_and_name(profile)?;
    let version = PolicyVersion::compute(&name, &input.spec, &input.grants);
    let mut doc = BundleDocument::new(input)?;
    if let Some(c) = candidate {
        doc = doc.with_candidate(&c.name, c.spec.clone())?;
    }
    let (doc, bytes) = toolgate_bundle::sign(doc, &ctx.key)?;
    let cm = bundle_configmap(profile, &doc, &bytes, &ctx.key.key_id())?;
    let cms: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &ns);
    cms.patch(
        &configmap_name(&name),
        &PatchParams::apply(crate::MANAGER).force(),
        &Patch::Apply(&cm),
    )
    .await?;
    let current = PublishedBundle::from_document(&doc);
    record_load(ctx, &ns, &name, &version, &current).await?;
    Ok((current, doc))
}

/// Makes the namespace's `toolgate-trust` list the signing key, once per
/// namespace and process.
async fn ensure_trust(ctx: &Context, ns: &str) -> Result<(), ControllerError> {
    if !ctx.is_trusted(ns) {
        crate::keys::ensure_trust(&ctx.client, ns, &ctx.key).await?;
        ctx.mark_trusted(ns);
    }
    Ok(())
}

async fn reject(
    profile: &PolicyProfile,
    ctx: &Context,
    err: PolicyError,
) -> Result<Action, ControllerError> {
    let (ns, name) = ns_and_name(profile)?;
    let now = ctx.now();
    let generation = profile.metadata.generation;
    let previous = profile.status.clone().unwrap_or_default();
    tracing::warn!(code = err.code(), field = ?err.field(), "spec rejected");

    let cms: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &ns);
    let cm = cms.get_opt(&configmap_name(&name)).await?;
    let trust = TrustSet::from_keys([ctx.key.public_key()])?;
    let (served, rejection) = match last_good(cm.as_ref(), &trust, &ns, &name, &previous) {
        Ok(doc) => {
            let current = PublishedBundle::from_document(&doc);
            let plan = plan_bundle(
                Some(&current),
                previous.sequence,
                &current.version,
                current.candidate.as_deref(),
                now,
                ctx.settings.bundle_validity,
            );
            let served = match plan {
                BundlePlan::Publish {
                    sequence,
                    issued_at,
                    expires_at,
                    ..
                } => resign_last_good(profile, ctx, doc, sequence, issued_at, expires_at).await?,
                BundlePlan::Keep(kept) => (kept, doc.grants.len()),
            };
            (Some(served), None)
        }
        Err(rejection) => (None, Some(rejection)),
    };
    let serving = match (&served, &rejection) {
        (Some((bundle, grants)), _) => Serving::LastGood {
            bundle,
            grants: *grants,
        },
        (None, Some(LastGoodRejection::Missing)) => Serving::Nothing {
            reason: "NoValidBundle",
            message: format!("ConfigMap {} holds no bundle", configmap_name(&name)),
        },
        (None, r) => Serving::Nothing {
            reason: "LastGoodUnusable",
            message: format!(
                "not re-signing ConfigMap {}: {}",
                configmap_name(&name),
                r.as_ref().map(ToString::to_string).unwrap_or_default()
            ),
        },
    };
    let status = invalid_status(&previous, &err, &serving, generation, now);

    // One InvalidSpec event per rejected generation/message, not one per re-sign.
    let valid_before = previous.condition(ConditionType::Valid);
    let newly_rejected = previous.observed_generation != generation
        || valid_before.is_none_or(|c| {
            c.status != "False" || c.reason != "InvalidSpec" || c.message != rejection_message(&err)
        });
    if newly_rejected {
        let message = rejection_message(&err);
        note(
            ctx,
            profile,
            EventType::Warning,
            "InvalidSpec",
            "Validate",
            message,
        )
        .await;
    }
    if let Some(r) = rejection
        .as_ref()
        .filter(|r| **r != LastGoodRejection::Missing)
        && status != previous
    {
        tracing::warn!(reason = %r, "last good bundle not re-signed");
        let message = format!("not re-signing {}: {r}", configmap_name(&name));
        note(
            ctx,
            profile,
            EventType::Warning,
            "LastGoodRejected",
            "Resign",
            message,
        )
        .await;
    }
    ctx.metrics.observe_profile(&ns, &name, &status);
    if status != previous {
        ctx.apply_status(profile, &status).await?;
    }
    match &served {
        // Come back when the served bundle needs re-signing, spec change or not.
        Some((bundle, _)) => Ok(Action::requeue(to_std(
            bundle.resign_at().duration_since(now),
        ))),
        // Nothing to keep fresh: wait for the spec (or the ConfigMap) to change.
        None => Ok(Action::await_change()),
    }
}

/// Re-signs the verified last good document `doc` as `sequence`, keeping
/// only its grants that are still active, and publishes it. Returns the new
/// bundle and its number of grants.
async fn resign_last_good(
    profile: &PolicyProfile,
    ctx: &Context,
    doc: BundleDocument,
    sequence: u64,
    issued_at: Timestamp,
    expires_at: Timestamp,
) -> Result<(PublishedBundle, usize), ControllerError> {
    let (ns, name) = ns_and_name(profile)?;
    let approvals: Api<Approval> = Api::namespaced(ctx.client.clone(), &ns);
    let list = approvals.list(&ListParams::default()).await?;
    let (active, _) = active_grants(&list.items, &name, approvers_of(profile), issued_at);
    let carried = doc.grants.len();
    let grants: Vec<Grant> = doc
        .grants
        .into_iter()
        .filter(|g| active.contains(g))
        .collect();
    let dropped = carried - grants.len();
    // The candidate as verified, compiled again with the grants kept.
    let shadowed = doc
        .candidate
        .map(|c| candidate::compile(&c.name, c.spec, &grants));

    ensure_trust(ctx, &ns).await?;
    let input = BundleInput {
        profile: doc.profile,
        spec: doc.spec,
        grants,
        sequence,
        issued_at,
        expires_at,
    };
    let signed = shadowed.as_ref().and_then(Resolved::signed);
    let (current, new_doc) = publish(profile, ctx, input, signed).await?;
    tracing::info!(version = %current.version, sequence, dropped, "re-signed last good bundle");
    let dropped_text = if dropped > 0 {
        format!("; {dropped} expired or withdrawn grant(s) dropped")
    } else {
        String::new()
    };
    let message = format!(
        "spec is invalid: re-signed last good {} as sequence {} (expires {}){dropped_text}",
        current.version, sequence, current.expires_at
    );
    note(
        ctx,
        profile,
        EventType::Normal,
        "Resigned",
        "Publish",
        message,
    )
    .await;
    Ok((current, new_doc.grants.len()))
}

async fn apply(profile: &PolicyProfile, ctx: &Context) -> Result<Action, ControllerError> {
    let (ns, name) = ns_and_name(profile)?;
    let now = ctx.now();
    let mut spec: PolicySpec = profile.spec.clone().into();
    let compiled = match toolgate_k8s::validate_profile(&name, &spec) {
        Ok(compiled) => compiled,
        Err(err) => return reject(profile, ctx, err).await,
    };
    // Signed as the bundle's candidate section, never as part of its spec.
    let candidate_ref = spec.candidate.take();

    let approvals: Api<Approval> = Api::namespaced(ctx.client.clone(), &ns);
    let list = approvals.list(&ListParams::default()).await?;
    let (grants, next_grant_expiry) = active_grants(&list.items, &name, approvers_of(profile), now);
    let (grants, rejected) = usable_grants(&name, &spec, grants);
    for (grant, err) in &rejected {
        let message = format!(
            "grant for {} `{}` ignored: {}",
            grant.tool,
            grant.glob,
            rejection_message(err)
        );
        note(
            ctx,
            profile,
            EventType::Warning,
            "GrantRejected",
            "Compile",
            message,
        )
        .await;
    }
    let version = PolicyVersion::compute(&name, &spec, &grants);
    let resolved = match &candidate_ref {
        Some(r) => Some(candidate::resolve(ctx, &ns, &r.profile, &grants).await?),
        None => None,
    };
    let signed = resolved.as_ref().and_then(Resolved::signed);

    ensure_trust(ctx, &ns).await?;
    crate::tenancy::ensure_database_secret(ctx, &ns, &profile.object_ref(&())).await?;

    let cms: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &ns);
    let published = cms
        .get_opt(&configmap_name(&name))
        .await?
        .as_ref()
        .and_then(PublishedBundle::from_configmap);
    let previous = profile.status.clone().unwrap_or_default();
    // Analysed once per generation.
    let warnings = if previous.observed_generation == profile.metadata.generation
        && previous
            .condition(ConditionType::Valid)
            .is_some_and(|c| c.status == "True")
    {
        previous.warnings.clone()
    } else {
        super::analysis::warnings(compiled).await
    };
    let plan = plan_bundle(
        published.as_ref(),
        previous.sequence,
        &version.version,
        signed.map(|c| c.version.as_str()),
        now,
        ctx.settings.bundle_validity,
    );
    let current = match plan {
        BundlePlan::Publish {
            sequence,
            issued_at,
            expires_at,
            reason,
        } => {
            let input = BundleInput {
                profile: ProfileRef {
                    name: name.clone(),
                    namespace: Some(ns.clone()),
                },
                spec,
                grants: grants.clone(),
                sequence,
                issued_at,
                expires_at,
            };
            let (current, _) = publish(profile, ctx, input, signed).await?;
            let (reason, message) = match reason {
                PublishReason::Refresh => (
                    "Resigned",
                    format!(
                        "re-signed {} as sequence {} (expires {})",
                        current.version, sequence, current.expires_at
                    ),
                ),
                _ => (
                    "Published",
                    format!(
                        "published {} as sequence {} with {} grant(s){}",
                        current.version,
                        sequence,
                        grants.len(),
                        signed
                            .map(|c| format!(", shadowing candidate {}", c.version))
                            .unwrap_or_default()
                    ),
                ),
            };
            tracing::info!(version = %current.version, sequence, "bundle published");
            note(ctx, profile, EventType::Normal, reason, "Publish", message).await;
            current
        }
        BundlePlan::Keep(current) => {
            if previous.version.as_deref() != Some(current.version.as_str()) {
                // A previous attempt published but did not finish; recording is idempotent.
                record_load(ctx, &ns, &name, &version, &current).await?;
            }
            current
        }
    };

    // Only this namespace's pods, each row read on its own: a heartbeat a
    // tenant wrote that does not read back leaves this fleet short of one
    // pod rather than failing the reconcile (and, read across namespaces,
    // every profile of the same name).
    let listing = ctx
        .store
        .heartbeats()
        .list_profile_heartbeats(&ns, &name)
        .await?;
    for bad in &listing.unreadable {
        let pod = bad.pod_name.as_deref().unwrap_or("?");
        if ctx.first_unreadable("fleet", &format!("{ns}/{pod}")) {
            tracing::warn!(pod = %pod, error = %bad.error, "a sidecar heartbeat does not read back from the database: not counted in the fleet");
        }
    }
    let heartbeats = crate::fleet::of_profile(listing.heartbeats, &ns, &name);
    let window = ctx.settings.fleet_window;
    let fleet = crate::fleet::count(&heartbeats, Some(&current.version), now, window);
    let stale_pods = crate::fleet::stale_pods(&heartbeats, Some(&current.version), now, window);
    let status = ready_status(
        &previous,
        &name,
        &Published {
            bundle: &current,
            grants: grants.len(),
            fleet,
            stale_pods,
            warnings,
            shadowing: resolved.map(|r| match r {
                Resolved::Signed(c) => Shadowing::Signed(candidate::throttled(
                    previous.candidate.as_ref(),
                    crate::fleet::candidate_status(
                        &heartbeats,
                        &current.version,
                        &c.name,
                        &c.version,
                    ),
                    now,
                    ctx.settings.fleet_refresh,
                )),
                Resolved::Unsigned(s) => s,
            }),
        },
        profile.metadata.generation,
        now,
    );
    ctx.metrics.observe_profile(&ns, &name, &status);
    if status != previous {
        ctx.apply_status(profile, &status).await?;
    }

    let mut wake = current
        .resign_at()
        .duration_since(now)
        .min(ctx.settings.fleet_refresh);
    if let Some(expiry) = next_grant_expiry {
        wake = wake.min(expiry.duration_since(now));
    }
    Ok(Action::requeue(to_std(wake)))
}

async fn record_load(
    ctx: &Context,
    ns: &str,
    name: &str,
    version: &PolicyVersion,
    current: &PublishedBundle,
) -> Result<(), ControllerError> {
    ctx.store
        .profiles()
        .record_profile_load(
            ProfileLoad {
                profile: name.to_owned(),
                namespace: ns.to_owned(),
                policy_version: version.version.clone(),
                spec_sha256: version.spec_sha256.clone(),
                hardline_sha256: version.hardline_sha256.clone(),
                bundle_digest: Some(current.digest.clone()),
                loaded_by: crate::MANAGER.to_owned(),
            },
            ctx.now(),
        )
        .await?;
    Ok(())
}

async fn cleanup(profile: &PolicyProfile, ctx: &Context) -> Result<Action, ControllerError> {
    let (ns, name) = ns_and_name(profile)?;
    let cms: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &ns);
    match cms
        .delete(&configmap_name(&name), &Default::default())
        .await
    {
        Ok(_) => tracing::info!("deleted bundle ConfigMap"),
        Err(kube::Error::Api(e)) if e.code == 404 => {}
        Err(e) => return Err(e.into()),
    }
    ctx.metrics.forget_profile(&ns, &name);
    let message = format!("removed ConfigMap {}", configmap_name(&name));
    note(
        ctx,
        profile,
        EventType::Normal,
        "Deleted",
        "Cleanup",
        message,
    )
    .await;
    Ok(Action::await_change())
}
