//! The integration tests of `toolgate-policy`, built as one binary:
//! evaluation through the public API, and the fuzz properties.

mod evaluate;
mod fuzz;
