//! A candidate policy read from a file, for replaying the decision log
//! against it (`toolgate replay --candidate`, `kubectl toolgate replay`):
//! a PolicyProfile manifest (YAML or JSON) or a bundle envelope, whose
//! spec and grants are taken as signed.
//!
//! A bundle's signature is not checked here: a candidate is an input to a
//! report, never enforced, so an unsigned or foreign-signed bundle is as
//! good a question as a trusted one.

use toolgate_policy::{CompiledPolicy, Grant, PolicyError, PolicySpec};

use crate::{BundleDocument, inspect};

/// What kind of file a [`Candidate`] came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CandidateSource {
    /// A PolicyProfile manifest: no grants of its own, so a caller that
    /// knows the profile's active standing grants may add them.
    Profile,
    /// A bundle envelope: its grants are the ones the signer compiled in.
    Bundle,
}

/// A candidate, parsed but not compiled.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    /// Where it came from.
    pub source: CandidateSource,
    /// The profile's name (the prefix of its policy version).
    pub name: String,
    /// The profile's namespace, when the file names one.
    pub namespace: Option<String>,
    /// The spec.
    pub spec: PolicySpec,
    /// Standing grants compiled with the spec.
    pub grants: Vec<Grant>,
}

/// Why a candidate file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum CandidateError {
    /// A DSSE envelope whose payload is not a bundle document.
    #[error("not a toolgate bundle document: {0}")]
    NotABundleDocument(serde_json::Error),
    /// A manifest that does not parse, or a spec that does not compile.
    #[error(transparent)]
    Policy(#[from] PolicyError),
}

impl CandidateError {
    /// Stable snake_case code: `not_a_bundle_document`, or the policy
    /// error's own.
    pub fn code(&self) -> &'static str {
        match self {
            Self::NotABundleDocument(_) => "not_a_bundle_document",
            Self::Policy(e) => e.code(),
        }
    }
}

impl Candidate {
    /// Parses a bundle envelope when `bytes` is one, else a profile
    /// manifest.
    pub fn parse(bytes: &[u8]) -> Result<Self, CandidateError> {
        if let Ok(unverified) = inspect(bytes) {
            let document: BundleDocument = serde_json::from_value(unverified.document)
                .map_err(CandidateError::NotABundleDocument)?;
            return Ok(Self {
                source: CandidateSource::Bundle,
                name: document.profile.name,
                namespace: document.profile.namespace,
                spec: document.spec,
                grants: document.grants,
            });
        }
        let text = std::str::from_utf8(bytes).map_err(|e| PolicyError::Parse {
            field: "<document>".into(),
            message: format!("not UTF-8 text: {e}"),
        })?;
        let manifest = toolgate_policy::load::parse_manifest(text)?;
        Ok(Self {
            source: CandidateSource::Profile,
            name: manifest.metadata.name,
            namespace: manifest.metadata.namespace,
            spec: manifest.spec,
            grants: Vec::new(),
        })
    }

    /// Compiles the spec with the grants, as a sidecar would enforce them.
    pub fn compile(&self) -> Result<CompiledPolicy, PolicyError> {
        CompiledPolicy::compile(&self.name, &self.spec, &self.grants)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{BundleInput, Envelope, ProfileRef, SigningKey};

    const PROFILE: &str = "apiVersion: toolgate.dev/v1alpha1\nkind: PolicyProfile\n\
        metadata: {name: cand, namespace: team-a}\nspec: {mode: denyAll}\n";

    #[test]
    fn a_manifest_and_its_bundle_compile_to_the_same_policy() {
        let profile = Candidate::parse(PROFILE.as_bytes()).unwrap();
        assert_eq!(profile.source, CandidateSource::Profile);
        assert_eq!(
            (profile.name.as_str(), profile.namespace.as_deref()),
            ("cand", Some("team-a"))
        );
        let t0: jiff::Timestamp = "2030-01-01T00:00:00Z".parse().unwrap();
        let doc = BundleDocument::new(BundleInput {
            profile: ProfileRef {
                name: "cand".into(),
                namespace: Some("team-a".into()),
            },
            spec: profile.spec.clone(),
            grants: vec![],
            sequence: 1,
            issued_at: t0,
            expires_at: t0 + jiff::SignedDuration::from_hours(1),
        })
        .unwrap();
        let bytes = Envelope::sign(&doc, &SigningKey::from_seed(&[3; 32])).to_bytes();
        let bundle = Candidate::parse(&bytes).unwrap();
        assert_eq!(bundle.source, CandidateSource::Bundle);
        assert_eq!(bundle.namespace.as_deref(), Some("team-a"));
        assert_eq!(
            bundle.compile().unwrap().version(),
            profile.compile().unwrap().version()
        );
    }

    #[test]
    fn what_is_neither_is_refused_with_a_code() {
        let e = Candidate::parse(b"kind: Pod\n").unwrap_err();
        assert!(matches!(e, CandidateError::Policy(_)), "{e}");
        let e = Candidate::parse(&[0xff, 0xfe]).unwrap_err();
        assert_eq!(e.code(), "profile_parse", "{e}");
    }
}
