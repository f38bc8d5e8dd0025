#!/usr/bin/env bash
# Instructions per call of every hot-path arm, counted by callgrind (repeatable on a noisy
# machine): per-call = (Ir(2N) - Ir(N)) / N, so setup cost cancels out.
#   bash papers/callgrind.sh > papers/callgrind.txt
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --example hotpath -q
bin=target/release/examples/hotpath
N=${N:-20000}
ir() {
  valgrind --tool=callgrind --callgrind-out-file=/dev/null "$bin" "$1" "$2" "$3" 2>&1 \
    | sed -n 's/.*Collected : \([0-9]*\).*/\1/p'
}
printf '%-26s %-36s %s\n' group arm "instructions/call"
"$bin" 2>&1 | sed -n 's/^  "\(.*\)" "\(.*\)"$/\1\t\2/p' | while IFS=$'\t' read -r group arm; do
  n=$N
  case "$group" in iter*) n=$((N / 50)) ;; esac
  a=$(ir "$group" "$arm" "$n")
  b=$(ir "$group" "$arm" $((2 * n)))
  printf '%-26s %-36s %s\n' "$group" "$arm" "$(( (b - a) / n ))"
done
