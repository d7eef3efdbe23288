//! The approval status, one set with one spelling: the store's column, the
//! sidecar's answers, the MCP gateway, the hook and the Python client all
//! read these wire names; the `Approval` object's phase is the same set.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

crate::wire_enum! {
    /// Effective state of an approval. A `pending` row whose `expires_at`
    /// has passed is reported as `expired` even before expiry is swept.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
    pub enum ApprovalStatus {
        /// Waiting for a human.
        Pending = "pending",
        /// Approved; may be consumed once.
        Approved = "approved",
        /// Denied.
        Denied = "denied",
        /// Nobody answered in time.
        Expired = "expired",
        /// Its run (or a scope holding it) was cancelled before anyone answered.
        Cancelled = "cancelled",
    }
}

impl ApprovalStatus {
    /// True while a human may still answer: every other status is final.
    pub fn is_pending(self) -> bool {
        self == Self::Pending
    }
}

impl fmt::Display for ApprovalStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A status name that is none of [`ApprovalStatus::NAMES`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownStatus(pub String);

impl fmt::Display for UnknownStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown approval status {:?} (one of {})",
            self.0.chars().take(32).collect::<String>(),
            ApprovalStatus::NAMES.join(", ")
        )
    }
}

impl std::error::Error for UnknownStatus {}

impl FromStr for ApprovalStatus {
    type Err = UnknownStatus;
    fn from_str(s: &str) -> Result<Self, UnknownStatus> {
        Self::from_wire(s).ok_or_else(|| UnknownStatus(s.to_owned()))
    }
}

crate::wire_enum! {
    /// A human's answer to an approval.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
    pub enum ApprovalDecision {
        /// Let the call through once (request) or activate the grant.
        Approved = "approved",
        /// Refuse the call (request) or keep the grant inactive.
        Denied = "denied",
    }
}

impl fmt::Display for ApprovalDecision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl From<ApprovalDecision> for ApprovalStatus {
    fn from(d: ApprovalDecision) -> Self {
        match d {
            ApprovalDecision::Approved => ApprovalStatus::Approved,
            ApprovalDecision::Denied => ApprovalStatus::Denied,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_read_back_and_only_pending_is_open() {
        for s in ApprovalStatus::ALL {
            assert_eq!(s.as_str().parse::<ApprovalStatus>(), Ok(s));
            assert_eq!(serde_json::to_value(s).unwrap(), s.as_str());
            assert_eq!(s.is_pending(), s == ApprovalStatus::Pending);
        }
        assert!("Pending".parse::<ApprovalStatus>().is_err());
        assert_eq!(
            ApprovalStatus::from(ApprovalDecision::Denied),
            ApprovalStatus::Denied
        );
    }
}
