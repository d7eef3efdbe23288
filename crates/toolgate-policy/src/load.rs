//! Strict decoding of YAML or JSON text into the model.

use serde::de::DeserializeOwned;

use crate::error::PolicyError;
use crate::model::{API_VERSION, KIND, PolicyManifest};

/// Decodes YAML or JSON text (JSON is read as the YAML subset it is) into
/// `T`, reporting the dotted path of the first offending field.
pub fn from_str<T: DeserializeOwned>(text: &str) -> Result<T, PolicyError> {
    let de = serde_yaml::Deserializer::from_str(text);
    serde_path_to_error::deserialize(de)
        .map_err(|e| classify(e.path().to_string(), e.into_inner().to_string()))
}

/// Decodes a JSON value (e.g. a bundle payload field) into `T` with the same
/// strictness and error shape as [`from_str`].
pub fn from_value<T: DeserializeOwned>(
    value: serde_json::Value,
    root: &str,
) -> Result<T, PolicyError> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let inner = e.path().to_string();
        let path = if inner == "." {
            root.to_owned()
        } else {
            format!("{root}.{inner}")
        };
        classify(path, e.into_inner().to_string())
    })
}

/// Parses a PolicyProfile manifest and checks its type and name. The spec is
/// validated when it is compiled.
pub fn parse_manifest(text: &str) -> Result<PolicyManifest, PolicyError> {
    let manifest: PolicyManifest = from_str(text)?;
    if manifest.api_version != API_VERSION {
        return Err(PolicyError::WrongKind {
            field: "apiVersion".into(),
            message: format!("expected `{API_VERSION}`, got `{}`", manifest.api_version),
        });
    }
    if manifest.kind != KIND {
        return Err(PolicyError::WrongKind {
            field: "kind".into(),
            message: format!("expected `{KIND}`, got `{}`", manifest.kind),
        });
    }
    validate_object_name("metadata.name", &manifest.metadata.name)?;
    if let Some(ns) = &manifest.metadata.namespace {
        validate_object_name("metadata.namespace", ns)?;
    }
    Ok(manifest)
}

/// Longest Kubernetes object name (an RFC 1123 subdomain).
pub const MAX_OBJECT_NAME_LEN: usize = 253;

/// True when `name` is a Kubernetes object name: 1-253 of `a-z 0-9 . -`,
/// alphanumeric at both ends (an RFC 1123 subdomain).
pub fn is_object_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_OBJECT_NAME_LEN
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        && name.as_bytes()[0].is_ascii_alphanumeric()
        && name.as_bytes()[name.len() - 1].is_ascii_alphanumeric()
}

/// Checks a Kubernetes-style object name (RFC 1123 subdomain).
pub fn validate_object_name(field: &str, name: &str) -> Result<(), PolicyError> {
    if is_object_name(name) {
        Ok(())
    } else {
        Err(PolicyError::InvalidValue {
            field: field.into(),
            message: format!(
                "`{name}` is not a valid name (lowercase letters, digits, '-' and '.', starting and ending alphanumeric, at most 253 characters)"
            ),
        })
    }
}

fn classify(path: String, message: String) -> PolicyError {
    let field = if path.is_empty() || path == "." {
        "<document>".to_owned()
    } else {
        path
    };
    // serde_yaml may prefix its own path ("spec.mode: ..."), so search.
    if let Some(rest) = after(&message, "unknown field `") {
        let name = rest.split('`').next().unwrap_or_default().to_owned();
        // serde_path_to_error reports the path of the object, not the key.
        let field = field
            .strip_suffix(&format!(".{name}"))
            .map(str::to_owned)
            .unwrap_or(field);
        return PolicyError::UnknownField { field, name };
    }
    if let Some(rest) = after(&message, "unknown variant `") {
        let value = rest.split('`').next().unwrap_or_default().to_owned();
        if field == "spec.mode" || field.ends_with(".mode") {
            return PolicyError::InvalidMode { field, value };
        }
        let message = rest.split_once('`').map_or(rest, |(_, tail)| tail);
        return PolicyError::InvalidValue {
            field,
            message: format!("unknown value `{value}`{}", strip_location(message)),
        };
    }
    PolicyError::Parse { field, message }
}

fn after<'a>(message: &'a str, marker: &str) -> Option<&'a str> {
    message.find(marker).map(|i| &message[i + marker.len()..])
}

fn strip_location(message: &str) -> &str {
    message.split(" at line ").next().unwrap_or(message)
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str =
        "apiVersion: toolgate.dev/v1alpha1\nkind: PolicyProfile\nmetadata: {name: p}\n";

    #[test]
    fn unknown_field_is_named_with_its_path() {
        let text =
            format!("{BASE}spec:\n  mode: rules\n  rules:\n    bash: {{allow: [ls], alow: [x]}}\n");
        let err = parse_manifest(&text).unwrap_err();
        assert_eq!(err.code(), "profile_unknown_field");
        assert_eq!(err.field(), Some("spec.rules.bash"));
        assert!(err.to_string().contains("alow"), "{err}");
    }

    #[test]
    fn unknown_top_level_field_is_rejected() {
        let text = format!("{BASE}spec: {{mode: rules}}\nstatus: {{}}\n");
        let err = parse_manifest(&text).unwrap_err();
        assert_eq!(err.code(), "profile_unknown_field");
        assert!(err.to_string().contains("status"));
    }

    #[test]
    fn unknown_mode_is_its_own_code() {
        let text = format!("{BASE}spec: {{mode: allow_all}}\n");
        let err = parse_manifest(&text).unwrap_err();
        assert_eq!(err.code(), "profile_invalid_mode");
        assert_eq!(err.field(), Some("spec.mode"));
    }

    #[test]
    fn json_and_yaml_decode_alike() {
        let yaml = format!("{BASE}spec: {{mode: denyAll}}\n");
        let json = r#"{"apiVersion":"toolgate.dev/v1alpha1","kind":"PolicyProfile","metadata":{"name":"p"},"spec":{"mode":"denyAll"}}"#;
        assert_eq!(
            parse_manifest(&yaml).unwrap(),
            parse_manifest(json).unwrap()
        );
    }

    #[test]
    fn trailing_json_garbage_is_a_parse_error() {
        let json = r#"{"apiVersion":"toolgate.dev/v1alpha1","kind":"PolicyProfile","metadata":{"name":"p"},"spec":{"mode":"denyAll"}} x"#;
        assert_eq!(parse_manifest(json).unwrap_err().code(), "profile_parse");
    }

    #[test]
    fn wrong_kind_and_bad_names_are_rejected() {
        let text =
            "apiVersion: v1\nkind: PolicyProfile\nmetadata: {name: p}\nspec: {mode: rules}\n";
        assert_eq!(
            parse_manifest(text).unwrap_err().field(),
            Some("apiVersion")
        );
        let text = "apiVersion: toolgate.dev/v1alpha1\nkind: PolicyProfile\nmetadata: {name: Bad_Name}\nspec: {mode: rules}\n";
        assert_eq!(
            parse_manifest(text).unwrap_err().code(),
            "profile_invalid_value"
        );
    }

    #[test]
    fn garbage_is_a_parse_error_not_a_panic() {
        for text in ["", "{", ":::", "- a\n- b", "\u{0}", "spec: [1"] {
            assert!(parse_manifest(text).is_err(), "{text:?}");
        }
    }
}
