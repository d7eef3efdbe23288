//! The console's only way to the cluster: the Kubernetes API, as the
//! signed-in person (`Impersonate-User`, `Impersonate-Group`). The console's
//! own account may impersonate and review tokens, nothing else, so what a
//! person sees and decides here is exactly what RBAC, the validating
//! webhook (which pins `decidedBy` to the authenticated user) and the
//! controller's approvers check let them see and decide with kubectl.

use futures::{Stream, StreamExt};
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use kube::{Api, Client, Config};
use toolgate_k8s::crd::{Approval, Decision, Phase};

use crate::error::ConsoleError;
use crate::identity::Identity;

/// The field manager of the console's patches.
const FIELD_MANAGER: &str = "toolgate-console";

/// The cluster as the console reaches it.
#[derive(Clone)]
pub struct Cluster {
    /// The console's own configuration (its service account).
    config: Config,
    /// Its own client: token reviews only.
    own: Client,
    /// Where Approvals live (the release namespace).
    namespace: String,
}

impl Cluster {
    /// The cluster of `config`, with Approvals in `namespace`.
    pub fn new(config: Config, namespace: String) -> Result<Self, ConsoleError> {
        let own =
            Client::try_from(config.clone()).map_err(|e| ConsoleError::Config(e.to_string()))?;
        Ok(Self {
            config,
            own,
            namespace,
        })
    }

    /// A client that is `who` to the API server.
    fn as_user(&self, who: &Identity) -> Result<Client, ConsoleError> {
        let mut config = self.config.clone();
        config.auth_info.impersonate = Some(who.user.clone());
        config.auth_info.impersonate_groups = Some(who.groups.clone());
        Client::try_from(config).map_err(|e| ConsoleError::Unavailable(e.to_string()))
    }

    fn approvals(&self, who: &Identity) -> Result<Api<Approval>, ConsoleError> {
        Ok(Api::namespaced(self.as_user(who)?, &self.namespace))
    }

    /// Every Approval `who` may list, newest first.
    pub async fn list(&self, who: &Identity) -> Result<Vec<Approval>, ConsoleError> {
        let mut items = self
            .approvals(who)?
            .list(&ListParams::default())
            .await?
            .items;
        items.sort_by(|a, b| {
            b.metadata
                .creation_timestamp
                .as_ref()
                .map(|t| t.0)
                .cmp(&a.metadata.creation_timestamp.as_ref().map(|t| t.0))
        });
        Ok(items)
    }

    /// Records `who`'s decision on Approval `name`, as `who`: the API server
    /// authenticates the impersonated user, and the webhook checks that
    /// `decidedBy` and `decidedByGroups` are exactly that.
    pub async fn decide(
        &self,
        who: &Identity,
        name: &str,
        decision: Decision,
        reason: Option<&str>,
    ) -> Result<Approval, ConsoleError> {
        let patch = serde_json::json!({
            "spec": {
                "decision": decision,
                "reason": reason,
                "decidedBy": who.user,
                "decidedByGroups": who.groups,
            }
        });
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..PatchParams::default()
        };
        Ok(self
            .approvals(who)?
            .patch(name, &params, &Patch::Merge(&patch))
            .await?)
    }

    /// A stream that yields once whenever an Approval `who` may watch
    /// changes (and once when it starts), ending with the watch.
    pub fn changes(
        &self,
        who: &Identity,
    ) -> Result<impl Stream<Item = ()> + Send + 'static, ConsoleError> {
        let api = self.approvals(who)?;
        Ok(watcher(api, watcher::Config::default())
            .take_while(|event| futures::future::ready(event.is_ok()))
            .filter_map(|event| {
                futures::future::ready(match event {
                    Ok(
                        watcher::Event::Apply(_)
                        | watcher::Event::Delete(_)
                        | watcher::Event::InitDone,
                    ) => Some(()),
                    _ => None,
                })
            }))
    }

    /// Who `token` belongs to, as the API server's TokenReview says.
    pub async fn review(&self, token: &str) -> Result<Identity, ConsoleError> {
        let token = token.trim();
        if token.is_empty() || token.len() > 16 * 1024 {
            return Err(ConsoleError::Unauthenticated(
                "paste a Kubernetes token".into(),
            ));
        }
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token.to_owned()),
                ..Default::default()
            },
            ..Default::default()
        };
        let api: Api<TokenReview> = Api::all(self.own.clone());
        let reviewed = api.create(&PostParams::default(), &review).await?;
        let status = reviewed.status.unwrap_or_default();
        match (status.authenticated, status.user) {
            (Some(true), Some(user)) => Identity::checked(
                user.username.as_deref().unwrap_or_default(),
                user.groups.unwrap_or_default(),
            ),
            _ => Err(ConsoleError::Unauthenticated(
                status
                    .error
                    .unwrap_or_else(|| "the token was not accepted".into()),
            )),
        }
    }
}

/// Whether `approval` still waits for a person.
pub fn pending(approval: &Approval) -> bool {
    approval.spec.request.is_some()
        && approval.spec.decision.is_none()
        && approval
            .status
            .as_ref()
            .and_then(|s| s.phase)
            .is_none_or(|p| p == Phase::Pending)
}
