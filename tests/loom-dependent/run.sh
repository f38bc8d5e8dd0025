#!/usr/bin/env bash
# The example dependent's loom models, as CI runs them: the model of its code must pass with
# ranklocal's recipe (`--cfg loom` and ranklocal's `loom` feature, nothing else), and the planted
# bug (feature `planted-bug`) must fail with the model's own assertion message and the test
# summary — not a panic inside ranklocal, a causality report or an abort.
# Then a planted bug in ranklocal itself, in a scratch copy: a static's parts not published to the
# threads that did not build them; the statics model must report it.
set -euo pipefail
cd "$(dirname "$0")"
here=$PWD
root=$(cd ../.. && pwd)
export RUSTFLAGS="--cfg loom -D warnings"
export LOOM_MAX_PREEMPTIONS="${LOOM_MAX_PREEMPTIONS:-3}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target/loom-dependent}"

echo "== the model passes"
cargo test --release --test model

echo "== the planted bug fails, readably"
out=$(mktemp)
scratch=$(mktemp -d)
trap 'rm -rf "$out" "$scratch"' EXIT
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

echo "== a static's parts not published by ranklocal: the statics model must catch it"
mkdir -p "$scratch/papers" "$scratch/tests"
cp -r "$root/build.rs" "$root/src" "$root/README.md" "$root/Cargo.lock" "$scratch/"
cp "$root/papers/design.md" "$scratch/papers/"
awk '/^\[workspace\]$/ { exit } { print }' "$root/Cargo.toml" >"$scratch/Cargo.toml"
mkdir -p "$scratch/tests/loom-dependent"
cp -r "$here/Cargo.toml" "$here/Cargo.lock" "$here/src" "$here/tests" "$scratch/tests/loom-dependent/"
sed -i 's|published.get(); // |let _ = published; // |' "$scratch/src/primitive.rs"
! cmp -s "$root/src/primitive.rs" "$scratch/src/primitive.rs" || fail "the plant did not apply (update run.sh)"
status=0
(cd "$scratch/tests/loom-dependent" && cargo test --release --test model -- statics) \
    >"$out" 2>&1 || status=$?
grep -E "test result|Causality" "$out" || true
[ "$status" -ne 0 ] && grep -q "Causality violation" "$out" ||
    { cat "$out"; fail "unpublished parts were not caught"; }
echo "run.sh: the unpublished parts were caught"
