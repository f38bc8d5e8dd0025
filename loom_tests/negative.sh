#!/usr/bin/env bash
# Negative controls for the loom suite: plant a known bug in a scratch copy of the crate and check
# that the named model catches it. A model that stops exploring, or a canary that stops being read,
# makes this fail. Usage: bash loom_tests/negative.sh
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
export LOOM_MAX_PREEMPTIONS=2
export RUSTFLAGS="--cfg loom --cfg crossbeam_loom --cfg crossbeam_sanitize"
export CARGO_TARGET_DIR="$root/target/loom-negative"

# name | file | sed expression planting the bug | model expected to catch it | expected message
controls=(
  "relaxed publish|src/backend/epoch.rs|s/map.head.store(Owned::new(new), Ordering::Release)/map.head.store(Owned::new(new), Ordering::Relaxed)/|m2_publish_while_reading_epoch|Causality violation"
  "free instead of defer_destroy|src/backend/epoch.rs|s/unsafe { guard.defer_destroy(old) };/unsafe { drop(old.into_owned()) };/|m2_publish_while_reading_epoch|Causality violation"
  "retired snapshot leaked|src/backend/epoch.rs|s/unsafe { guard.defer_destroy(old) };/let _ = old;/|m3_two_writers_different_ranks_epoch|leaked"
  "C++ cache poisoning: own cache checked first|src/rank_local.rs|s/if let Some(v) = self.cached(rank) {/if let Some(v) = self.cached(identity::own_raw()) {/|m4_delegation_after_caching_own_epoch|delegated get returned the cached own instance"
  "init does not wait for another thread's claim|src/rank_local.rs|s/None => break,/_ => break,/|m7a_first_touch_same_rank_owner_and_delegate_baseline|init ran twice"
)
failed=0
for c in "${controls[@]}"; do
  IFS='|' read -r name file expr model expect <<<"$c"
  rm -rf "$scratch/crate" && mkdir -p "$scratch/crate"
  cp -r Cargo.toml Cargo.lock src loom_tests README.md papers "$scratch/crate/"
  # benches/ is a workspace member (the criterion crate): copy its manifest and sources so the
  # scratch workspace resolves with the same Cargo.lock
  mkdir -p "$scratch/crate/benches" "$scratch/crate/examples" "$scratch/crate/tests"
  cp benches/Cargo.toml benches/ranklocal.rs benches/arms.rs "$scratch/crate/benches/"
  sed -i "$expr" "$scratch/crate/$file"
  if cmp -s "$file" "$scratch/crate/$file"; then
    echo "negative control '$name': the mutation did not apply (update loom_tests/negative.sh)"
    failed=1
    continue
  fi
  out=$(cd "$scratch/crate" && timeout 600 cargo test -q --release --test loom "$model" -- --test-threads=1 2>&1 || true)
  if grep -q "$expect" <<<"$out"; then
    echo "negative control '$name': caught by $model ($expect)"
  else
    echo "negative control '$name': NOT caught by $model"
    tail -20 <<<"$out"
    failed=1
  fi
done
exit $failed
