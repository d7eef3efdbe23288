#!/usr/bin/env bash
# The long fuzzing run: the same property-based targets `.ci/run` runs with a
# small bound (TOOLGATE_FUZZ_CASES unset), here with many more cases each.
#   bash scripts/fuzz.sh [CASES]     (default 5000; about 10 minutes on 2 cores)
# Targets: the profile loader, compiler and evaluator; bundle envelopes;
# every sidecar endpoint and workspace paths over HTTP; AdmissionReviews
# against the TLS webhook; MCP messages and announced tool schemas.
set -euo pipefail
cd "$(dirname "$0")/.."
export TOOLGATE_FUZZ_CASES="${1:-5000}"
export PROPTEST_CASES="$TOOLGATE_FUZZ_CASES"
echo "==> ${TOOLGATE_FUZZ_CASES} cases per property"
cargo test --release -p toolgate-policy --test it fuzz::
cargo test --release -p toolgate-bundle --test it tamper::
cargo test --release -p toolgate-mcp --test fuzz
cargo test --release -p toolgate-mcp --lib schema_fuzz
cargo test --release -p toolgate-webhook --test it fuzz::
# Each sidecar case is a few HTTP requests: a tenth of the cases.
TOOLGATE_FUZZ_CASES=$(( TOOLGATE_FUZZ_CASES / 10 )) cargo test --release -p toolgate-sidecar --test it fuzz::
