#!/usr/bin/env bash
# Instructions per operation of each arm of the peers example (benches/peers.rs), counted by
# callgrind (repeatable on a noisy machine): per-op = (Ir(2N) - Ir(N)) / N, so set-up cancels out
# (as papers/callgrind.sh does for the hot paths).
#   bash benches/peers_callgrind.sh                                  # every arm and case (~3 min)
#   ARMS="epoch rwlock" CASES="touch-id" N=2000 SIZE=65536 bash benches/peers_callgrind.sh
# touch-id: per first touch of a new key, averaged over the keys SIZE+N..SIZE+2N (SIZE defaults
# to 1024); miss: per lookup, 1,024 keys; iter: per iteration of 64 values; fresh-thread: per
# fresh thread (spawn, first touch, park, and at the end exit and join), the k-th with SIZE-1
# (default 63) other threads alive that touched the structure and the k-1 earlier fresh ones:
# compare with the `none` arm, a thread that touches nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p ranklocal-peers --example peers -q
bin=${CARGO_TARGET_DIR:-target}/release/examples/peers
N=${N:-1000}
SIZE=${SIZE:-}
CASES=${CASES:-"touch-id miss iter fresh-thread"}
ARMS=${ARMS:-"epoch arc-swap baseline rwlock dashmap scc-index scc-map papaya papaya-inc thread_local none"}
ir() {
  valgrind --tool=callgrind --callgrind-out-file=/dev/null --max-threads=4096 \
    "$bin" --only "$1" --only-case "$2" --ops "$3" ${SIZE:+--size "$SIZE"} 2>&1 \
    | sed -n 's/.*Collected : \([0-9]*\).*/\1/p'
}
printf '%-14s %-14s %s\n' case arm "instructions/op"
for c in $CASES; do
  for a in $ARMS; do
    case "$c:$a" in
      touch-id:thread_local | touch-id:none | miss:thread_local | miss:none) continue ;;
    esac
    n=$N
    case "$c" in
      fresh-thread) n=$(( N / 20 > 0 ? N / 20 : 1 )) ;;
      iter) n=$(( N / 10 > 0 ? N / 10 : 1 )) ;;
      miss) n=$(( N * 10 )) ;;
    esac
    a1=$(ir "$a" "$c" "$n")
    a2=$(ir "$a" "$c" $((2 * n)))
    printf '%-14s %-14s %s\n' "$c" "$a" "$(( (a2 - a1) / n ))"
  done
done
