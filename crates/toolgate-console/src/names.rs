//! The names a decision's path carries (`/approvals/{namespace}/{name}`),
//! checked as the API server would before any request is made: a path
//! segment that is no such name never reaches it.

use crate::error::ConsoleError;

/// Whether `s` is lowercase letters, digits and inner dashes (one label of
/// a DNS name, without its length limit).
fn label_chars(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
}

/// Whether `s` is a namespace name: an RFC 1123 label of at most 63 characters.
pub fn namespace_name(s: &str) -> bool {
    s.len() <= 63 && label_chars(s)
}

/// Whether `s` is an object name: an RFC 1123 subdomain of at most 253
/// characters (dot-separated labels; Kubernetes sets no length per label).
pub fn object_name(s: &str) -> bool {
    !s.is_empty() && s.len() <= 253 && s.split('.').all(label_chars)
}

/// The Approval a decision's path names, or the typed refusal (400).
pub fn approval_path(namespace: &str, name: &str) -> Result<(), ConsoleError> {
    if !namespace_name(namespace) {
        return Err(ConsoleError::InvalidName("not a namespace name".into()));
    }
    if !object_name(name) {
        return Err(ConsoleError::InvalidName("not an Approval name".into()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_names_the_api_server_could_hold_pass() {
        for good in ["apr-con-1f2e", "a", "a.b-c.d", &"x".repeat(253)] {
            assert!(object_name(good), "{good}");
        }
        for bad in [
            "",
            "a/b",
            "x?dryRun=All",
            "A",
            "-a",
            "a-",
            "a..b",
            ".a",
            "a.",
            "a.-b",
            "a/status",
            "status%2F",
            "zoë",
            &"x".repeat(254),
        ] {
            assert!(!object_name(bad), "{bad}");
        }
        for good in ["team-a", "a", "0", &"n".repeat(63)] {
            assert!(namespace_name(good), "{good}");
        }
        for bad in ["", "a.b", "Team", "-a", "a-", "..", "a b", &"n".repeat(64)] {
            assert!(!namespace_name(bad), "{bad}");
        }
    }

    #[test]
    fn a_bad_path_is_a_typed_bad_request() {
        assert!(approval_path("team-a", "apr-1").is_ok());
        for (ns, name) in [("..", "apr-1"), ("team-a", "apr-1/status"), ("a.b", "x")] {
            let e = approval_path(ns, name).unwrap_err();
            assert_eq!(e.code(), "invalid_name", "{ns}/{name}");
            assert_eq!(e.status().as_u16(), 400);
        }
    }
}
