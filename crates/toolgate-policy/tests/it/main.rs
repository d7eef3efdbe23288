//! The integration tests of `toolgate-policy`, built as one binary:
//! evaluation through the public API, flow rules, normalized paths, run ids, and the
//! fuzz properties.

mod evaluate;
mod flows;
mod fuzz;
mod paths;
mod run_ids;
