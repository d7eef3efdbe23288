//! The agent API as one OpenAPI 3.1 document, generated from the Rust
//! types: `components.schemas` from their `JsonSchema` derives (JSON
//! Schema 2020-12, OpenAPI 3.1's dialect), `paths` from [`ROUTES`], one
//! row per route of [`super::router`] (the ops port's `/metrics` is left
//! out: Prometheus text, not the agent's). `docs/agent-api.openapi.json`
//! holds [`document`]; a test keeps the two equal (`TOOLGATE_BLESS=1`
//! rewrites the file) and the clients' tests read it.

use schemars::generate::SchemaSettings;
use schemars::{JsonSchema, SchemaGenerator};
use serde_json::{Map, Value, json};
use toolgate_contract::agent_api::{
    self as agent_api, AuthorizeRequest, AuthorizeResponse, ErrorBody, MessageScreen,
    RecordedRefusal, RefusalRequest, Screened,
};
use toolgate_contract::errors as codes;
use toolgate_gate::intents::{IntentView, OpenIntent, OpenIntents};
use toolgate_gate::runs::{
    BatchRequest, BatchResponse, CancelRequest, CancelResponse, PodCancelResponse,
};
use toolgate_gate::workspace::{FileRead, FileWritten, Listing, Stat};
use toolgate_gate::{
    ApprovalView, BeginIntentRequest, CompleteRequest, Governed, PathRequest, WriteRequest,
};
use toolgate_policy::Verdict;

use super::{EffectSentRequest, VisibleToolsRequest};

mod bodies;

use bodies::{BegunIntent, VisibleTools};

/// Writes `T`'s schema into a generator's components; its `$ref` (or an
/// inline schema for a type without a name).
type SchemaFn = fn(&mut SchemaGenerator) -> schemars::Schema;

fn schema<T: JsonSchema>(generator: &mut SchemaGenerator) -> schemars::Schema {
    generator.subschema_for::<T>()
}

/// A query parameter: name, schema, meaning.
pub type Query = (&'static str, fn() -> Value, &'static str);

/// What a route answers besides an `ErrorBody`.
#[derive(Clone, Copy)]
pub enum Answer {
    /// JSON of this schema.
    Json(u16, SchemaFn),
    /// Any JSON the other side defines (an MCP server, an agent runner).
    Foreign(u16, &'static str),
    /// `text/plain`: status, meaning.
    Text(u16, &'static str),
    /// `405` (`text/plain`) with `Allow` naming the methods that are: a
    /// method routed only to be refused.
    NotAllowed(&'static str),
}

/// One route of the agent API.
pub struct Route {
    /// `get`, `post` or `delete`.
    pub method: &'static str,
    /// OpenAPI path, `{name}` for a path parameter.
    pub path: &'static str,
    /// One line for people.
    pub summary: &'static str,
    /// Query parameters: name, schema, meaning.
    pub query: &'static [Query],
    /// The JSON body it takes, and whether the body may be empty.
    pub body: Option<(SchemaFn, bool)>,
    /// Its answers other than errors (a success, a refusal that is not
    /// an `ErrorBody`), each under its own status.
    pub answers: &'static [Answer],
    /// The error codes it can answer with (each with its status from
    /// [`codes::ALL`]), besides [`GUARD`]'s.
    pub errors: &'static [&'static str],
}

/// What the request guard refuses on every route.
pub const GUARD: &[&str] = &[codes::HOST_NOT_ALLOWED, codes::ORIGIN_NOT_ALLOWED];

/// A body read by `api::body`: a malformed one with a `run_id` member
/// that is not a run id is `invalid_run_id`, whichever route it went to.
const JSON_BODY: [&str; 4] = [
    codes::INVALID_REQUEST,
    codes::INVALID_RUN_ID,
    codes::UNSUPPORTED_MEDIA_TYPE,
    codes::BODY_TOO_LARGE,
];
const STORE: [&str; 3] = [
    codes::STORE_UNAVAILABLE,
    codes::PERMISSION_DENIED,
    codes::STORED_DATA_CORRUPT,
];

/// `a ++ b`, at compile time.
const fn concat<const N: usize>(parts: &[&[&'static str]]) -> [&'static str; N] {
    let mut out = [""; N];
    let (mut i, mut n) = (0, 0);
    while i < parts.len() {
        let mut j = 0;
        while j < parts[i].len() {
            out[n] = parts[i][j];
            n += 1;
            j += 1;
        }
        i += 1;
    }
    assert!(n == N, "concat: wrong length");
    out
}

const DECIDE: [&str; 8] = concat(&[&JSON_BODY, &STORE, &[codes::APPROVAL_EXPIRED]]);
const WRITE: [&str; 7] = concat(&[&JSON_BODY, &STORE]);
const RUN_READ: [&str; 5] = concat(&[&STORE, &[codes::INVALID_RUN_ID, codes::INVALID_REQUEST]]);
/// An unknown decision is `decision_not_allowed`, not `not_found`.
const BEGIN_INTENT: [&str; 10] = concat(&[
    &WRITE,
    &[
        codes::DECISION_NOT_ALLOWED,
        codes::INTENT_DIGEST_MISMATCH,
        codes::INTENT_EXISTS,
    ],
]);
const CLOSE_INTENT: [&str; 9] = concat(&[&WRITE, &[codes::NOT_FOUND, codes::CONFLICT]]);
const APPROVAL: [&str; 5] = concat(&[&STORE, &[codes::INVALID_REQUEST, codes::NOT_FOUND]]);
const WORKSPACE: [&str; 24] = concat(&[
    &WRITE,
    &[
        codes::POLICY_DENIED,
        codes::APPROVAL_REQUIRED,
        codes::WORKSPACE_INVALID_PATH,
        codes::WORKSPACE_INVALID_ID,
        codes::WORKSPACE_NOT_TEXT,
        codes::WORKSPACE_WRONG_KIND,
        codes::WORKSPACE_NOT_REGULAR_FILE,
        codes::WORKSPACE_ESCAPE,
        codes::WORKSPACE_HARDLINK,
        codes::WORKSPACE_NOT_FOUND,
        codes::WORKSPACE_CHANGED,
        codes::WORKSPACE_TOO_LARGE,
        codes::WORKSPACE_IO,
        codes::WORKSPACE_UNUSABLE,
        codes::WORKSPACE_BUSY,
        codes::WORKSPACE_TIMEOUT,
        codes::APPROVAL_EXPIRED,
    ],
]);
/// A message to the gateway (`X-Toolgate-Run-Id` not a run id:
/// `invalid_run_id`; the body is limited as the API's are; a body that is
/// not a JSON-RPC message is answered in JSON-RPC, not here).
const MCP: [&str; 6] = [
    codes::MCP_UNKNOWN_SERVER,
    codes::INVALID_RUN_ID,
    codes::MCP_UPSTREAM_NOT_ALLOWED,
    codes::MCP_UPSTREAM_UNAVAILABLE,
    codes::BODY_TOO_LARGE,
    codes::UNSUPPORTED_MEDIA_TYPE,
];

fn wait_param() -> Value {
    json!({"type": "integer", "minimum": 0, "maximum": toolgate_contract::agent_api::MAX_WAIT_SECONDS})
}

fn string_param() -> Value {
    json!({"type": "string"})
}

fn pending_param() -> Value {
    json!({"type": "string", "enum": ["pending"]})
}

type Authorized = AuthorizeResponse<Verdict>;
/// The gate's run status with the run id as it is written (a string).
type RunStatus = agent_api::RunStatus<String, OpenIntent, toolgate_store::FlowLabel>;

/// Every route of the agent API, in the router's order.
pub const ROUTES: &[Route] = &[
    Route {
        method: "post",
        path: "/v1/authorize",
        summary: "Decide one tool call.",
        query: &[],
        body: Some((schema::<AuthorizeRequest>, false)),
        answers: &[Answer::Json(200, schema::<Authorized>)],
        errors: &DECIDE,
    },
    Route {
        method: "post",
        path: "/v1/authorize/batch",
        summary: "Decide up to 64 calls, and whether they may run at once.",
        query: &[],
        body: Some((schema::<BatchRequest>, false)),
        answers: &[Answer::Json(200, schema::<BatchResponse>)],
        errors: &DECIDE,
    },
    Route {
        method: "post",
        path: "/v1/hooks/{format}",
        summary: "An agent runner's pre-tool hook (claude-code, codex, gemini, cursor, copilot): \
                  the runner's own input and output; every decision is HTTP 200.",
        query: &[(
            "wait",
            wait_param,
            "Seconds to wait for an escalation's answer.",
        )],
        body: None,
        answers: &[Answer::Foreign(200, "The runner's own hook output.")],
        errors: &[codes::NO_ROUTE, codes::UNSUPPORTED_MEDIA_TYPE],
    },
    Route {
        method: "post",
        path: "/v1/refusals",
        summary: "Record a refusal an edge made on its own, as a denial.",
        query: &[],
        body: Some((schema::<RefusalRequest>, false)),
        answers: &[Answer::Json(201, schema::<RecordedRefusal>)],
        errors: &WRITE,
    },
    Route {
        method: "post",
        path: "/v1/messages/screen",
        summary: "Whether a run's MCP message (not a tools/call) may pass its flow rules.",
        query: &[],
        body: Some((schema::<MessageScreen>, false)),
        answers: &[Answer::Json(200, schema::<Screened>)],
        errors: &WRITE,
    },
    Route {
        method: "get",
        path: "/v1/runs/{run_id}",
        summary: "A run's cancellation, budgets, open intents and flow labels.",
        query: &[],
        body: None,
        answers: &[Answer::Json(200, schema::<RunStatus>)],
        errors: &RUN_READ,
    },
    Route {
        method: "post",
        path: "/v1/runs/{run_id}/cancel",
        summary: "Cancel a run (the body may be empty).",
        query: &[],
        body: Some((schema::<CancelRequest>, true)),
        answers: &[Answer::Json(200, schema::<CancelResponse>)],
        errors: &WRITE,
    },
    Route {
        method: "post",
        path: "/v1/pod/cancel",
        summary: "Cancel every run of this pod (the body may be empty).",
        query: &[],
        body: Some((schema::<CancelRequest>, true)),
        answers: &[Answer::Json(200, schema::<PodCancelResponse>)],
        errors: &WRITE,
    },
    Route {
        method: "post",
        path: "/v1/intents",
        summary: "Record the intent of an allowed high-risk call before its effect.",
        query: &[],
        body: Some((schema::<BeginIntentRequest>, false)),
        answers: &[Answer::Json(201, schema::<BegunIntent>)],
        errors: &BEGIN_INTENT,
    },
    Route {
        method: "get",
        path: "/v1/intents",
        summary: "A run's open intents, for resume.",
        query: &[
            ("run_id", string_param, "The run."),
            ("status", pending_param, "Only `pending` is supported."),
        ],
        body: None,
        answers: &[Answer::Json(200, schema::<OpenIntents>)],
        errors: &RUN_READ,
    },
    Route {
        method: "post",
        path: "/v1/intents/{id}/effect-sent",
        summary: "Mark that the intent's effect is about to be sent (the body may be empty).",
        query: &[],
        body: Some((schema::<EffectSentRequest>, true)),
        answers: &[Answer::Json(200, schema::<IntentView>)],
        errors: &CLOSE_INTENT,
    },
    Route {
        method: "post",
        path: "/v1/intents/{id}/complete",
        summary: "Close an intent with its outcome.",
        query: &[],
        body: Some((schema::<CompleteRequest>, false)),
        answers: &[Answer::Json(200, schema::<IntentView>)],
        errors: &CLOSE_INTENT,
    },
    Route {
        method: "get",
        path: "/v1/approvals/{id}",
        summary: "An approval; `?wait=` long-polls until it is resolved.",
        query: &[("wait", wait_param, "Seconds to wait for a resolution.")],
        body: None,
        answers: &[Answer::Json(200, schema::<ApprovalView>)],
        errors: &APPROVAL,
    },
    Route {
        method: "post",
        path: "/v1/tools/visible",
        summary: "Which of these tools a gateway may offer the run.",
        query: &[],
        body: Some((schema::<VisibleToolsRequest>, false)),
        answers: &[Answer::Json(200, schema::<VisibleTools>)],
        errors: &JSON_BODY,
    },
    Route {
        method: "post",
        path: "/mcp/{server}",
        summary: "The MCP gateway to upstream NAME: MCP's own messages, each call governed; \
                  the run is named by the X-Toolgate-Run-Id header.",
        query: &[],
        body: None,
        answers: &[Answer::Foreign(
            200,
            "The upstream's MCP answer, JSON or an SSE stream (the upstream's own status \
             passes through, 202 for a notification); the gateway's own JSON-RPC refusals \
             are 200, or 400 for a header that contradicts the body and 404 for an \
             `Mcp-Session-Id` the upstream never issued.",
        )],
        errors: &MCP,
    },
    Route {
        method: "get",
        path: "/mcp/{server}",
        summary: "Refused: no server-initiated stream passes the gateway (only POST \
                  carries MCP messages).",
        query: &[],
        body: None,
        answers: &[Answer::NotAllowed("POST")],
        errors: &[codes::MCP_UNKNOWN_SERVER],
    },
    Route {
        method: "delete",
        path: "/mcp/{server}",
        summary: "Refused: no session ending passes the gateway (only POST carries \
                  MCP messages).",
        query: &[],
        body: None,
        answers: &[Answer::NotAllowed("POST")],
        errors: &[codes::MCP_UNKNOWN_SERVER],
    },
    Route {
        method: "post",
        path: "/v1/workspace/read",
        summary: "Read a UTF-8 file of the run's workspace (the governed call workspace.read).",
        query: &[],
        body: Some((schema::<PathRequest>, false)),
        answers: &[Answer::Json(200, schema::<Governed<FileRead>>)],
        errors: &WORKSPACE,
    },
    Route {
        method: "post",
        path: "/v1/workspace/write",
        summary: "Write a UTF-8 file of the run's workspace.",
        query: &[],
        body: Some((schema::<WriteRequest>, false)),
        answers: &[Answer::Json(200, schema::<Governed<FileWritten>>)],
        errors: &WORKSPACE,
    },
    Route {
        method: "post",
        path: "/v1/workspace/list",
        summary: "List a directory of the run's workspace.",
        query: &[],
        body: Some((schema::<PathRequest>, false)),
        answers: &[Answer::Json(200, schema::<Governed<Listing>>)],
        errors: &WORKSPACE,
    },
    Route {
        method: "post",
        path: "/v1/workspace/stat",
        summary: "Stat a path of the run's workspace.",
        query: &[],
        body: Some((schema::<PathRequest>, false)),
        answers: &[Answer::Json(200, schema::<Governed<Stat>>)],
        errors: &WORKSPACE,
    },
    Route {
        method: "get",
        path: "/healthz",
        summary: "Liveness.",
        query: &[],
        body: None,
        answers: &[Answer::Text(200, "`ok`.")],
        errors: &[],
    },
    Route {
        method: "get",
        path: "/readyz",
        summary: "Readiness: a live bundle and a reachable database (503 otherwise, same body).",
        query: &[],
        body: None,
        answers: &[
            Answer::Foreign(
                200,
                "Ready: `{ready, bundle, bundle_expired, last_rejected_bundle, database}`.",
            ),
            Answer::Foreign(
                503,
                "Not ready (no live bundle, or the database unreachable): the same body, \
                 `ready: false`.",
            ),
        ],
        errors: &[],
    },
];

fn generator(settings: SchemaSettings) -> SchemaGenerator {
    settings
        .with(|s| s.definitions_path = "/components/schemas".into())
        .into_generator()
}

fn json_content(schema: impl Into<Value>) -> Value {
    json!({"application/json": {"schema": schema.into()}})
}

/// The path parameters `{name}` of `path`.
fn path_params(path: &str) -> Vec<Value> {
    path.split('/')
        .filter_map(|seg| seg.strip_prefix('{')?.strip_suffix('}'))
        .map(|name| json!({"name": name, "in": "path", "required": true, "schema": {"type": "string"}}))
        .collect()
}

/// The error answers of a route: one per status, its codes listed.
fn error_responses(route: &Route, error_body: &Value) -> Map<String, Value> {
    let mut by_status: std::collections::BTreeMap<u16, Vec<&str>> = Default::default();
    for code in GUARD.iter().chain(route.errors) {
        let entry = by_status.entry(codes::status_of(code)).or_default();
        if !entry.contains(code) {
            entry.push(code);
        }
    }
    by_status
        .into_iter()
        .map(|(status, mut list)| {
            list.sort_unstable();
            let answer = json!({
                "description": format!("An error: {}.", list.join(", ")),
                "content": json_content(error_body.clone()),
                "x-error-codes": list,
            });
            (status.to_string(), answer)
        })
        .collect()
}

fn operation(route: &Route, req: &mut SchemaGenerator, res: &mut SchemaGenerator) -> Value {
    let error_body = Value::from(schema::<ErrorBody<Verdict>>(res));
    let mut responses = error_responses(route, &error_body);
    let text = json!({"text/plain": {"schema": {"type": "string"}}});
    for answer in route.answers {
        let (status, described) = match *answer {
            Answer::Json(status, f) => (
                status,
                json!({"description": "Success.", "content": json_content(f(res))}),
            ),
            Answer::Foreign(status, what) => (
                status,
                json!({"description": what, "content": json_content(json!({}))}),
            ),
            Answer::Text(status, what) => (
                status,
                json!({"description": what, "content": text.clone()}),
            ),
            Answer::NotAllowed(allow) => (
                405,
                json!({
                    "description": format!("Not allowed here: only {allow}."),
                    "headers": {"Allow": {"required": true, "schema": {"type": "string", "const": allow}}},
                    "content": text.clone(),
                }),
            ),
        };
        let clash = responses.insert(status.to_string(), described);
        assert!(
            clash.is_none(),
            "{} {}: two answers under {status}",
            route.method,
            route.path
        );
    }
    let mut parameters = path_params(route.path);
    for (name, schema, meaning) in route.query {
        parameters.push(json!({"name": name, "in": "query", "required": *name == "run_id", "schema": schema(), "description": meaning}));
    }
    let mut op = json!({
        "operationId": operation_id(route),
        "summary": route.summary,
        "responses": responses,
    });
    if !parameters.is_empty() {
        op["parameters"] = parameters.into();
    }
    if let Some((body, optional)) = route.body {
        op["requestBody"] = json!({"required": !optional, "content": json_content(body(req))});
    }
    op
}

/// `post_v1_runs_run_id_cancel`.
fn operation_id(route: &Route) -> String {
    let path: String = route
        .path
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    let mut id = format!("{}_{}", route.method, path.trim_matches('_'));
    while id.contains("__") {
        id = id.replace("__", "_");
    }
    id
}

/// The OpenAPI 3.1 document of the agent API. Requests are described as
/// the sidecar reads them, answers as it writes them (one schema name,
/// one meaning: a type met on both sides must come out the same).
pub fn document() -> Value {
    let mut req = generator(SchemaSettings::draft2020_12().for_deserialize());
    let mut res = generator(SchemaSettings::draft2020_12().for_serialize());
    let mut paths = Map::new();
    for route in ROUTES {
        let item = paths.entry(route.path).or_insert_with(|| json!({}));
        item[route.method] = operation(route, &mut req, &mut res);
    }
    let mut schemas = res.take_definitions(true);
    for (name, schema) in req.take_definitions(true) {
        if let Some(other) = schemas.get(&name) {
            assert_eq!(
                other, &schema,
                "{name} reads differently than it is written"
            );
        }
        schemas.insert(name, schema);
    }
    json!({
        "openapi": "3.1.0",
        "jsonSchemaDialect": "https://json-schema.org/draft/2020-12/schema",
        "info": {
            "title": "toolgate sidecar agent API",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "The loopback API an agent's tool calls go through \
                (docs/sidecar.md). Generated from the Rust types by \
                crates/toolgate-sidecar/src/api/openapi.rs; every refusal is \
                `ErrorBody`, its `error.code` one of `ErrorCode`.",
        },
        "servers": [{"url": toolgate_contract::names::SIDECAR_URL}],
        "paths": paths,
        "components": {"schemas": schemas},
    })
}

/// [`document`] as `docs/agent-api.openapi.json` holds it.
pub fn document_text() -> String {
    let mut text = serde_json::to_string_pretty(&document()).expect("a JSON value prints");
    text.push('\n');
    text
}

#[cfg(test)]
mod tests;
