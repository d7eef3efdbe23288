//! The integration tests of `toolgate-gate`, built as one binary: the
//! decision core called in process (no HTTP), one module per promise, each
//! test on SQLite and on PostgreSQL (see `common`).

#[macro_use]
mod common;

mod approvals;
mod batches;
mod budgets_and_stops;
mod decision_order;
mod edge_refusals;
mod fail_closed;
mod flow_labels;
mod intents;
mod races;
mod stop_watch;
mod trial_modes;
mod workspace;
