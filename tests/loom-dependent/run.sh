#!/usr/bin/env bash
# The example dependent's loom models, as CI runs them: the model of its code must pass with
# ranklocal's recipe (`--cfg loom` and ranklocal's `loom` feature, nothing else), and the planted
# bug (feature `planted-bug`) must fail with the model's own assertion message and the test
# summary — not a panic inside ranklocal, a causality report or an abort.
set -euo pipefail
cd "$(dirname "$0")"
export RUSTFLAGS="--cfg loom -D warnings"
export LOOM_MAX_PREEMPTIONS="${LOOM_MAX_PREEMPTIONS:-3}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-../../target/loom-dependent}"

echo "== the model passes"
cargo test --release --test model

echo "== the planted bug fails, readably"
out=$(mktemp)
trap 'rm -f "$out"' EXIT
status=0
cargo test --release --test model --features planted-bug >"$out" 2>&1 || status=$?
cat "$out"
fail() {
    echo "run.sh: $1"
    exit 1
}
[ "$status" -eq 101 ] || fail "the planted run exited with $status, not a test failure (101)"
grep -q "a step of rank .* was lost" "$out" || fail "no report of the lost step (the model's message)"
grep -q "bytes rank .* sent were lost" "$out" || fail "no report of the lost bytes in the statics"
grep -q "test result: FAILED. 0 passed; 2 failed" "$out" || fail "no test summary with both models failed"
! grep -qiE "SIGABRT|SIGSEGV|aborting|panic in a destructor|Causality violation|crossbeam" "$out" ||
    fail "the report shows an abort, a causality report or crossbeam (above)"
echo "run.sh: the planted bug was caught with the model's messages"
