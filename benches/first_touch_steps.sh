#!/usr/bin/env bash
# A first touch by id split into its steps: instructions per first touch spent in each function
# of the path that is not inlined (inclusive), counted by callgrind over the peers example's
# touch-id case (SIZE keys present, default 1024) at N and 2N touches: (Ir(2N) - Ir(N)) / N, so
# set-up cancels out. The rows that matter:
#   touch_all            the whole first touch (on_behalf_of + get_or)
#   get_or_try_slow      the slow path: lookup before, claim, init, publish, end claim, cache fill
#   lookup_slow          the lookup that misses before the claim
#   publish_state        publication: the tombstone check, the allocation, the backend's insert
#   Backend>::insert     the backend's insert (Epoch: a fill in place, or a path copy + version swap)
#   get_by_writer        the writer's lookups (the re-check under the lock, the tombstone check)
#   free_ready           what the writer's sweep frees (nothing, here)
#   ARM=rwlock bash benches/first_touch_steps.sh   # the same for another arm of peers
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p ranklocal-peers --example peers -q
bin=${CARGO_TARGET_DIR:-target}/release/examples/peers
N=${N:-1000}
ARM=${ARM:-epoch}
SIZE=${SIZE:-}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for n in "$N" $((2 * N)); do
  valgrind --tool=callgrind --callgrind-out-file="$tmp/$n.out" --max-threads=4096 \
    "$bin" --only "$ARM" --only-case touch-id --ops "$n" ${SIZE:+--size "$SIZE"} >/dev/null 2>&1
  callgrind_annotate --inclusive=yes --threshold=100 "$tmp/$n.out" \
    | sed -n 's/^ *\([0-9,]*\) ([^)]*) *\(.*\)$/\2\t\1/p' | sed 's/ \[[^]]*\]\t/\t/' \
    | awk -F'\t' -v OFS='\t' '{ gsub(",", "", $2); print }' \
    | sort -t$'\t' -k1,1 >"$tmp/$n.tsv"
done
printf '%-10s %s\n' "Ir/touch" function
join -t$'\t' "$tmp/$N.tsv" "$tmp/$((2 * N)).tsv" \
  | awk -F'\t' -v n="$N" '{ d = ($3 - $2) / n; if (d >= 1) printf "%-10.1f %s\n", d, $1 }' \
  | grep -E 'ranklocal|malloc|free|touch|peers::' | grep -vE 'identity::(exit|Rank)|btree|Rank as|drop|retain|rebuild|for_each_node' \
  | sort -rn | head -${ROWS:-20}
