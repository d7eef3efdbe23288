//! The requests forwarded under the gateway's own ids and not yet answered.
//! [`InFlight`] is the one owner of that map: the relay forwards a client's
//! request and takes it back when the answer comes (or never will), a
//! deferred call forwards the held request, and nothing else touches it.
//!
//! The gateway's id replaces the client's on the way to the server, so an
//! answer is matched by that exact string (no spelling of a number passes
//! an answer around the gateway) and a forged answer matches nothing.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use serde_json::Value;
use toolgate_policy::RunId;

/// Prefix of the ids the gateway forwards requests under.
pub(crate) const ID_PREFIX: &str = "toolgate-";

/// What a forwarded request's answer must go through.
#[derive(Debug, Clone)]
pub(crate) enum Awaiting {
    /// `tools/list`: filtered by the profile; `first_page`: asked without
    /// a cursor, so a new listing starts.
    List { first_page: bool },
    /// `tools/call`: closes the intent of an allowed high-risk call.
    Call { intent: Option<String> },
    /// `server/discover`: a result means protocol 2026-07-28.
    Discover,
    /// A deferred call, sent after its approval: its answer ends `task`
    /// (and closes `intent`).
    Task {
        task: String,
        intent: Option<String>,
    },
    /// Anything else: only its id is restored.
    Plain,
}

/// One request forwarded under the gateway's id.
#[derive(Debug, Clone)]
pub(crate) struct Forwarded {
    /// The client's id, given back with the answer.
    pub(crate) original: Value,
    pub(crate) awaiting: Awaiting,
    /// The run and MCP session of the request, so a cancellation names
    /// only a request of its own.
    pub(crate) run_id: RunId,
    pub(crate) session: Option<String>,
}

/// The requests in flight, by the gateway's id.
#[derive(Default)]
pub(crate) struct InFlight {
    requests: Mutex<HashMap<String, Forwarded>>,
}

impl InFlight {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Forwarded>> {
        self.requests.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Puts a new id of the gateway's in `request` (a JSON-RPC request),
    /// keeps the client's with what its answer `awaiting`, and returns the
    /// new id. Random, so no one stream's server (or client) can guess the
    /// id of a request in flight on another.
    pub(crate) fn forward(
        &self,
        request: &mut Value,
        awaiting: Awaiting,
        run_id: &RunId,
        session: Option<&str>,
    ) -> String {
        let ours = format!("{ID_PREFIX}{}", uuid::Uuid::new_v4().simple());
        let original = request["id"].take();
        request["id"] = Value::String(ours.clone());
        let forwarded = Forwarded {
            original,
            awaiting,
            run_id: run_id.clone(),
            session: session.map(str::to_owned),
        };
        self.lock().insert(ours.clone(), forwarded);
        ours
    }

    /// Takes request `ours` out: its answer came, or never will. `None`
    /// when no such request is in flight (answered already, or never
    /// forwarded).
    pub(crate) fn take(&self, ours: &str) -> Option<Forwarded> {
        self.lock().remove(ours)
    }

    /// The gateway's id of the request the client of `run_id` and `session`
    /// sent as `named`, for its cancellation. A deferred call is never
    /// named so: no client's id stands for it any more.
    pub(crate) fn named_by(
        &self,
        named: &Value,
        run_id: &RunId,
        session: Option<&str>,
    ) -> Option<String> {
        self.lock()
            .iter()
            .find(|(_, f)| {
                &f.original == named
                    && &f.run_id == run_id
                    && f.session.as_deref() == session
                    && !matches!(f.awaiting, Awaiting::Task { .. })
            })
            .map(|(ours, _)| ours.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_request_travels_under_a_fresh_id_and_comes_back_once() {
        let book = InFlight::default();
        let run = RunId::parse("run-in-flight").unwrap();
        let mut request = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
        let ours = book.forward(
            &mut request,
            Awaiting::List { first_page: true },
            &run,
            Some("s1"),
        );
        assert!(ours.starts_with(ID_PREFIX));
        assert_eq!(request["id"], json!(ours));
        let mut again = json!({"id": 1, "method": "ping"});
        assert_ne!(book.forward(&mut again, Awaiting::Plain, &run, None), ours);

        // Named only by its own run and session, with the client's exact id.
        assert_eq!(
            book.named_by(&json!(1), &run, Some("s1")),
            Some(ours.clone())
        );
        let other = RunId::parse("run-other").unwrap();
        assert_eq!(book.named_by(&json!(1), &other, Some("s1")), None);
        assert_eq!(book.named_by(&json!(1), &run, Some("s2")), None);
        assert_eq!(book.named_by(&json!("1"), &run, Some("s1")), None);

        let answered = book.take(&ours).unwrap();
        assert_eq!(answered.original, json!(1));
        assert!(book.take(&ours).is_none(), "an answer is taken once");
        assert!(book.take("toolgate-forged").is_none());
    }

    #[test]
    fn a_deferred_call_is_never_named_by_a_cancellation() {
        let book = InFlight::default();
        let run = RunId::parse("run-in-flight").unwrap();
        let mut held = json!({"id": 9, "method": "tools/call"});
        let awaiting = Awaiting::Task {
            task: "toolgate-task-x".into(),
            intent: None,
        };
        let ours = book.forward(&mut held, awaiting, &run, None);
        assert_eq!(book.named_by(&json!(9), &run, None), None);
        assert!(book.take(&ours).is_some());
    }
}
