//! The parts of `admission.k8s.io/v1` AdmissionReview this crate reads and
//! writes. Unknown fields are ignored: the API server sends more than we need.
//!
//! A thin local wrapper rather than `kube::core::admission`, whose types
//! cannot express the wire behaviour this webhook promises (and its tests
//! assert):
//! - kube's `AdmissionResponse` serializes `patch` (`Vec<u8>`) as an array
//!   of numbers; ours is the base64 string of the API reference, and clients
//!   and tests decode it as such;
//! - kube's response always carries a `status` object, also when allowed;
//!   an allowed answer here has none, and a denial's `status` carries the
//!   stable error code as `reason` and the HTTP-like `code`;
//! - kube's `AdmissionRequest` requires `kind`, `resource` and `userInfo`
//!   and reads `operation` into a closed enum, so a review lacking one of
//!   them would become a `malformed_review` denial instead of being judged
//!   (an Approval decision without `userInfo` is refused by the shared rules,
//!   fail closed, with a message naming the missing user);
//! - a malformed body's `request.uid` is salvaged ([`AdmissionReview::salvage_uid`])
//!   so the denial still reaches the request.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::WebhookError;

/// `apiVersion` of every review this crate accepts and answers.
pub const API_VERSION: &str = "admission.k8s.io/v1";
/// `kind` of a review.
pub const KIND: &str = "AdmissionReview";

/// An incoming AdmissionReview.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AdmissionReview {
    /// Must be [`API_VERSION`].
    #[serde(default)]
    pub api_version: String,
    /// Must be [`KIND`].
    #[serde(default)]
    pub kind: String,
    /// The request; absent only in malformed reviews.
    pub request: Option<AdmissionRequest>,
}

/// `request` of an AdmissionReview.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AdmissionRequest {
    /// Echoed in the response.
    pub uid: String,
    /// Name of the object; empty for `generateName` creates.
    #[serde(default)]
    pub name: Option<String>,
    /// Namespace of the request (set even when `object.metadata.namespace` is not).
    #[serde(default)]
    pub namespace: Option<String>,
    /// `CREATE`, `UPDATE`, `DELETE` or `CONNECT`.
    pub operation: String,
    /// The object as it would be stored; absent for DELETE.
    #[serde(default)]
    pub object: Option<Value>,
    /// The stored object, for UPDATE and DELETE.
    #[serde(default)]
    pub old_object: Option<Value>,
    /// Whether the request is a dry run.
    #[serde(default)]
    pub dry_run: Option<bool>,
    /// Who is making the request, as the API server authenticated them.
    #[serde(default)]
    pub user_info: Option<UserInfo>,
}

/// The authenticated user of an admission request.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct UserInfo {
    /// Username as the API server knows it (e.g. `alice@example.com`,
    /// `system:serviceaccount:ns:name`).
    #[serde(default)]
    pub username: Option<String>,
    /// Groups the API server authenticated the user in.
    #[serde(default)]
    pub groups: Vec<String>,
}

impl AdmissionReview {
    /// Decodes a review, checking its type and that it carries a request.
    pub fn from_slice(body: &[u8]) -> Result<AdmissionRequest, WebhookError> {
        let review: AdmissionReview = serde_json::from_slice(body)
            .map_err(|e| WebhookError::MalformedReview(e.to_string()))?;
        if review.api_version != API_VERSION || review.kind != KIND {
            return Err(WebhookError::MalformedReview(format!(
                "expected apiVersion `{API_VERSION}` and kind `{KIND}`, got `{}` `{}`",
                review.api_version, review.kind
            )));
        }
        review
            .request
            .ok_or_else(|| WebhookError::MalformedReview("`request` is missing".into()))
    }

    /// Best effort: the `request.uid` of a body that did not decode, so the
    /// denial can still be addressed to the request.
    pub fn salvage_uid(body: &[u8]) -> Option<String> {
        // Read as a JSON value, not a derived struct: serde would also
        // accept `"request": ["x"]` as a struct and answer to uid `x`.
        let review: serde_json::Value = serde_json::from_slice(body).ok()?;
        review
            .get("request")?
            .as_object()?
            .get("uid")?
            .as_str()
            .filter(|uid| !uid.is_empty())
            .map(str::to_owned)
    }
}

/// `response.status` of a denial (a `metav1.Status`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Status {
    /// Always `Failure`.
    pub status: &'static str,
    /// HTTP-like code shown to the client.
    pub code: u16,
    /// The stable error code, e.g. `profile_invalid_glob`.
    pub reason: String,
    /// Human-readable message naming the field; ends with the code.
    pub message: String,
}

/// `response` of an AdmissionReview.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AdmissionResponse {
    /// The request's uid.
    pub uid: String,
    /// Whether the request is admitted.
    pub allowed: bool,
    /// Why it was denied.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<Status>,
    /// Base64 of the JSON Patch, when the object is mutated.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub patch: Option<String>,
    /// `JSONPatch` when `patch` is set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub patch_type: Option<&'static str>,
    /// Warnings `kubectl` shows to the user.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

impl AdmissionResponse {
    /// Admits without change.
    pub fn allow(uid: impl Into<String>) -> Self {
        Self {
            uid: uid.into(),
            allowed: true,
            status: None,
            patch: None,
            patch_type: None,
            warnings: Vec::new(),
        }
    }

    /// Denies with the error's code, field and message.
    pub fn deny(uid: impl Into<String>, error: &WebhookError) -> Self {
        Self {
            status: Some(Status {
                status: "Failure",
                code: error.http_status(),
                reason: error.code().to_owned(),
                message: format!("{error} [{}]", error.code()),
            }),
            allowed: false,
            ..Self::allow(uid)
        }
    }

    /// Admits with a JSON Patch (serialized operations, not yet base64).
    pub fn with_patch(mut self, patch_json: &[u8]) -> Self {
        use base64::Engine as _;
        self.patch = Some(base64::engine::general_purpose::STANDARD.encode(patch_json));
        self.patch_type = Some("JSONPatch");
        self
    }

    /// Adds warnings.
    pub fn with_warnings(mut self, warnings: Vec<String>) -> Self {
        self.warnings.extend(warnings);
        self
    }

    /// The response wrapped in an AdmissionReview envelope, as JSON bytes.
    pub fn to_review_json(&self) -> Result<Vec<u8>, WebhookError> {
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Envelope<'a> {
            api_version: &'static str,
            kind: &'static str,
            response: &'a AdmissionResponse,
        }
        serde_json::to_vec(&Envelope {
            api_version: API_VERSION,
            kind: KIND,
            response: self,
        })
        .map_err(|e| WebhookError::Internal(e.to_string()))
    }
}

#[cfg(test)]
mod salvage_tests {
    use super::AdmissionReview;

    #[test]
    fn only_an_object_request_with_a_string_uid_is_salvaged() {
        assert_eq!(
            AdmissionReview::salvage_uid(br#"{"request":{"uid":"u-1","kind":7}}"#).as_deref(),
            Some("u-1")
        );
        // Found by tests/it/fuzz.rs: a derived struct also reads arrays.
        for body in [
            &br#"{"request":["toolgate-sidecar"]}"#[..],
            br#"{"request":{"uid":7}}"#,
            br#"{"request":{"uid":""}}"#,
            br#"[1]"#,
            b"{",
        ] {
            assert_eq!(AdmissionReview::salvage_uid(body), None, "{body:?}");
        }
    }
}
