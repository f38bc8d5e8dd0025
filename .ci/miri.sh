#!/usr/bin/env bash
# Miri over every unit and integration test, on both cores: Miri interprets one thread at a time,
# so the test binaries run as two parallel jobs, longest first (a greedy schedule that keeps both
# cores busy to the end). Each job's output is printed whole once it ends, with its CPU seconds.
# Usage: bash .ci/miri.sh (JOBS=N for another number of parallel jobs; ONLY=REGEX for some jobs).
set -euo pipefail
cd "$(dirname "$0")/.."
export MIRIFLAGS="-Zmiri-tree-borrows -Zmiri-permissive-provenance -Zmiri-ignore-leaks"
logs=target/miri-logs
rm -rf "$logs" && mkdir -p "$logs"

# --tests: the doctests are left out (each is a crate of its own under Miri, minutes for examples
# `cargo test` runs natively, and nightly rustdoc checks compile_fail error codes stable does not).
cargo +nightly miri test --target-dir target/miri --tests --no-run

# A job is `lib:FILTER` (the unit tests, split in two) or an integration test's name. The weights
# are CPU seconds measured on a 2-core VM (about 1,760 in all, so two jobs at a time take about
# 15 minutes); a test file not listed here runs first (weight 9999), so a new file is never left
# out and never ends last unnoticed.
declare -A weight=(
    [lib:rest]=378 [reclaim]=359 [lib:trie]=218 [semantics]=186 [growth]=84 [reader]=80
    [own]=72 [sweeps]=66 [recycling]=62 [drops]=54 [own_ref]=21 [collector]=18 [kept]=17
    [scoped]=16 [teardown]=15 [local_key]=15 [hangs]=14 [ranks]=14 [init]=49 [exited]=11
    [attack_reader]=11 [api]=10 [stress]=8 [alloc]=5 [macro_form]=10 [macro_hygiene]=2
    [model]=1 [invariants]=1
)
jobs=(lib:trie lib:rest)
for f in tests/*.rs; do
    jobs+=("$(basename "$f" .rs)")
done
ordered=$(for j in "${jobs[@]}"; do echo "${weight[$j]:-9999} $j"; done | sort -rn | cut -d' ' -f2 |
    grep -E "${ONLY:-.}")

run_one() {
    local job=$1 log=$2/$1.log
    local args
    case $job in
    lib:trie) args=(--lib -- trie::) ;;
    lib:rest) args=(--lib -- --skip trie::) ;;
    *) args=(--test "$job") ;;
    esac
    local rc=0 TIMEFORMAT='%U %S'
    # a job's own time limit, so that every log is printed even when one job hangs
    { time timeout "${JOB_TIMEOUT:-1500}" \
        cargo +nightly miri test --target-dir target/miri "${args[@]}" >"$log" 2>&1 || rc=$?; } 2>"$log.time"
    echo "$rc" >"$log.rc"
}
export -f run_one
echo "$ordered" | xargs -P "${JOBS:-2}" -I{} bash -c 'run_one "$1" "$2"' _ {} "$logs" || true

failed=0
summary=""
for j in $ordered; do
    echo "=== Miri: $j ==="
    cat "$logs/$j.log"
    rc=$(cat "$logs/$j.log.rc" 2>/dev/null || echo missing)
    cpu=$(awk '{printf "%d", $1 + $2}' "$logs/$j.log.time" 2>/dev/null || echo "?")
    summary+="$(printf '%6ss  %-16s exit %s' "$cpu" "$j" "$rc")"$'\n'
    [ "$rc" = 0 ] || failed=1
done
printf '\n=== Miri: CPU seconds per job ===\n%s' "$summary"
if [ "$failed" != 0 ]; then
    echo "Miri: a job failed (above)"
    exit 1
fi
