//! `toolgate wakeups serve`: one `LISTEN` for a whole fleet.
//!
//! Behind a transaction pooler a sidecar cannot `LISTEN`, and a direct
//! connection each would cost the server a connection per pod. This relay
//! holds one listening connection (straight to the server) and tells each
//! sidecar that subscribed for its tenant, over a server-sent-events
//! stream, that a stop was recorded; the sidecar then reads what stopped
//! with its own credentials. The events carry nothing else (no run ids, no
//! approval ids), so a subscriber learns only when a tenant's stops happen.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use clap::{Args, Subcommand};
use futures_util::{StreamExt, stream};
use tokio::sync::{Semaphore, broadcast};
use toolgate_sidecar::database::DatabaseArgs;
use toolgate_sidecar::wake::{RELAY_PATH, STOP_EVENT};
use toolgate_store::{Store, wakeup_is_stop};

use crate::cli_error::CliError;

/// Arguments of `toolgate wakeups`.
#[derive(Debug, Args)]
pub struct WakeupsArgs {
    #[command(subcommand)]
    command: WakeupsCommand,
}

#[derive(Debug, Subcommand)]
enum WakeupsCommand {
    /// Serve stop wake-ups to sidecars (`--wakeups-url`) from one `LISTEN`.
    Serve {
        /// The database, reached directly (a role that may read approvals:
        /// the admin role, or a tenant's for that tenant alone).
        #[command(flatten)]
        database: DatabaseArgs,
        /// Where to serve `GET /v1/wakeups/{tenant}`.
        #[arg(long, default_value = "127.0.0.1:8790")]
        listen: SocketAddr,
        /// Most sidecars subscribed at once; more are answered 503.
        #[arg(long, default_value_t = 20_000)]
        max_subscribers: usize,
    },
}

/// Time between keep-alive comments on an idle stream, so proxies and the
/// sidecar notice a dead connection.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

#[derive(Clone)]
struct Relay {
    store: Store,
    seats: Arc<Semaphore>,
}

/// Serves until the process is stopped.
pub fn run(args: WakeupsArgs, log_json: bool) -> Result<ExitCode, CliError> {
    let WakeupsCommand::Serve {
        database,
        listen,
        max_subscribers,
    } = args.command;
    let _telemetry = crate::telemetry::init(log_json, "toolgate-wakeups")?;
    crate::runtime()?.block_on(async move {
        let store = database.connect().await?;
        let relay = Relay {
            store,
            seats: Arc::new(Semaphore::new(max_subscribers)),
        };
        let app = axum::Router::new()
            .route(
                &format!("{RELAY_PATH}/{{tenant}}"),
                axum::routing::get(subscribe),
            )
            .with_state(relay);
        let listener = tokio::net::TcpListener::bind(listen)
            .await
            .map_err(|source| CliError::Io {
                path: listen.to_string(),
                source,
            })?;
        tracing::info!(%listen, "serving stop wake-ups");
        let serve = axum::serve(listener, app).with_graceful_shutdown(crate::wait_for_signal());
        serve.await.map_err(|source| CliError::Io {
            path: listen.to_string(),
            source,
        })?;
        Ok(ExitCode::SUCCESS)
    })
}

/// `GET /v1/wakeups/{tenant}`: an event `stop` each time one of the
/// tenant's runs or scopes is stopped, and once on connecting.
async fn subscribe(State(relay): State<Relay>, Path(tenant): Path<String>) -> Response {
    if let Err(e) = toolgate_store::check_field("tenant", &tenant) {
        return refusal(StatusCode::BAD_REQUEST, "invalid_tenant", &e.to_string());
    }
    let Ok(seat) = relay.seats.clone().try_acquire_owned() else {
        return refusal(
            StatusCode::SERVICE_UNAVAILABLE,
            "too_many_subscribers",
            "the relay holds as many subscribers as it may",
        );
    };
    let Some(rx) = relay.store.wakeups(&tenant).await else {
        return refusal(
            StatusCode::SERVICE_UNAVAILABLE,
            "wakeups_unavailable",
            "the relay cannot listen on this database (SQLite, or a pooler without \
             --database-direct-url)",
        );
    };
    let events = stream::unfold((rx, seat), |(mut rx, seat)| async move {
        loop {
            match rx.recv().await {
                Ok(payload) if wakeup_is_stop(&payload) => break,
                Ok(_) => continue,
                Err(broadcast::error::RecvError::Lagged(_)) => break,
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
        Some((Ok::<_, std::convert::Infallible>(stop_event()), (rx, seat)))
    });
    Sse::new(stream::once(async { Ok(stop_event()) }).chain(events))
        .keep_alive(KeepAlive::new().interval(KEEP_ALIVE))
        .into_response()
}

fn stop_event() -> Event {
    Event::default().event(STOP_EVENT).data("{}")
}

/// The one error body of every toolgate API.
fn refusal(status: StatusCode, code: &str, message: &str) -> Response {
    (
        status,
        axum::Json(serde_json::json!({"error": {"code": code, "message": message}})),
    )
        .into_response()
}
