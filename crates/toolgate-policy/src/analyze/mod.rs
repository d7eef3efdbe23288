//! Static analysis of profiles (issue #48 part 5): rules that can never
//! decide, and how two profiles differ, computed exactly with automata
//! over the glob languages ([`glob_lang`]) rather than by sampling calls,
//! each glob matching what the evaluator matches with it: a text, or its
//! lowercase copy when the text has an uppercase letter (`bounded`).

mod admission;
mod bounded;
mod compare;
mod findings;
pub mod glob_lang;
mod model;
#[cfg(test)]
mod tests;

pub use admission::{
    ADMISSION_LIMITS, AdmissionLimits, MAX_WARNING_CHARS, MAX_WARNINGS, admission_check,
    admission_check_with, admission_warnings, clean,
};
pub use compare::{Comparison, Relation, ToolComparison, Witness, compare};
pub use findings::{Analysis, Finding, Severity, analyze};
pub use model::Tier;
