//! The names a decision's path carries (`/approvals/{namespace}/{name}`),
//! checked as the API server would before any request is made: a path
//! segment that is no such name never reaches it.

use crate::error::ConsoleError;

use toolgate_k8s::names::{is_namespace_name, is_object_name};

/// The Approval a decision's path names, or the typed refusal (400).
pub fn approval_path(namespace: &str, name: &str) -> Result<(), ConsoleError> {
    if !is_namespace_name(namespace) {
        return Err(ConsoleError::InvalidName("not a namespace name".into()));
    }
    if !is_object_name(name) {
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
            assert!(is_object_name(good), "{good}");
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
            assert!(!is_object_name(bad), "{bad}");
        }
        for good in ["team-a", "a", "0", &"n".repeat(63)] {
            assert!(is_namespace_name(good), "{good}");
        }
        for bad in ["", "a.b", "Team", "-a", "a-", "..", "a b", &"n".repeat(64)] {
            assert!(!is_namespace_name(bad), "{bad}");
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
