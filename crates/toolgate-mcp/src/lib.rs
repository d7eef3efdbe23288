//! toolgate as an MCP gateway: an agent's MCP client talks to toolgate,
//! toolgate talks to the real MCP server, and every `tools/call` is decided
//! by the pod's sidecar before the server sees it.
//!
//! - [`gateway`]: the decisions, independent of the transport, behind a
//!   [`gateway::Decider`] (the sidecar over HTTP, or the sidecar itself),
//!   and the record of the gateway's own refusals.
//! - [`message`]: the pure part — naming (`SERVER.TOOL` is the policy
//!   tool), filtering a `tools/list` result, the JSON-RPC shapes of a refusal.
//! - [`edges`]: what the gateway refuses or rewrites on its own (messages
//!   screened by flow rules, `Mcp-Param-*` headers).
//! - [`param_headers`]: `Mcp-Param-*` headers checked against the body and
//!   made anew from what is forwarded.
//! - [`protocol`]: what of a client's message may reach a server at all:
//!   the protocol's methods with their own parameters, cursors the server
//!   returned; anything else is a tool the profile must declare.
//! - [`relay`]: every message between client and server, judged in one
//!   place for both transports: ids the gateway controls, unreadable
//!   answers withheld, server requests decided.
//! - [`sse`]: server-sent events read incrementally, bounded.
//! - [`sidecar`]: the [`gateway::Decider`] of `toolgate mcp wrap`: the
//!   sidecar's agent API through `toolgate-client`.
//! - [`stdio`]: `toolgate mcp wrap`, which runs a stdio MCP server as a child
//!   and speaks MCP on its own stdin/stdout.
//! - [`kept`]: held tasks kept in a [`kept::TaskStore`] (the sidecar's
//!   database), so a restarted sidecar resumes them and forwards each call
//!   at most once (`keeping`: the gateway's side of that).
//! - [`tasks`]: escalated calls held as tasks (protocol 2026-07-28's tasks
//!   extension), so a client that declares it is not blocked on a human.
//!
//! Fails closed: a call the sidecar cannot be asked about is refused, never
//! forwarded.
//!
//! Modules depend one way (rustdoc links aside): [`gateway`] holds the
//! decisions and the state they need; the modules that drive it add their
//! methods to [`gateway::Gateway`] from above and are never called from it.
//! The requests forwarded under the gateway's ids are one type's,
//! `in_flight::InFlight`; the tasks' store is told of ends through a hook.
//!
//! ```text
//! before: gateway ⇄ relay    Gateway's map held relay::InFlight; relay and
//!                            deferred each inserted into it by hand
//!         gateway ⇄ edges    gateway recorded refusals through edges
//!         gateway → tasks → kept → gateway
//! after:  stdio → relay → deferred → keeping, edges → gateway
//!         gateway → decider, in_flight, tasks, kept, definition, protocol
//!         kept → tasks → message          (no arrow back up)
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod caller_trace;
mod decider;
mod deferred;
mod definition;
pub mod edges;
pub mod gateway;
mod in_flight;
mod keeping;
pub mod kept;
pub mod message;
pub mod param_headers;
pub mod protocol;
pub mod relay;
pub mod sidecar;
pub mod sse;
pub mod stdio;
pub mod tasks;

/// Everything the gateway reports.
#[derive(Debug, thiserror::Error)]
pub enum McpError {
    /// The sidecar could not be reached or answered something unusable.
    #[error("sidecar: {0}")]
    Sidecar(String),
    /// The sidecar answered with its error envelope.
    #[error("sidecar refused ({code}): {message}")]
    Refused {
        /// The stable error code (`invalid_request`, …).
        code: String,
        /// The sidecar's message.
        message: String,
    },
    /// The wrapped server could not be started or its pipes broke.
    #[error("server process: {0}")]
    Process(#[source] std::io::Error),
    /// Held tasks could not be read or written where they are kept.
    #[error("task store: {0}")]
    TaskStore(String),
}

impl McpError {
    /// Stable code for logs and refusal texts.
    pub fn code(&self) -> &str {
        match self {
            McpError::Sidecar(_) => "sidecar_unreachable",
            McpError::Refused { code, .. } => code,
            McpError::Process(_) => "server_process",
            McpError::TaskStore(_) => "mcp_task_store",
        }
    }
}
