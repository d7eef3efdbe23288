//! The address guard of upstream connections: every name an upstream URL
//! names is resolved here, and addresses in the live profile's hardline
//! CIDRs are dropped before a connection is tried. The URL's text is
//! checked too (`egress_refusal`), but only the address actually connected
//! to tells whether `localhost`, or a name re-bound by DNS, reaches the
//! metadata service or a pod range.

use std::net::SocketAddr;

use reqwest::dns::{Addrs, Name, Resolve, Resolving};

use toolgate_gate::EgressGuard;

/// A name whose every address is in a hardline CIDR (or no profile is live
/// to check them against).
#[derive(Debug, thiserror::Error)]
#[error("{host} resolves only to addresses the profile's hardline CIDRs refuse (hardline_cidr)")]
pub(crate) struct HardlineAddress {
    host: String,
}

/// Resolves through the system resolver, keeping what the gate's egress
/// guard allows.
pub(crate) struct HardlineResolver {
    pub(crate) egress: EgressGuard,
}

impl Resolve for HardlineResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let egress = self.egress.clone();
        Box::pin(async move {
            let host = name.as_str().to_owned();
            let found: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            // The gate's one liveness rule: an expired bundle lets no
            // address through, as it lets no URL through.
            let now = jiff::Timestamp::now();
            let kept: Vec<SocketAddr> = found
                .into_iter()
                .filter(|a| egress.address_allowed(a.ip(), now))
                .collect();
            if kept.is_empty() {
                return Err(
                    Box::new(HardlineAddress { host }) as Box<dyn std::error::Error + Send + Sync>
                );
            }
            Ok(Box::new(kept.into_iter()) as Addrs)
        })
    }
}

/// The [`HardlineAddress`] behind a failed request, if that was the cause.
pub(crate) fn hardline_cause(error: &reqwest::Error) -> Option<String> {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = source {
        if let Some(h) = e.downcast_ref::<HardlineAddress>() {
            return Some(h.to_string());
        }
        source = e.source();
    }
    None
}
