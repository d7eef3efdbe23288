//! Signed policy bundles (work in progress).
