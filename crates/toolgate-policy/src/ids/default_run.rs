//! The one rule for a run an agent does not name.
//!
//! Every way in that may meet a call without a run id makes it here, so a
//! run id made by toolgate has one shape wherever it came from:
//!
//! - [`RunId::fresh`] — a process or connection that is one run (`mcp
//!   wrap`, an MCP upstream reached without a session): `<origin>-<uuid>`;
//! - [`RunId::derived`] — an opaque key that names the run but may not be
//!   a run id (an MCP session id): `<origin>-<digest of the key>`;
//! - [`RunId::fixed`] — a fixed run named by the program (a hook call
//!   without a session: each call is its own process, so only a fixed name
//!   keeps its calls in one run for budgets, flows and cancellation).
//!
//! Each is total: the origin is cut to the run-id alphabet, so any text
//! makes a valid id and no caller needs a fallback. The UUID is an
//! argument because this crate reads no clock; callers pass
//! `uuid::Uuid::now_v7()`, so fresh ids sort by when their run began.

use sha2::{Digest, Sha256};

use super::{MAX_RUN_ID_LEN, RunId, allowed};

/// Hex digits of the digest in a [`RunId::derived`] id (128 bits).
const DERIVED_HEX: usize = 32;

/// Characters of a hyphenated UUID.
const UUID_LEN: usize = 36;

/// `origin` cut to the alphabet: lowercased, other characters dropped,
/// starting with a letter or digit, at most `max` characters; `run` when
/// nothing is left.
fn head(origin: &str, max: usize) -> String {
    let head: String = origin
        .to_ascii_lowercase()
        .bytes()
        .filter(|b| allowed(*b))
        .map(char::from)
        .skip_while(|c| !c.is_ascii_alphanumeric())
        .take(max)
        .collect();
    if head.is_empty() { "run".into() } else { head }
}

impl RunId {
    /// A new run for `origin`: `origin` cut to the alphabet, `-`, and
    /// `uuid` hyphenated (pass `Uuid::now_v7()`). A new UUID is a new run.
    pub fn fresh(origin: &str, uuid: uuid::Uuid) -> Self {
        let head = head(origin, MAX_RUN_ID_LEN - UUID_LEN - 1);
        Self(format!("{head}-{}", uuid.hyphenated()))
    }

    /// A run id for an opaque `key` that need not be a run id itself (an
    /// MCP session id): `prefix`, `-`, and the first 32 hex digits of the
    /// key's SHA-256. Deterministic, so one key is always one run, and
    /// exact, so two keys are two runs. `prefix` is cut to the alphabet
    /// (lowercased, other characters dropped); an empty one becomes `run`.
    pub fn derived(prefix: &str, key: &str) -> Self {
        let head = head(prefix, MAX_RUN_ID_LEN - DERIVED_HEX - 1);
        let digest = hex::encode(Sha256::digest(key.as_bytes()));
        Self(format!("{head}-{}", &digest[..DERIVED_HEX]))
    }

    /// The one run named `name` (cut to the alphabet, ending in a letter
    /// or digit; `run` when nothing is left): for calls that name no run
    /// and share no session or process, so all of them are one run.
    pub fn fixed(name: &str) -> Self {
        let mut id = head(name, MAX_RUN_ID_LEN);
        while id.ends_with(|c: char| !c.is_ascii_alphanumeric()) {
            id.pop();
        }
        Self(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Origins no run id could hold as they are.
    const ODD: &[&str] = &[
        "",
        "--",
        "mcp",
        "MCP-Server",
        "mcp-my server/v2",
        "-x-",
        "caf\u{e9}\u{200b}",
        "x.",
        "\u{ff58}",
    ];

    fn uuid(n: u128) -> uuid::Uuid {
        uuid::Uuid::from_u128(n)
    }

    #[test]
    fn fresh_ids_are_valid_for_any_origin_and_distinct_per_uuid() {
        let long = "p".repeat(500);
        for origin in ODD.iter().copied().chain([long.as_str()]) {
            let a = RunId::fresh(origin, uuid(1));
            assert!(RunId::is_canonical(a.as_str()), "{origin:?}: {a}");
            assert!(a.as_str().len() <= MAX_RUN_ID_LEN);
            assert_eq!(a, RunId::fresh(origin, uuid(1)));
            assert_ne!(a, RunId::fresh(origin, uuid(2)), "{origin:?}");
        }
        let id = uuid::Uuid::parse_str("0190b7a2-7c1e-7d3f-9a4b-123456789abc").unwrap();
        assert_eq!(
            RunId::fresh("mcp", id).as_str(),
            "mcp-0190b7a2-7c1e-7d3f-9a4b-123456789abc"
        );
        assert_eq!(
            RunId::fresh("mcp-Tickets", id).as_str(),
            "mcp-tickets-0190b7a2-7c1e-7d3f-9a4b-123456789abc"
        );
        assert!(RunId::fresh("", id).as_str().starts_with("run-0190b7a2"));
        assert_eq!(RunId::fresh(&long, id).as_str().len(), MAX_RUN_ID_LEN);
        // Two calls with new v7 UUIDs are two runs.
        let (a, b) = (uuid::Uuid::now_v7(), uuid::Uuid::now_v7());
        assert_ne!(RunId::fresh("mcp", a), RunId::fresh("mcp", b));
    }

    #[test]
    fn derived_ids_are_valid_exact_and_stable() {
        let a = RunId::derived("mcp-session", "Abc/=+");
        assert!(RunId::is_canonical(a.as_str()), "{a}");
        assert!(a.as_str().starts_with("mcp-session-"));
        assert_eq!(a, RunId::derived("mcp-session", "Abc/=+"));
        assert_ne!(a, RunId::derived("mcp-session", "abc/=+"));
        assert!(RunId::derived("--", "k").as_str().starts_with("run-"));
        let long = RunId::derived(&"p".repeat(500), "k");
        assert_eq!(long.as_str().len(), MAX_RUN_ID_LEN);
        for origin in ODD {
            let id = RunId::derived(origin, "session \u{0}");
            assert!(RunId::is_canonical(id.as_str()), "{origin:?}: {id}");
        }
    }

    #[test]
    fn fixed_ids_are_valid_and_keep_a_valid_name() {
        assert_eq!(RunId::fixed("hook").as_str(), "hook");
        assert_eq!(RunId::fixed("run-1").as_str(), "run-1");
        assert_eq!(RunId::fixed("Hook-").as_str(), "hook");
        assert_eq!(RunId::fixed("--").as_str(), "run");
        assert_eq!(
            RunId::fixed(&"p".repeat(500)).as_str().len(),
            MAX_RUN_ID_LEN
        );
        for origin in ODD {
            let id = RunId::fixed(origin);
            assert!(RunId::is_canonical(id.as_str()), "{origin:?}: {id}");
            assert_eq!(id, RunId::fixed(origin));
        }
    }
}
