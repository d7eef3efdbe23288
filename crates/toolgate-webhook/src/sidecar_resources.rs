//! Resources, pull policy and user of the injected sidecar: the webhook's
//! defaults (flags) and a pod's overrides (annotations), validated and in
//! the canonical form the API server stores, so that a reinvocation sees
//! exactly the container it injected.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ResourceRequirements;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

pub use toolgate_k8s::names::{
    ANNOTATION_CPU_LIMIT, ANNOTATION_CPU_REQUEST, ANNOTATION_MEMORY_LIMIT,
    ANNOTATION_MEMORY_REQUEST,
};

use crate::WebhookError;

/// CPU in millicores and memory in bytes, requests and limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SidecarResources {
    /// CPU request, millicores.
    pub cpu_request: u64,
    /// CPU limit, millicores.
    pub cpu_limit: u64,
    /// Memory request, bytes.
    pub memory_request: u64,
    /// Memory limit, bytes.
    pub memory_limit: u64,
}

impl Default for SidecarResources {
    /// 10m / 32Mi requested, 500m / 128Mi limit.
    fn default() -> Self {
        Self {
            cpu_request: 10,
            cpu_limit: 500,
            memory_request: 32 << 20,
            memory_limit: 128 << 20,
        }
    }
}

const BINARY: [(&str, u32); 4] = [("Ti", 40), ("Gi", 30), ("Mi", 20), ("Ki", 10)];

/// Parses a CPU quantity: millicores (`250m`) or whole cores (`2`), above 0.
pub fn parse_cpu(text: &str) -> Result<u64, String> {
    let bad =
        || format!("`{text}` is not a CPU quantity: write millicores (`250m`) or cores (`1`)");
    let (digits, scale) = match text.strip_suffix('m') {
        Some(d) => (d, 1),
        None => (text, 1000),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) || digits.len() > 9 {
        return Err(bad());
    }
    let value = digits.parse::<u64>().map_err(|_| bad())? * scale;
    if value == 0 {
        return Err(format!("`{text}`: a CPU quantity must be above 0"));
    }
    Ok(value)
}

/// Parses a memory quantity with a binary suffix (`Ki`, `Mi`, `Gi`, `Ti`), above 0.
pub fn parse_memory(text: &str) -> Result<u64, String> {
    let bad =
        || format!("`{text}` is not a memory quantity: write `64Mi`, `1Gi` (Ki, Mi, Gi or Ti)");
    let (digits, shift) = BINARY
        .iter()
        .find_map(|(suffix, shift)| text.strip_suffix(suffix).map(|d| (d, *shift)))
        .ok_or_else(bad)?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) || digits.len() > 9 {
        return Err(bad());
    }
    let value = digits.parse::<u64>().map_err(|_| bad())? << shift;
    if value == 0 {
        return Err(format!("`{text}`: a memory quantity must be above 0"));
    }
    Ok(value)
}

/// CPU as the API server writes it back: whole cores bare, else millicores.
pub fn format_cpu(millis: u64) -> String {
    if millis.is_multiple_of(1000) {
        (millis / 1000).to_string()
    } else {
        format!("{millis}m")
    }
}

/// Memory as the API server writes a binary quantity back: the largest
/// suffix that divides it exactly.
pub fn format_memory(bytes: u64) -> String {
    BINARY
        .iter()
        .find(|(_, shift)| bytes.is_multiple_of(1u64 << shift))
        .map(|(suffix, shift)| format!("{}{suffix}", bytes >> shift))
        .unwrap_or_else(|| bytes.to_string())
}

/// A clap value parser: a CPU quantity, canonicalized.
pub fn cpu_flag(text: &str) -> Result<String, String> {
    parse_cpu(text).map(format_cpu)
}

/// A clap value parser: a memory quantity, canonicalized.
pub fn memory_flag(text: &str) -> Result<String, String> {
    parse_memory(text).map(format_memory)
}

impl SidecarResources {
    /// From the (already validated) flag values.
    pub fn from_flags(
        cpu_request: &str,
        cpu_limit: &str,
        memory_request: &str,
        memory_limit: &str,
    ) -> Result<Self, String> {
        let r = Self {
            cpu_request: parse_cpu(cpu_request)?,
            cpu_limit: parse_cpu(cpu_limit)?,
            memory_request: parse_memory(memory_request)?,
            memory_limit: parse_memory(memory_limit)?,
        };
        r.check().map_err(|(_, message)| message)?;
        Ok(r)
    }

    /// These resources with a pod's annotations applied; an annotation
    /// that does not parse, or a request above its limit, is refused.
    pub fn with_annotations<'a>(
        self,
        annotation: impl Fn(&str) -> Option<&'a str>,
    ) -> Result<Self, WebhookError> {
        let mut out = self;
        let refuse = |key: &str, message: String| WebhookError::Injection {
            field: format!("metadata.annotations[{key}]"),
            message,
        };
        for (key, slot, parse) in [
            (
                ANNOTATION_CPU_REQUEST,
                &mut out.cpu_request,
                parse_cpu as fn(&str) -> Result<u64, String>,
            ),
            (ANNOTATION_CPU_LIMIT, &mut out.cpu_limit, parse_cpu),
            (
                ANNOTATION_MEMORY_REQUEST,
                &mut out.memory_request,
                parse_memory,
            ),
            (ANNOTATION_MEMORY_LIMIT, &mut out.memory_limit, parse_memory),
        ] {
            if let Some(text) = annotation(key) {
                *slot = parse(text.trim()).map_err(|m| refuse(key, m))?;
            }
        }
        out.check().map_err(|(key, message)| refuse(key, message))?;
        Ok(out)
    }

    fn check(&self) -> Result<(), (&'static str, String)> {
        if self.cpu_request > self.cpu_limit {
            return Err((
                ANNOTATION_CPU_REQUEST,
                format!(
                    "the sidecar's CPU request {} is above its limit {}",
                    format_cpu(self.cpu_request),
                    format_cpu(self.cpu_limit)
                ),
            ));
        }
        if self.memory_request > self.memory_limit {
            return Err((
                ANNOTATION_MEMORY_REQUEST,
                format!(
                    "the sidecar's memory request {} is above its limit {}",
                    format_memory(self.memory_request),
                    format_memory(self.memory_limit)
                ),
            ));
        }
        Ok(())
    }

    /// The container's `resources`.
    pub fn requirements(&self) -> ResourceRequirements {
        let pair = |cpu: u64, memory: u64| {
            BTreeMap::from([
                ("cpu".to_owned(), Quantity(format_cpu(cpu))),
                ("memory".to_owned(), Quantity(format_memory(memory))),
            ])
        };
        ResourceRequirements {
            requests: Some(pair(self.cpu_request, self.memory_request)),
            limits: Some(pair(self.cpu_limit, self.memory_limit)),
            ..Default::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_parse_and_print_in_canonical_form() {
        for (text, canonical) in [
            ("250m", "250m"),
            ("1000m", "1"),
            ("2", "2"),
            ("1500m", "1500m"),
        ] {
            assert_eq!(cpu_flag(text).unwrap(), canonical, "{text}");
        }
        for (text, canonical) in [
            ("64Mi", "64Mi"),
            ("1024Mi", "1Gi"),
            ("2048Ki", "2Mi"),
            ("1536Mi", "1536Mi"),
        ] {
            assert_eq!(memory_flag(text).unwrap(), canonical, "{text}");
        }
        for bad in [
            "",
            "0",
            "0m",
            "-1",
            "1.5",
            "0.5",
            "1e3",
            "250M",
            "abc",
            "1 m",
            "9999999999",
        ] {
            assert!(parse_cpu(bad).is_err(), "cpu {bad:?}");
        }
        for bad in ["", "0Mi", "64", "64M", "1G", "1.5Gi", "Mi", "-1Mi", "64mi"] {
            assert!(parse_memory(bad).is_err(), "memory {bad:?}");
        }
    }

    #[test]
    fn annotations_override_each_value_and_are_checked() {
        let base = SidecarResources::default();
        let annotations = |pairs: &'static [(&'static str, &'static str)]| {
            move |key: &str| pairs.iter().find(|(k, _)| *k == key).map(|(_, v)| *v)
        };
        let r = base
            .with_annotations(annotations(&[
                (ANNOTATION_CPU_REQUEST, "100m"),
                (ANNOTATION_MEMORY_LIMIT, "1Gi"),
            ]))
            .unwrap();
        assert_eq!((r.cpu_request, r.cpu_limit), (100, 500));
        assert_eq!((r.memory_request, r.memory_limit), (32 << 20, 1 << 30));
        let err = base
            .with_annotations(annotations(&[(ANNOTATION_CPU_LIMIT, "lots")]))
            .unwrap_err();
        assert_eq!(err.code(), "injection_refused");
        assert!(err.to_string().contains("sidecar-cpu-limit"), "{err}");
        let err = base
            .with_annotations(annotations(&[(ANNOTATION_MEMORY_REQUEST, "256Mi")]))
            .unwrap_err();
        assert!(err.to_string().contains("above its limit 128Mi"), "{err}");
        assert!(SidecarResources::from_flags("1", "500m", "32Mi", "64Mi").is_err());
    }
}
