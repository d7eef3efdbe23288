//! The integration tests of `toolgate-policy`, built as one binary:
//! evaluation through the public API, flow rules, normalized paths, one
//! reading of arguments and URLs, run ids, and the fuzz properties.

mod analyze;
mod evaluate;
mod flows;
mod fuzz;
mod one_reading;
mod paths;
mod run_ids;
mod urls;
