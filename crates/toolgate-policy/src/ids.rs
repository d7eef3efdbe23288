//! Run ids: one spelling per run; every other agent-supplied id under one
//! rule ([`Id`]); and the scopes a cancellation wider than
//! one run stops ([`Scope`]).
//!
//! A run is cancelled, charged and audited by its id, so two spellings of
//! one id must never be two runs. [`RunId::parse`] is the only way to make
//! a [`RunId`], and it admits one spelling only:
//!
//! - ASCII letters are folded to lowercase (`Run-1` is `run-1`);
//! - 1 to [`MAX_RUN_ID_LEN`] characters from `a-z`, `0-9`, `.`, `_`, `:`
//!   and `-`;
//! - the first and the last character are a letter or a digit.
//!
//! Everything else is refused: whitespace of any kind (a trailing space,
//! NBSP), zero-width and other format characters, full-width and other
//! non-ASCII look-alikes, `/`, and a trailing `.` or `-`. So every variant
//! of an id is either refused or equal to it, and what the database holds
//! is always the canonical spelling.
//!
//! Ids made elsewhere fit the rule: UUIDs, and every id toolgate makes for
//! a run the agent did not name ([`RunId::fresh`], [`RunId::derived`],
//! [`RunId::fixed`]: one rule, in the `default_run` module).

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::error::PolicyError;

mod default_run;

/// Longest run id, in characters (all ASCII, so also bytes).
pub const MAX_RUN_ID_LEN: usize = 128;

/// A run id in its canonical spelling (see the [module](self) docs).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct RunId(String);

fn allowed(b: u8) -> bool {
    b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'_' | b':' | b'-')
}

impl RunId {
    /// The canonical run id `text` spells, or
    /// [`PolicyError::InvalidRunId`] when it is outside the alphabet.
    pub fn parse(text: &str) -> Result<Self, PolicyError> {
        let refuse = |why: &str| PolicyError::InvalidRunId {
            message: format!("{} {why}", shown(text)),
        };
        if text.is_empty() || text.len() > MAX_RUN_ID_LEN {
            return Err(refuse(&format!(
                "must be 1-{MAX_RUN_ID_LEN} characters from a-z 0-9 . _ : -"
            )));
        }
        let id = text.to_ascii_lowercase();
        if let Some(c) = id.chars().find(|c| !c.is_ascii() || !allowed(*c as u8)) {
            return Err(refuse(&format!(
                "holds {c:?}: run ids use a-z 0-9 . _ : - only (letters are case-folded)"
            )));
        }
        let bytes = id.as_bytes();
        if !bytes[0].is_ascii_alphanumeric() || !bytes[bytes.len() - 1].is_ascii_alphanumeric() {
            return Err(refuse("must start and end with a letter or a digit"));
        }
        Ok(Self(id))
    }

    /// The canonical spelling.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The canonical spelling, owned.
    pub fn into_string(self) -> String {
        self.0
    }

    /// True when `text` is already the canonical spelling of a run id
    /// (what a store checks of ids it is handed as plain text).
    pub fn is_canonical(text: &str) -> bool {
        Self::parse(text).is_ok_and(|id| id.0 == text)
    }
}

/// At most 64 characters of refused input, escaped, for error messages.
fn shown(text: &str) -> String {
    let cut: String = text.chars().take(64).collect();
    let more = if cut.len() < text.len() { "…" } else { "" };
    format!("run id {:?}{more}", cut)
}

impl fmt::Display for RunId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for RunId {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl std::str::FromStr for RunId {
    type Err = PolicyError;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Self::parse(text)
    }
}

impl TryFrom<String> for RunId {
    type Error = PolicyError;
    fn try_from(text: String) -> Result<Self, Self::Error> {
        Self::parse(&text)
    }
}

impl From<RunId> for String {
    fn from(id: RunId) -> Self {
        id.0
    }
}

impl PartialEq<str> for RunId {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl PartialEq<&str> for RunId {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

/// Longest [`Id`], in bytes.
pub const MAX_ID_BYTES: usize = 256;

/// Any other identifier an agent names — a tool, an action, a step, a
/// decision, a digest — checked once where it is read: 1 to
/// [`MAX_ID_BYTES`] bytes, not blank, no control characters. Unlike a
/// [`RunId`] it is kept as written (a tool name is matched by the policy's
/// globs and shown back to people), so the rule only keeps out what no
/// record may hold: an empty name, a megabyte, a newline forging a log line.
/// Deserializing checks it, so a request type holding `Id`s cannot carry an
/// unchecked one.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Id(String);

impl Id {
    /// `text` as an id, or [`PolicyError::InvalidId`] naming what is wrong.
    pub fn parse(text: impl Into<String>) -> Result<Self, PolicyError> {
        let text = text.into();
        let refuse = |why: &str| {
            let cut: String = text.chars().take(64).collect();
            let more = if cut.len() < text.len() { "…" } else { "" };
            Err(PolicyError::InvalidId {
                message: format!("{cut:?}{more} {why}"),
            })
        };
        if text.trim().is_empty() {
            return refuse("is blank: an id must not be empty");
        }
        if text.len() > MAX_ID_BYTES {
            return refuse(&format!("is longer than {MAX_ID_BYTES} bytes"));
        }
        if text.chars().any(char::is_control) {
            return refuse("holds a control character");
        }
        Ok(Self(text))
    }

    /// An id written in the program's own source, like
    /// `HeaderName::from_static`: never input, so a bad one is a bug in
    /// the program and panics at once.
    pub fn from_static(text: &'static str) -> Self {
        match Self::parse(text) {
            Ok(id) => id,
            Err(e) => panic!("{e}"),
        }
    }

    /// The id as written.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::ops::Deref for Id {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Id {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for Id {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl std::borrow::Borrow<str> for Id {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for Id {
    type Error = PolicyError;
    fn try_from(text: String) -> Result<Self, Self::Error> {
        Self::parse(text)
    }
}

impl TryFrom<&str> for Id {
    type Error = PolicyError;
    fn try_from(text: &str) -> Result<Self, Self::Error> {
        Self::parse(text)
    }
}

impl From<Id> for String {
    fn from(id: Id) -> Self {
        id.0
    }
}

impl PartialEq<str> for Id {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl PartialEq<&str> for Id {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

impl PartialEq<String> for Id {
    fn eq(&self, other: &String) -> bool {
        self.0 == *other
    }
}

/// For an optional [`Id`] field whose empty string means "none" (a call
/// made outside any step sends `"step_id": ""`): `""` and `null` are
/// `None`, anything else must be an id.
pub fn empty_as_none<'de, D>(deserializer: D) -> Result<Option<Id>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    match Option::<String>::deserialize(deserializer)? {
        None => Ok(None),
        Some(text) if text.is_empty() => Ok(None),
        Some(text) => Id::parse(text).map(Some).map_err(serde::de::Error::custom),
    }
}

crate::wire_enum! {
    /// How much one cancellation stops: a run, or every run of a pod, of a
    /// profile or of the whole namespace (the tenant).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
    pub enum ScopeKind {
        /// One run, by its [`RunId`].
        Run = "run",
        /// Every run of one pod (one sidecar instance), by pod name.
        Pod = "pod",
        /// Every run of every pod under one profile, by profile name.
        Profile = "profile",
        /// Every run of the namespace.
        Namespace = "namespace",
    }
}

/// A cancellation wider than one run: what an agent cannot step around by
/// choosing a new run id. Pod and profile names are Kubernetes object names
/// (RFC 1123 subdomains: 1-253 of `a-z 0-9 . -`, alphanumeric at both
/// ends), taken as they are: Kubernetes refuses upper case, so no folding.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Scope {
    /// Every run of this pod.
    Pod(String),
    /// Every run under this profile.
    Profile(String),
    /// Every run of the namespace.
    Namespace,
}

impl Scope {
    /// The scope `kind` and `target` name: a pod or profile needs a target,
    /// the namespace takes none. `run` is not a scope of this type (a run
    /// is cancelled by its [`RunId`]).
    pub fn parse(kind: &str, target: Option<&str>) -> Result<Self, PolicyError> {
        let refuse = |message: String| PolicyError::InvalidScope { message };
        let kind = ScopeKind::from_wire(kind).ok_or_else(|| {
            refuse(format!(
                "{:?} is not one of pod, profile, namespace",
                kind.chars().take(32).collect::<String>()
            ))
        })?;
        match (kind, target) {
            (ScopeKind::Namespace, None) => Ok(Self::Namespace),
            (ScopeKind::Namespace, Some(_)) => {
                Err(refuse("the namespace scope names no target".into()))
            }
            (ScopeKind::Pod | ScopeKind::Profile, None) => Err(refuse(format!(
                "scope {} needs the name of its {}",
                kind.as_str(),
                kind.as_str()
            ))),
            (ScopeKind::Pod, Some(name)) => Ok(Self::Pod(object_name(name).map_err(refuse)?)),
            (ScopeKind::Profile, Some(name)) => {
                Ok(Self::Profile(object_name(name).map_err(refuse)?))
            }
            (ScopeKind::Run, _) => Err(refuse(
                "a run is cancelled by its run id, not as a scope".into(),
            )),
        }
    }

    /// Which scope this is.
    pub fn kind(&self) -> ScopeKind {
        match self {
            Self::Pod(_) => ScopeKind::Pod,
            Self::Profile(_) => ScopeKind::Profile,
            Self::Namespace => ScopeKind::Namespace,
        }
    }

    /// The pod or profile name; empty for the namespace (as stored).
    pub fn target(&self) -> &str {
        match self {
            Self::Pod(name) | Self::Profile(name) => name,
            Self::Namespace => "",
        }
    }

    /// True when this scope covers a call of `pod` under `profile`.
    pub fn covers(&self, pod: Option<&str>, profile: Option<&str>) -> bool {
        match self {
            Self::Namespace => true,
            Self::Pod(name) => pod == Some(name.as_str()),
            Self::Profile(name) => profile == Some(name.as_str()),
        }
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Namespace => f.write_str("namespace"),
            other => write!(f, "{} {}", other.kind().as_str(), other.target()),
        }
    }
}

/// What one cancellation stops: one run, or every run of a scope.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Stop {
    /// One run.
    Run(RunId),
    /// Every run of a pod, a profile or the namespace.
    Scope(Scope),
}

impl Stop {
    /// The stop a command line names: `--pod NAME`, `--profile NAME`,
    /// `--all` (the namespace) or else a run id (what both `toolgate runs
    /// cancel` and `kubectl toolgate cancel` take).
    pub fn named(
        run_id: Option<&str>,
        pod: Option<&str>,
        profile: Option<&str>,
        all: bool,
    ) -> Result<Self, PolicyError> {
        match (pod, profile) {
            (Some(pod), _) => Scope::parse("pod", Some(pod)).map(Self::Scope),
            (_, Some(profile)) => Scope::parse("profile", Some(profile)).map(Self::Scope),
            _ if all => Ok(Self::Scope(Scope::Namespace)),
            _ => RunId::parse(run_id.unwrap_or_default()).map(Self::Run),
        }
    }
}

impl fmt::Display for Stop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Run(run) => write!(f, "run {run}"),
            Self::Scope(s) => write!(f, "{s}"),
        }
    }
}

/// `name` when it is a Kubernetes object name, else why not.
fn object_name(name: &str) -> Result<String, String> {
    if crate::load::is_object_name(name) {
        return Ok(name.to_owned());
    }
    let shown: String = name.chars().take(64).collect();
    Err(format!(
        "{shown:?} is not a Kubernetes object name (1-{} of a-z 0-9 . -, \
         alphanumeric at both ends)",
        crate::load::MAX_OBJECT_NAME_LEN
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_is_kept_as_written_within_the_one_rule() {
        for ok in [
            "Bash",
            "mcp__fs__read",
            "fs.read_*",
            "sha256:ab",
            "ü",
            &"x".repeat(MAX_ID_BYTES),
        ] {
            assert_eq!(Id::parse(ok).unwrap().as_str(), ok);
        }
        for bad in [
            "",
            " ",
            "\t",
            "a\nb",
            "a\u{0}",
            "\u{7f}",
            "\u{85}x",
            &"x".repeat(MAX_ID_BYTES + 1),
        ] {
            let e = Id::parse(bad).unwrap_err();
            assert_eq!(e.code(), "invalid_request", "{bad:?}");
        }
        // Multi-byte text counts in bytes, as every record stores it.
        assert!(Id::parse("é".repeat(MAX_ID_BYTES / 2 + 1)).is_err());
        let read: Result<Id, _> = serde_json::from_str("\"a\\u0000\"");
        assert!(read.is_err(), "deserializing checks the rule");
    }

    #[test]
    fn an_empty_optional_id_is_none() {
        #[derive(Deserialize)]
        struct Body {
            #[serde(default, deserialize_with = "empty_as_none")]
            step: Option<Id>,
        }
        let read = |text: &str| serde_json::from_str::<Body>(text).map(|b| b.step);
        assert_eq!(read(r#"{"step": ""}"#).unwrap(), None);
        assert_eq!(read(r#"{"step": null}"#).unwrap(), None);
        assert_eq!(read("{}").unwrap(), None);
        assert_eq!(
            read(r#"{"step": "s1"}"#).unwrap(),
            Some(Id::from_static("s1"))
        );
        assert!(read(r#"{"step": " "}"#).is_err());
    }

    #[test]
    fn case_folds_and_keeps_the_alphabet() {
        assert_eq!(RunId::parse("Run-1").unwrap().as_str(), "run-1");
        for ok in [
            "x",
            "0",
            "a.b_c:d-e",
            "mcp-0190b7a2-7c1e-7d3f-9a4b-123456789abc",
            "py-test_x-123",
        ] {
            assert_eq!(RunId::parse(ok).unwrap().as_str(), ok);
            assert!(RunId::is_canonical(ok));
        }
        assert!(!RunId::is_canonical("X"));
        assert!(RunId::parse(&"a".repeat(MAX_RUN_ID_LEN)).is_ok());
    }

    #[test]
    fn look_alikes_are_refused() {
        for bad in [
            "",
            "x ",
            " x",
            "x.",
            "x-",
            "x/",
            "-x",
            "x\u{a0}",
            "x\u{200b}",
            "\u{ff58}",
            "x\u{0}",
            "a b",
            "a/b",
            "caf\u{e9}",
            "K\u{212a}",
        ] {
            let err = RunId::parse(bad).unwrap_err();
            assert_eq!(err.code(), "invalid_run_id", "{bad:?}");
        }
        assert!(RunId::parse(&"a".repeat(MAX_RUN_ID_LEN + 1)).is_err());
    }

    #[test]
    fn serde_goes_through_parse() {
        let id: RunId = serde_json::from_str("\"Run-1\"").unwrap();
        assert_eq!(id.as_str(), "run-1");
        assert_eq!(serde_json::to_string(&id).unwrap(), "\"run-1\"");
        assert!(serde_json::from_str::<RunId>("\"x.\"").is_err());
    }

    #[test]
    fn scopes_name_a_kubernetes_object_or_nothing() {
        assert_eq!(
            Scope::parse("pod", Some("agent-0")).unwrap(),
            Scope::Pod("agent-0".into())
        );
        assert_eq!(Scope::parse("namespace", None).unwrap(), Scope::Namespace);
        for (kind, target) in [
            ("pod", None),
            ("pod", Some("Agent-0")),
            ("pod", Some("agent-0 ")),
            ("pod", Some("agent/0")),
            ("profile", Some("-x")),
            ("profile", Some("")),
            ("namespace", Some("other")),
            ("run", Some("r1")),
            ("Pod", Some("agent-0")),
        ] {
            let err = Scope::parse(kind, target).unwrap_err();
            assert_eq!(err.code(), "invalid_scope", "{kind} {target:?}");
        }
        let pod = Scope::Pod("a".into());
        assert!(pod.covers(Some("a"), Some("p")));
        assert!(!pod.covers(Some("b"), Some("p")));
        assert!(!pod.covers(None, None));
        assert!(Scope::Namespace.covers(None, None));
        assert!(Scope::Profile("p".into()).covers(Some("b"), Some("p")));
    }
}
