//! The metrics every long-running component exports alike, defined once
//! in the contract (its `metrics` feature) and re-exported here for the
//! controller and the webhook.

pub use toolgate_contract::telemetry::register_common;
