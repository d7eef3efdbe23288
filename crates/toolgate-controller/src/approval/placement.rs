//! Where a request Approval lives, and which namespaces speak for database
//! rows.
//!
//! By default each pending approval is mirrored into its tenant's own
//! namespace (a tenant is the namespace of the pod that asked), so a team
//! is given "approve my namespace's agents" by one RoleBinding, and an
//! approver of another tenant neither sees nor hears of it. A platform that
//! wants one queue names it with `--approvals-namespace`.
//!
//! Only the home namespace speaks for a row: anyone able to create an
//! Approval elsewhere must not be able to answer a call by naming its id.
//! While a cluster moves from one queue to per-tenant namespaces, the old
//! queue (`--migrate-approvals-from`) is honoured too, so a decision
//! already made there is recorded rather than lost; its undecided requests
//! are moved to their home.

use toolgate_k8s::names::is_namespace_name;

/// The placement rule of request Approvals.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// One namespace for every tenant's requests (`--approvals-namespace`);
    /// `None`: each tenant's own namespace.
    pub central: Option<String>,
    /// Home of tenants whose name cannot be a namespace (they exist only
    /// outside Kubernetes, e.g. `toolgate tenant provision`): the
    /// controller's own namespace, which only the platform team reads.
    pub fallback: String,
    /// The namespace requests used to live in, still honoured while its
    /// undecided requests move home.
    pub migrate_from: Option<String>,
}

impl Placement {
    /// Per-tenant namespaces, for a controller running in `namespace` (also
    /// the fallback and, by default, the old queue to migrate from: the
    /// chart's queue used to be the release namespace).
    pub fn per_tenant(namespace: &str) -> Self {
        Self {
            central: None,
            fallback: namespace.to_owned(),
            migrate_from: Some(namespace.to_owned()),
        }
    }

    /// One queue, `namespace`, for every tenant.
    pub fn central(namespace: &str) -> Self {
        Self {
            central: Some(namespace.to_owned()),
            fallback: namespace.to_owned(),
            migrate_from: None,
        }
    }

    /// The namespace `tenant`'s request Approvals are mirrored into.
    pub fn home<'a>(&'a self, tenant: &'a str) -> &'a str {
        match &self.central {
            Some(queue) => queue,
            None if is_namespace_name(tenant) => tenant,
            None => &self.fallback,
        }
    }

    /// Whether a request Approval of `tenant` in `namespace` may resolve
    /// its row: it is the tenant's home, or the old queue being migrated.
    pub fn honours(&self, namespace: &str, tenant: &str) -> bool {
        namespace == self.home(tenant) || self.migrate_from.as_deref() == Some(namespace)
    }

    /// Whether a request Approval of `tenant` in `namespace` is to be moved
    /// to its home: it sits in the old queue, which is not its home.
    pub fn moves(&self, namespace: &str, tenant: &str) -> bool {
        self.migrate_from.as_deref() == Some(namespace) && namespace != self.home(tenant)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_tenant_is_at_home_in_its_namespace() {
        let p = Placement::per_tenant("toolgate-system");
        assert_eq!(p.home("team-a"), "team-a");
        assert_eq!(p.home("team-b"), "team-b");
        // Not a namespace name: the controller's namespace.
        for odd in ["Team_A", "", "-x", "a.b", &"a".repeat(64)] {
            assert_eq!(p.home(odd), "toolgate-system", "{odd:?}");
        }
        assert!(p.honours("team-a", "team-a"));
        assert!(
            !p.honours("team-b", "team-a"),
            "another tenant's namespace never speaks for team-a"
        );
        assert!(
            p.honours("toolgate-system", "team-a"),
            "the old queue, while migrating"
        );
        assert!(p.moves("toolgate-system", "team-a"));
        assert!(!p.moves("team-a", "team-a"));
        assert!(!p.moves("toolgate-system", "Team_A"), "already home");

        let done = Placement {
            migrate_from: None,
            ..p
        };
        assert!(!done.honours("toolgate-system", "team-a"));
        assert!(!done.moves("toolgate-system", "team-a"));
    }

    #[test]
    fn a_central_queue_holds_every_tenant() {
        let p = Placement::central("approvals");
        assert_eq!(p.home("team-a"), "approvals");
        assert_eq!(p.home("Team_A"), "approvals");
        assert!(p.honours("approvals", "team-a"));
        assert!(!p.honours("team-a", "team-a"));
        assert!(!p.moves("approvals", "team-a"));
    }
}
