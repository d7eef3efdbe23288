//! What an approver is shown of a call: its match text, bounded and with
//! obvious secrets masked.
//!
//! The preview is stored with the approval request and shown in `kubectl
//! get approvals` and `kubectl toolgate list`, so it must never carry a
//! credential the agent happened to pass along. Masking is best effort for
//! well-known shapes; the digest, not the preview, is what an approval binds.

use std::sync::LazyLock;

use regex::Regex;

/// Longest preview, in characters (the cut is marked with `…`).
pub const PREVIEW_MAX_CHARS: usize = 512;

/// What replaces a secret.
pub const MASK: &str = "****";

/// Shapes of secrets that are replaced whole.
static WHOLE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(concat!(
        // PEM blocks (private keys, certificates), to their END line or the end.
        r"-----BEGIN [A-Z0-9 ]+-----(?s:.*?)(?:-----END [A-Z0-9 ]+-----|\z)",
        // AWS access key ids.
        r"|\b(?:AKIA|ASIA)[0-9A-Z]{16}\b",
        // GitHub tokens.
        r"|\bgh[pousr]_[A-Za-z0-9]{20,}\b|\bgithub_pat_[A-Za-z0-9_]{20,}\b",
        // Slack, OpenAI- and Anthropic-style keys.
        r"|\bxox[abprs]-[A-Za-z0-9-]{10,}\b|\bsk-[A-Za-z0-9_-]{20,}\b",
        // JSON Web Tokens (header.payload.signature, the header base64url JSON).
        r"|\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}",
    ))
    .expect("secret patterns compile")
});

/// `name=value`, `name: value` and `--name value` where the name says
/// secret: the value is masked, the name kept so the approver sees that
/// one was passed.
static NAMED: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(concat!(
        r"(?i)(?P<name>\b[a-z0-9_.-]*(?:password|passwd|pwd|secret|token|api[_-]?key|access[_-]?key|private[_-]?key|credentials?)[a-z0-9_.-]*)",
        r#"(?P<sep>\s*[=:]\s*|\s+)(?P<quote>["']?)(?P<value>[^\s"'&;]+)"#,
    ))
    .expect("named secret pattern compiles")
});

/// `Authorization: Bearer …` / `Basic …` headers and `user:pass@` in URLs.
static AUTH: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)(?P<keep>\b(?:bearer|basic)\s+)[A-Za-z0-9._~+/=-]{8,}|(?P<scheme>[a-z][a-z0-9+.-]*://[^/\s:@]+:)[^/\s@]+@")
        .expect("auth pattern compiles")
});

/// The approver's view of `text`: secrets masked, then cut to
/// [`PREVIEW_MAX_CHARS`] characters.
pub fn preview(text: &str) -> String {
    let masked = mask_secrets(text);
    if masked.chars().count() <= PREVIEW_MAX_CHARS {
        return masked;
    }
    let mut cut: String = masked.chars().take(PREVIEW_MAX_CHARS - 1).collect();
    cut.push('…');
    cut
}

/// `text` with the well-known secret shapes replaced by [`MASK`], uncut
/// (what `spec.audit.recordInputs: masked` keeps of each string).
pub fn mask_secrets(text: &str) -> String {
    let masked = WHOLE.replace_all(text, MASK);
    let masked = AUTH.replace_all(&masked, |c: &regex::Captures<'_>| {
        match (c.name("keep"), c.name("scheme")) {
            (Some(keep), _) => format!("{}{MASK}", keep.as_str()),
            (_, Some(scheme)) => format!("{}{MASK}@", scheme.as_str()),
            _ => MASK.to_owned(),
        }
    });
    let masked = NAMED.replace_all(&masked, |c: &regex::Captures<'_>| {
        format!("{}{}{}{MASK}", &c["name"], &c["sep"], &c["quote"])
    });
    masked.into_owned()
}

/// Whether an argument's name says its value is a secret (`password`,
/// `api_key`, `token`, ...): the whole value is masked, whatever it holds.
pub fn is_secret_name(name: &str) -> bool {
    SECRET_NAME.is_match(name)
}

/// A whole name that says secret, alone or as the last word of a longer
/// one (`password`, `DB_PASSWORD`, `github-token`, `X-Api-Key`), but not a
/// word merely containing one (`max_tokens`, `secretary`).
static SECRET_NAME: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(concat!(
        r"(?i)^(?:.*[_.\-\s])?",
        r"(?:password|passwd|pwd|passphrase|secret|token|api[_-]?key|access[_-]?key",
        r"|private[_-]?key|credentials?|authorization|cookie|session[_-]?id)$",
    ))
    .expect("secret name pattern compiles")
});

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn well_known_secrets_are_masked() {
        let cases = [
            (
                "aws s3 ls --key AKIAIOSFODNN7EXAMPLE",
                "AKIAIOSFODNN7EXAMPLE",
            ),
            (
                "git clone https://ghp_abcdefghijklmnopqrstuvwxyz0123456789@github.com/x",
                "ghp_abcdefghijklmnopqrstuvwxyz0123456789",
            ),
            (
                "echo '-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXk\n-----END OPENSSH PRIVATE KEY-----' > k",
                "b3BlbnNzaC1rZXk",
            ),
            ("mysql -u root password=hunter2 db", "hunter2"),
            ("psql 'host=db PASSWORD=s3cr3t'", "s3cr3t"),
            (
                "curl -H 'Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.x'",
                "eyJhbGciOiJIUzI1NiJ9",
            ),
            ("deploy --api-key abc123def456", "abc123def456"),
            (
                "export GITHUB_TOKEN=zzz-top-secret-zzz",
                "zzz-top-secret-zzz",
            ),
            ("curl https://admin:pa55w0rd@internal/x", "pa55w0rd"),
        ];
        for (text, secret) in cases {
            let shown = preview(text);
            assert!(!shown.contains(secret), "{text:?} -> {shown:?}");
            assert!(shown.contains(MASK), "{text:?} -> {shown:?}");
        }
        // The command itself stays readable.
        assert_eq!(
            preview("mysql -u root password=hunter2 db"),
            "mysql -u root password=**** db"
        );
        assert_eq!(preview("rm -rf /tmp/build"), "rm -rf /tmp/build");
    }

    #[test]
    fn previews_are_bounded_in_characters() {
        let long = "é".repeat(2_000);
        let shown = preview(&long);
        assert_eq!(shown.chars().count(), PREVIEW_MAX_CHARS);
        assert!(shown.ends_with('…'));
        // An unterminated PEM block is masked to the end.
        let shown = preview("cat <<EOF\n-----BEGIN RSA PRIVATE KEY-----\nMIIE...");
        assert_eq!(shown, "cat <<EOF\n****");
    }
}
