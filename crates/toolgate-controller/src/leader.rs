//! Leader election through a `coordination.k8s.io/v1` Lease.
//!
//! Only the replica holding Lease `toolgate-controller-leader` (in the
//! controller's namespace) runs reconcilers. Acquiring and renewing are
//! resourceVersion-guarded replaces: if two replicas race, the API server
//! accepts one write and answers 409 to the other, which stays a follower.
//! A leader that cannot renew for a whole lease duration stops (the process
//! exits and restarts as a follower) rather than risk two writers.

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, ObjectMeta, PostParams};

use crate::error::ControllerError;

/// Name of the Lease.
pub const LEASE_NAME: &str = "toolgate-controller-leader";

/// What to do with the Lease, given its current spec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseAction {
    /// Nobody holds it (or the holder's lease ran out): take it.
    Acquire,
    /// We hold it: renew.
    Renew,
    /// Someone else holds a live lease.
    Follow {
        /// Current holder.
        holder: String,
    },
}

/// Decides from the Lease spec alone (pure).
pub fn decide(spec: Option<&LeaseSpec>, identity: &str, now: Timestamp) -> LeaseAction {
    let Some(spec) = spec else {
        return LeaseAction::Acquire;
    };
    let holder = spec.holder_identity.as_deref().unwrap_or("");
    if holder == identity {
        return LeaseAction::Renew;
    }
    if holder.is_empty() {
        return LeaseAction::Acquire;
    }
    let duration = SignedDuration::from_secs(i64::from(spec.lease_duration_seconds.unwrap_or(15)));
    match spec.renew_time.as_ref().or(spec.acquire_time.as_ref()) {
        Some(MicroTime(renewed)) if *renewed + duration > now => LeaseAction::Follow {
            holder: holder.to_owned(),
        },
        _ => LeaseAction::Acquire,
    }
}

/// Campaigns for and keeps the Lease.
#[derive(Clone)]
pub struct LeaderElector {
    api: Api<Lease>,
    identity: String,
    lease_duration: Duration,
}

impl LeaderElector {
    /// An elector for `identity` (e.g. the pod name) in `namespace`.
    pub fn new(
        client: kube::Client,
        namespace: &str,
        identity: impl Into<String>,
        lease_duration: Duration,
    ) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            identity: identity.into(),
            lease_duration,
        }
    }

    /// This replica's identity.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// How long a lease lasts without renewal.
    pub fn lease_duration(&self) -> Duration {
        self.lease_duration
    }

    /// One attempt: returns whether this replica leads afterwards.
    pub async fn try_acquire_or_renew(&self) -> Result<bool, ControllerError> {
        let now = Timestamp::now();
        let current = self.api.get_opt(LEASE_NAME).await?;
        let action = decide(
            current.as_ref().and_then(|l| l.spec.as_ref()),
            &self.identity,
            now,
        );
        let seconds = i32::try_from(self.lease_duration.as_secs()).unwrap_or(15);
        let result = match (action, current) {
            (LeaseAction::Follow { holder }, _) => {
                tracing::debug!(%holder, "lease held by another replica");
                return Ok(false);
            }
            (_, None) => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(LEASE_NAME.into()),
                        ..Default::default()
                    },
                    spec: Some(LeaseSpec {
                        holder_identity: Some(self.identity.clone()),
                        lease_duration_seconds: Some(seconds),
                        acquire_time: Some(MicroTime(now)),
                        renew_time: Some(MicroTime(now)),
                        lease_transitions: Some(0),
                        ..Default::default()
                    }),
                };
                self.api
                    .create(&PostParams::default(), &lease)
                    .await
                    .map(|_| ())
            }
            (action, Some(mut lease)) => {
                // The fetched resourceVersion stays in metadata: the replace
                // only succeeds if nobody wrote in between.
                let spec = lease.spec.get_or_insert_with(Default::default);
                if action == LeaseAction::Acquire {
                    spec.holder_identity = Some(self.identity.clone());
                    spec.acquire_time = Some(MicroTime(now));
                    spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
                }
                spec.lease_duration_seconds = Some(seconds);
                spec.renew_time = Some(MicroTime(now));
                self.api
                    .replace(LEASE_NAME, &PostParams::default(), &lease)
                    .await
                    .map(|_| ())
            }
        };
        match result {
            Ok(()) => Ok(true),
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// Waits until this replica leads, retrying every `retry`.
    pub async fn acquire(&self, retry: Duration) -> Result<(), ControllerError> {
        loop {
            match self.try_acquire_or_renew().await {
                Ok(true) => {
                    tracing::info!(identity = %self.identity, "acquired leader lease");
                    return Ok(());
                }
                Ok(false) => {}
                Err(e) => tracing::warn!(error = %e, "leader election attempt failed"),
            }
            tokio::time::sleep(retry).await;
        }
    }

    /// Renews every `renew` until renewal has failed for a whole lease
    /// duration (or another replica took over); then returns the error.
    pub async fn keep(&self, renew: Duration) -> ControllerError {
        let mut last_ok = std::time::Instant::now();
        loop {
            tokio::time::sleep(renew).await;
            match self.try_acquire_or_renew().await {
                Ok(true) => last_ok = std::time::Instant::now(),
                Ok(false) => {
                    return ControllerError::Leader("another replica holds the lease".into());
                }
                Err(e) => {
                    tracing::warn!(error = %e, "lease renewal failed");
                    if last_ok.elapsed() >= self.lease_duration {
                        return ControllerError::Leader(format!("could not renew the lease: {e}"));
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(holder: &str, renewed: Timestamp) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(holder.into()),
            lease_duration_seconds: Some(15),
            renew_time: Some(MicroTime(renewed)),
            ..Default::default()
        }
    }

    #[test]
    fn decides_from_holder_and_age() {
        let now: Timestamp = "2030-01-01T00:00:30Z".parse().unwrap();
        assert_eq!(decide(None, "a", now), LeaseAction::Acquire);
        assert_eq!(decide(Some(&spec("a", now)), "a", now), LeaseAction::Renew);
        assert_eq!(
            decide(
                Some(&spec("b", now - SignedDuration::from_secs(5))),
                "a",
                now
            ),
            LeaseAction::Follow { holder: "b".into() }
        );
        assert_eq!(
            decide(
                Some(&spec("b", now - SignedDuration::from_secs(16))),
                "a",
                now
            ),
            LeaseAction::Acquire
        );
        assert_eq!(decide(Some(&spec("", now)), "a", now), LeaseAction::Acquire);
    }
}
