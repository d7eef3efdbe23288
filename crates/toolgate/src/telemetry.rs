//! Logs and traces for the long-running commands. Logs go to stderr
//! (`RUST_LOG` filters, JSON lines with `--log-json`). Traces are exported
//! over OTLP/HTTP when the standard `OTEL_*` variables name an endpoint,
//! and are off otherwise: nothing is exported to a default address.

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;
use toolgate_contract::TRACE_TARGET;
use toolgate_contract::env::otel;
use tracing_subscriber::filter::{EnvFilter, Targets};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{Layer, Registry};

use crate::cli_error::CliError;

/// Keeps the trace pipeline alive; dropping it flushes what is queued.
#[must_use = "dropping the guard stops exporting traces"]
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        if let Some(provider) = self.provider.take()
            && let Err(e) = provider.shutdown()
        {
            eprintln!("toolgate: flushing traces failed: {e}");
        }
    }
}

fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// Whether the environment asks for traces: an OTLP endpoint is named,
/// the exporter is not `none`, and the SDK is not disabled. A value this
/// build cannot honour is a start-up error, not silently no traces.
fn wanted() -> Result<bool, CliError> {
    if var(otel::SDK_DISABLED).is_some_and(|v| v.eq_ignore_ascii_case("true")) {
        return Ok(false);
    }
    match var(otel::TRACES_EXPORTER).as_deref() {
        None | Some("otlp") => {}
        Some("none") => return Ok(false),
        Some(other) => {
            return Err(CliError::Usage(format!(
                "{}={other:?}: toolgate exports traces over OTLP only (otlp or none)",
                otel::TRACES_EXPORTER
            )));
        }
    }
    Ok(var(otel::EXPORTER_OTLP_ENDPOINT).is_some()
        || var(otel::EXPORTER_OTLP_TRACES_ENDPOINT).is_some())
}

/// The tracer provider the environment describes, batching spans to the
/// OTLP endpoint; `service` is `service.name` unless `OTEL_SERVICE_NAME`
/// or `OTEL_RESOURCE_ATTRIBUTES` names one.
fn provider(service: &str) -> Result<SdkTracerProvider, CliError> {
    let protocol = match var(otel::EXPORTER_OTLP_PROTOCOL).as_deref() {
        None | Some("http/protobuf") => Protocol::HttpBinary,
        Some("http/json") => Protocol::HttpJson,
        Some(other) => {
            return Err(CliError::Usage(format!(
                "{}={other:?}: this build exports over http/protobuf or http/json (not gRPC); \
                 point it at the collector's OTLP/HTTP port (4318)",
                otel::EXPORTER_OTLP_PROTOCOL
            )));
        }
    };
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(protocol)
        .build()
        .map_err(|e| CliError::Usage(format!("OTLP trace exporter: {e}")))?;
    let named = var(otel::SERVICE_NAME).is_some()
        || var(otel::RESOURCE_ATTRIBUTES).is_some_and(|a| a.contains("service.name="));
    let mut resource = Resource::builder();
    if !named {
        resource = resource.with_service_name(service.to_owned());
    }
    Ok(SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource.build())
        .build())
}

/// Installs logging and, when the environment asks for it, trace export
/// for the command `service` (`toolgate-sidecar`, …).
pub fn init(json: bool, service: &str) -> Result<Telemetry, CliError> {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("info,kube=warn"))
        // Trace spans are for the exporter, never for the log lines.
        .add_directive(
            format!("{TRACE_TARGET}=off")
                .parse()
                .map_err(|e| CliError::Usage(format!("RUST_LOG: {e}")))?,
        );
    let logs = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let mut layers: Vec<Box<dyn Layer<Registry> + Send + Sync>> = vec![if json {
        logs.json().with_filter(filter).boxed()
    } else {
        logs.with_filter(filter).boxed()
    }];
    let provider = if wanted()? {
        let provider = provider(service)?;
        opentelemetry::global::set_text_map_propagator(
            opentelemetry_sdk::propagation::TraceContextPropagator::new(),
        );
        let tracer = provider.tracer("toolgate");
        layers.push(
            tracing_opentelemetry::layer()
                // What a reader of the trace needs is in the attributes;
                // source locations, threads and busy/idle times are not.
                .with_location(false)
                .with_threads(false)
                .with_target(false)
                .with_tracked_inactivity(false)
                .with_tracer(tracer)
                .with_filter(Targets::new().with_target(TRACE_TARGET, tracing::Level::TRACE))
                .boxed(),
        );
        Some(provider)
    } else {
        None
    };
    // A second init (tests, a command calling another) keeps the first.
    let _ = tracing_subscriber::registry().with(layers).try_init();
    if provider.is_some() {
        tracing::info!(service, "exporting traces over OTLP");
    }
    Ok(Telemetry { provider })
}
