//! The sidecar's own connections (MCP upstreams) judged by the gate: the
//! URL before a request is sent, and every address a name resolves to when
//! it is connected, both against the live bundle — one liveness rule, so the
//! two checks cannot disagree once a bundle has expired.

use std::net::IpAddr;
use std::sync::Arc;

use jiff::Timestamp;
use toolgate_policy::Reason;

use crate::policy_state::{Enforced, PolicyState};

/// Why the sidecar may not connect where it was asked to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum EgressRefusal {
    /// No bundle is live: nothing is reached (fail closed).
    #[error("no live policy bundle to check the destination with")]
    NoLiveBundle,
    /// The live bundle's egress rules refuse the URL.
    #[error("{}", .0.as_str())]
    Policy(Reason),
}

/// Judges the sidecar's outgoing connections; cheap to clone into a
/// resolver.
#[derive(Clone)]
pub struct EgressGuard {
    policy: Arc<PolicyState>,
}

impl EgressGuard {
    pub(crate) fn new(policy: Arc<PolicyState>) -> Self {
        Self { policy }
    }

    fn live(&self, now: Timestamp) -> Option<Arc<Enforced>> {
        self.policy.live(now)
    }

    /// Why `url` may not be reached at `now`; `None`: it may.
    pub fn url_refusal(&self, url: &str, now: Timestamp) -> Option<EgressRefusal> {
        match self.live(now) {
            Some(e) => e.policy.egress_refusal(url).map(EgressRefusal::Policy),
            None => Some(EgressRefusal::NoLiveBundle),
        }
    }

    /// Whether `ip` may be connected to at `now`: not in the live bundle's
    /// hardline CIDRs, and a bundle is live at all.
    pub fn address_allowed(&self, ip: IpAddr, now: Timestamp) -> bool {
        self.live(now)
            .is_some_and(|e| !e.policy.refuses_address(ip))
    }
}

impl std::fmt::Debug for EgressGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("EgressGuard")
    }
}

#[cfg(test)]
mod tests {
    use jiff::SignedDuration;
    use toolgate_bundle::{BundleInput, ProfileRef, SigningKey};

    use super::*;
    use crate::Metrics;

    const SPEC: &str = r#"
mode: rules
rules:
  fetch: {allow: ["*"]}
hardline: {cidrs: ["169.254.0.0/16", "127.0.0.0/8"]}
effects:
  fetch: {sideEffect: NETWORK_READ, risk: low}
"#;

    /// A guard over a profile whose hardline holds the link-local and
    /// loopback ranges, signed to be live from `now` for one hour.
    fn guard(now: Timestamp) -> EgressGuard {
        let key = SigningKey::from_seed(&[7; 32]);
        let spec = toolgate_policy::load::from_str(SPEC).unwrap();
        let (_, bundle) = toolgate_bundle::build(
            BundleInput {
                profile: ProfileRef {
                    name: "egress".into(),
                    namespace: Some("agents".into()),
                },
                spec,
                grants: vec![],
                sequence: 1,
                issued_at: now - SignedDuration::from_secs(5),
                expires_at: now + SignedDuration::from_hours(1),
            },
            &key,
        )
        .unwrap();
        let trust = key.public_key().to_spki_pem().unwrap();
        let policy = Arc::new(PolicyState::new(Metrics::new()));
        policy.load_bytes(&bundle, trust.as_bytes(), now);
        assert!(policy.live(now).is_some(), "the test bundle loads");
        EgressGuard::new(policy)
    }

    #[test]
    fn urls_and_addresses_follow_the_live_bundle() {
        let now = Timestamp::now();
        let egress = guard(now);
        let metadata: IpAddr = "169.254.169.254".parse().unwrap();
        let public: IpAddr = "93.184.216.34".parse().unwrap();
        assert!(matches!(
            egress.url_refusal("http://169.254.169.254/latest", now),
            Some(EgressRefusal::Policy(_))
        ));
        assert!(!egress.address_allowed(metadata, now));
        assert!(egress.address_allowed(public, now));
    }

    /// The one liveness rule: once the bundle has expired, neither a URL nor
    /// any address passes — the two checks cannot disagree.
    #[test]
    fn an_expired_bundle_lets_nothing_through_either_check() {
        let now = Timestamp::now();
        let egress = guard(now);
        let later = now + SignedDuration::from_hours(2);
        let public: IpAddr = "93.184.216.34".parse().unwrap();
        assert_eq!(
            egress.url_refusal("https://example.com/", later),
            Some(EgressRefusal::NoLiveBundle)
        );
        assert!(!egress.address_allowed(public, later));
        let empty = EgressGuard::new(Arc::new(PolicyState::new(Metrics::new())));
        assert_eq!(
            empty.url_refusal("https://example.com/", now),
            Some(EgressRefusal::NoLiveBundle)
        );
        assert!(!empty.address_allowed(public, now));
    }
}
