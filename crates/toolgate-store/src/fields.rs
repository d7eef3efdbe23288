//! Small helpers every record family shares: times as stored, and the
//! store's one rule for id-like fields.

use std::time::Duration;

use crate::{Result, StoreError};

pub(crate) fn ts_from_ms(ms: i64) -> Result<jiff::Timestamp> {
    jiff::Timestamp::from_millisecond(ms)
        .map_err(|e| StoreError::Corrupt(format!("timestamp {ms} out of range: {e}")))
}

pub(crate) fn opt_ts_from_ms(ms: Option<i64>) -> Result<Option<jiff::Timestamp>> {
    ms.map(ts_from_ms).transpose()
}

pub(crate) fn duration_ms(d: Duration, what: &str) -> Result<i64> {
    i64::try_from(d.as_millis())
        .map_err(|_| StoreError::InvalidInput(format!("{what} is too large")))
}

/// Longest identifier-like string the store accepts.
pub const MAX_FIELD_LEN: usize = 1024;

/// Rejects empty, oversized or control-character-bearing identifiers: the
/// store's rule for every id-like field, public so that callers can refuse
/// input with the same rule before it reaches the store.
pub fn check_field(field: &str, value: &str) -> Result<()> {
    require(field, value)
}

/// [`check_field`]. For stream names PostgreSQL applies the same rule
/// itself (`toolgate_valid_stream_name`, migration 0012, via
/// [`crate::check_stream`]): change both together.
pub(crate) fn require(field: &str, value: &str) -> Result<()> {
    if value.trim().is_empty() {
        return Err(StoreError::InvalidInput(format!(
            "{field} must not be empty"
        )));
    }
    if value.len() > MAX_FIELD_LEN {
        return Err(StoreError::InvalidInput(format!(
            "{field} is longer than {MAX_FIELD_LEN} bytes"
        )));
    }
    if value.chars().any(char::is_control) {
        return Err(StoreError::InvalidInput(format!(
            "{field} must not contain control characters"
        )));
    }
    Ok(())
}

/// Refuses a run id that is not in its canonical spelling (see
/// [`toolgate_policy::ids`]): one run's rows must never be keyed two ways.
/// The typed run APIs take a [`toolgate_policy::RunId`]; records that carry
/// a run id as text are checked here.
pub(crate) fn require_run_id(value: &str) -> Result<()> {
    match toolgate_policy::RunId::parse(value) {
        Ok(id) if id.as_str() == value => Ok(()),
        Ok(id) => Err(StoreError::InvalidInput(format!(
            "run_id must be in its canonical spelling `{id}`"
        ))),
        Err(e) => Err(StoreError::InvalidInput(e.to_string())),
    }
}

pub(crate) fn require_opt(field: &str, value: Option<&str>) -> Result<()> {
    value.map_or(Ok(()), |v| require(field, v))
}

pub(crate) fn new_id() -> String {
    uuid::Uuid::now_v7().to_string()
}

pub(crate) fn parse_json(text: &str, what: &str) -> Result<serde_json::Value> {
    serde_json::from_str(text).map_err(|e| StoreError::Corrupt(format!("{what}: {e}")))
}
