//! The metrics every long-running component exports alike (feature
//! `metrics`), so that one dashboard query or alert covers the sidecar,
//! the webhook and the controller: defined here once, for the crates with
//! a Prometheus registry (the gate for the sidecar, toolgate-k8s for the
//! controller and the webhook).

use prometheus::{IntGaugeVec, Opts, Registry};

/// Registers `toolgate_build_info{version, component}` (value 1) and, on
/// Linux, the standard `process_*` collector (CPU seconds, resident memory,
/// open file descriptors, start time).
///
/// # Panics
///
/// When `registry` already holds `toolgate_build_info`: each component
/// registers it once, on its own registry.
pub fn register_common(registry: &Registry, component: &str) {
    let build_info = IntGaugeVec::new(
        Opts::new(
            "toolgate_build_info",
            "The running toolgate build (value 1).",
        ),
        &["version", "component"],
    )
    .expect("static metric definition");
    build_info
        .with_label_values(&[env!("CARGO_PKG_VERSION"), component])
        .set(1);
    registry
        .register(Box::new(build_info))
        .expect("toolgate_build_info registered once");
    #[cfg(target_os = "linux")]
    let _ = registry.register(Box::new(
        prometheus::process_collector::ProcessCollector::for_self(),
    ));
}

#[cfg(test)]
mod tests {
    use prometheus::Encoder;

    use super::*;

    #[test]
    fn build_info_names_the_component_and_version() {
        let registry = Registry::new();
        register_common(&registry, "webhook");
        let mut text = Vec::new();
        prometheus::TextEncoder::new()
            .encode(&registry.gather(), &mut text)
            .unwrap();
        let text = String::from_utf8(text).unwrap();
        let line = format!(
            "toolgate_build_info{{component=\"webhook\",version=\"{}\"}} 1",
            env!("CARGO_PKG_VERSION")
        );
        assert!(text.contains(&line), "{text}");
        #[cfg(target_os = "linux")]
        assert!(text.contains("process_resident_memory_bytes"), "{text}");
    }
}
