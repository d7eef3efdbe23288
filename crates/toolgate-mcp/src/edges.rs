//! What the gateway refuses or rewrites on its own, around the policy's
//! decisions: messages other than `tools/call` screened by the run's flow
//! rules, and the `Mcp-Param-*` headers of a call. Its refusals are recorded
//! by [`Gateway::record_refusal`].

use serde_json::{Map, Value};

use crate::gateway::{Decider, Gateway, MessageScreen};

/// A refusal of the gateway's own, as [`Gateway::record_refusal`] records it.
pub use crate::gateway::EdgeRefusal;

/// Messages that pass unscreened when the sidecar cannot be asked.
const SESSION_PLUMBING: [&str; 5] = [
    "initialize",
    "notifications/initialized",
    "server/discover",
    "ping",
    "tools/list",
];

impl<D: Decider> Gateway<D> {
    /// Screens a message of the client other than a `tools/call` (which is
    /// decided in full) by the run's flow rules: `Some` with the refusal's
    /// text when it may not reach the server. An answer to the server's own
    /// request is screened as the method `response`. Fails closed.
    pub(crate) async fn screen(
        &self,
        message: &Value,
        run_id: &toolgate_policy::RunId,
    ) -> Option<String> {
        let method = match message.get("method") {
            None => "response",
            Some(m) => m.as_str().unwrap_or("unknown"),
        };
        // A `tools/call` is decided in full, and carries no other text (see
        // `protocol::admit`); any other message is screened with all it carries.
        if method == "tools/call" {
            return None;
        }
        let mut params = Map::new();
        for key in ["params", "result", "error"] {
            if let Some(v) = message.get(key) {
                params.insert(key.to_owned(), v.clone());
            }
        }
        let id = |text: &str| toolgate_policy::Id::parse(text.to_owned());
        let (Ok(server), Ok(method)) = (id(self.server()), id(method).or_else(|_| id("unknown")))
        else {
            return Some("toolgate: the message cannot be named; it was not passed on".into());
        };
        let screen = MessageScreen {
            run_id: run_id.clone(),
            server,
            method,
            params,
        };
        match self.decider().screen(&screen).await {
            Ok(s) if !s.refused => None,
            Ok(s) => Some(format!(
                "toolgate: flow_rule: the run may not send {} anything ({}); the message was not \
                 passed on",
                self.server(),
                s.matched_rule.unwrap_or_default()
            )),
            // Unscreened, only what starting a session and listing need
            // passes (their text is trimmed to names and versions): every
            // call is refused anyway while the sidecar cannot be asked.
            Err(crate::McpError::Sidecar(_))
                if SESSION_PLUMBING.contains(&screen.method.as_ref()) =>
            {
                None
            }
            Err(e) => Some(format!(
                "toolgate: {} ({e}); the message was not passed on",
                e.code()
            )),
        }
    }

    /// The `Mcp-Param-*` headers a `tools/call` message carries to the
    /// server (none for another message, or a tool the gateway does not
    /// know).
    pub fn param_headers(&self, message: &Value) -> Vec<(String, String)> {
        self.call_params(message)
            .map(|(decls, args)| crate::param_headers::headers(&decls, args))
            .unwrap_or_default()
    }

    /// Why the client's `Mcp-Param-*` headers disagree with a `tools/call`
    /// message's arguments, if they do.
    pub fn param_mismatch<'h>(
        &self,
        message: &Value,
        header: impl Fn(&str) -> Option<&'h str>,
    ) -> Option<String> {
        let (decls, args) = self.call_params(message)?;
        crate::param_headers::mismatch(&decls, args, header)
    }

    fn call_params<'m>(
        &self,
        message: &'m Value,
    ) -> Option<(
        Vec<crate::param_headers::ParamHeader>,
        &'m Map<String, Value>,
    )> {
        if message.get("method").and_then(Value::as_str) != Some("tools/call") {
            return None;
        }
        let name = message.pointer("/params/name")?.as_str()?;
        let args = message.pointer("/params/arguments")?.as_object()?;
        Some((self.definition(name)?.params, args))
    }

    /// The policy tool a message of `method` is about: `SERVER.METHOD`, or
    /// `SERVER.unknown` for a message without a usable method.
    pub fn method_tool(&self, method: Option<&str>) -> String {
        let method = method
            .filter(|m| toolgate_policy::Id::parse(m.to_string()).is_ok())
            .unwrap_or("unknown");
        crate::message::policy_tool(self.server(), method)
    }
}
