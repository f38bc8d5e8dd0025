#!/usr/bin/env bash
# Negative controls for the loom suite: plant a known bug in a scratch copy of the crate and check
# that the named model catches it. A model that stops exploring, or a canary that stops being read,
# makes this fail. Usage: bash loom_tests/negative.sh (ONLY=REGEX runs the controls whose name matches)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
export LOOM_MAX_PREEMPTIONS=2
export RUSTFLAGS="--cfg loom --cfg crossbeam_loom --cfg crossbeam_sanitize"
export CARGO_TARGET_DIR="$root/target/loom-negative"

# (loom reports a read of a freed loom cell whose slot was reused as "unexpected object stored at
# reference": the stale-uid control fails that way)
# Some planted use-after-frees are reported by loom itself crashing on freed memory rather than by
# a causality report (SIGSEGV, or loom's object store `rt/object.rs` indexing a freed cell): the
# expected message then lists both (GNU grep `\|`); either way the model fails.
# name # file # sed expression planting the bug # model expected to catch it # expected message
# (fields separated by '#': the sed expressions contain '|')
controls=(
  "relaxed publish#src/backend/epoch.rs#s/.store(Shared::from(new.cast_const()), Ordering::Release);/.store(Shared::from(new.cast_const()), Ordering::Relaxed);/#m2_publish_while_reading_epoch#Causality violation"
  "epoch reference released at once, not after the grace period#src/backend/epoch.rs#s/unsafe { collector::retire(retired, Flush::Batched) };/let _ = retired; unsafe { release(old) };/#m9_replaced_nodes_are_retired_after_readers_epoch#Causality violation"
  "epoch reference never released (version header leaked)#src/backend/epoch.rs#s/unsafe { collector::retire(retired, Flush::Batched) };/let _ = retired;/#m3_two_writers_different_ranks_epoch#leaked"
  "a replaced version reused by the next write, not once it is dead#src/trie/reclaimer.rs#s/r.versions.push_back((seq, old));/r.spare_versions.push(old);/#m9_replaced_nodes_are_retired_after_readers_epoch#Causality violation\\|SIGSEGV\\|rt\/object.rs"
  "replaced node freed at once, not retired#src/trie/reclaimer.rs#s/r.garbage.push_back(Garbage { node, death });/unsafe { Node::free(node) };/#m9_replaced_nodes_are_retired_after_readers_epoch#Causality violation"
  "replaced node never retired (leaked)#src/trie/mod.rs#s/                scratch.replaced.push(n);/                let _ = n;/#m9_replaced_nodes_are_retired_after_readers_epoch#leaked"
  "published node mutated in place (shared with a snapshot)#src/trie/mod.rs#s/Node::birth_of(n.cast()) } == seq => n.cast(),/Node::birth_of(n.cast()) } <= seq => n.cast(),/#m10_held_iterator_across_publishes_epoch#Causality violation\\|SIGSEGV"
  "iterator takes no count on its version#src/backend/epoch.rs#s/let before = v.refs.fetch_add(1, Ordering::Relaxed);/let before = 0usize; let _ = \&v.refs;/#m10_held_iterator_across_publishes_epoch#Causality violation\\|SIGSEGV\\|rt\/object.rs"
  "C++ cache poisoning: own cache checked first#src/rank_local/access.rs#s/if let Some(v) = self.cached(rank) {/if let Some(v) = self.cached(identity::own_raw()) {/#m4_delegation_after_caching_own_epoch#delegated get returned the cached own instance"
  "scoped instance dropped at once, not after the grace period#src/rank_local/raw/locked.rs#s/collector::retire_token(Arc::clone(\&done));/done.store(true, Ordering::Release);/#m13_reclaim_while_scoped_reading_epoch#Causality violation"
  "no fresh uid before retiring (stale pinned cache entry)#src/rank_local/raw/locked.rs#s/self.rl.core.uid.store(fresh_uid(), Ordering::SeqCst);/let _ = fresh_uid;/#m13_reclaim_while_scoped_reading_epoch#unexpected object stored at reference\\|rt/object.rs"
  "a batch unpublishes only its first rank, retires them all#src/backend/epoch.rs#s/let n = ranks.iter().filter(|\&\&r| w.remove(r).is_some()).count();/let n = ranks.iter().take(1).filter(|\&\&r| w.remove(r).is_some()).count();/#m14_batched_reclaim_while_scoped_reading_epoch#Causality violation\\|left: 1\\|rt\/object.rs"
  "a first touch fills a published leaf with a Relaxed store#src/trie/node.rs#s/        self.0.store(p.as_ptr(), Ordering::Release);/        self.0.store(p.as_ptr(), Ordering::Relaxed);/#m15_fill_in_place_while_reading_epoch#Causality violation"
  "a first touch hangs a new leaf with a Relaxed store#src/trie/mod.rs#s/                    slot.fill(hung);/                    slot.set(Some(hung));/#m17_hang_in_place_while_reading_epoch#Causality violation"
  "a leaf is hung under a node of a held snapshot (off by one)#src/trie/mod.rs#s/                    if n.birth <= frozen {/                    if n.birth < frozen {/#m18_held_iterator_while_a_first_touch_needs_a_new_leaf_epoch#the held iterator saw a later first touch"
  "a first touch inside an outer read frees what its sweep found ready#src/rank_local/reclaim.rs#s/        if collector::is_pinned() {/        if false {/#m21_first_touch_inside_a_read_frees_nothing_epoch#dropped inside an outer scoped read"
  "a batch retired while a walk lives is freed under it (no per-walk accounting)#src/rank_local/raw/removed.rs#s/        walking.get(i).map_or(false, |\&n| n <= retired)/        walking.get(i).map_or(false, |_| false)/#m28_held_iterator_while_a_sweep_retires_its_snapshot_epoch#Causality violation\\|rt\/object.rs\\|SIGSEGV\\|the walk read a dropped value"
  "a nested first touch's deferred batch is drained at the end of an inner read#src/collector.rs#s/    if !is_pinned() && !std::thread::panicking() {/    if !std::thread::panicking() {/#m21_first_touch_inside_a_read_frees_nothing_epoch#dropped inside an outer scoped read"
  "a refill that does not wait for the exit work moving the value out#src/rank_local/raw/locked.rs#s/        if meta.state() == instance::EXITING {/        if meta.state() != instance::EXITING {/#m31_exit_drop_while_a_delegate_refills_epoch#a claimed rank's entry is a tombstone"
  "a scoped reader that finds the instance escaped meanwhile treats it as absent#src/rank_local/raw/instance.rs#s/                ESCAPED => return true,/                ESCAPED if false => return true,/#m30_two_readers_of_an_owned_instance_epoch#the scoped reader missed a live value"
  "a lookup under the free writer lock hands out what it did not escape#src/rank_local/raw/mod.rs#s/        self.meta.escape().then_some(Escaped {/        (true || self.meta.escape()).then_some(Escaped {/#m22_own_lookup_without_a_pin_races_a_sweep_epoch#Causality violation\\|an escaped instance was swept"
  "a reader pins per lookup instead of holding its pin#src/rank_local/raw/reading.rs#s/        let pin = self.pin.get_or_init(pin_now);/        let tmp = pin_now(); let pin = \&tmp;/#m23_reader_races_a_sweep_epoch#Causality violation\\|read a dropped value\\|SIGSEGV\\|rt\/object.rs"
  "a first touch does not re-check the map under the writer lock (a new rank's skipped the lookup before it)#src/rank_local/init.rs#s/            if let Some(i) = w.get(rank) {/            if let Some(i) = w.get(rank).filter(|_| false) {/#m1_first_touch_same_rank_owner_and_delegate_epoch#init ran twice\\|rank inserted twice"
  "init does not wait for another thread's claim#src/rank_local/init.rs#s/None => break,/_ => break,/#m7a_first_touch_same_rank_owner_and_delegate_baseline#init ran twice\\|a claimed rank's entry is a tombstone"
  "a scoped reader uses an OWNED value without moving it on (the exit drops it under the read)#src/rank_local/raw/instance.rs#s/                SCOPED if to == SCOPED => return true,/                SCOPED | OWNED if to == SCOPED => return true,/#m19_exit_drop_while_a_delegate_reads_epoch#Causality violation"
  "the exit work drops a value a live OwnRef still lends#src/rank_local/raw/gate.rs#s/    if unsafe { p.meta().guards() } != 0 {/    if unsafe { p.meta().guards() } != 0 \&\& false {/#m24_deferred_exit_drop_while_a_delegate_reads_epoch#read a dropped value through a guard\\|a value read through a guard was swept\\|Causality violation"
  "the exit work leaves a guarded value a reader moved on to a sweep#src/rank_local/raw/gate.rs#s/^                meta.keep();$/                let _ = meta;/#m24_deferred_exit_drop_while_a_delegate_reads_epoch#a value read through a guard was swept\\|Causality violation"
  "a recycling map's exit work vacates a value a live OwnRef still lends#src/rank_local/raw/gate.rs#s/    if unsafe { p.meta().guards() } != 0 {/    if unsafe { p.meta().guards() } != 0 \&\& false {/#m25_adoption_races_the_last_guard_epoch#Causality violation\\|the value changed under a live guard\\|dropped twice"
  "an ended owner's late get_own uses the instance another rank adopted#src/rank_local/raw/mod.rs#s/^        if self.meta.owner() != self.rank {$/        if false \&\& self.meta.owner() != self.rank {/#m29_late_owner_races_an_adoption_epoch#Causality violation\\|unexpected values"
  "the map's drop neither closes nor empties the gate (the exit work touches a freed instance)#src/rank_local/raw/gate.rs#s/^        s.alive = false;$/        let _ = s.alive;/; s/^        s.owned.clear();$/        let _ = \&s.owned;/; s/^        s.owned.remove(rank);$/        let _ = rank;/#m20_exit_drop_while_the_rank_local_is_dropped_epoch#Causality violation\\|SIGSEGV\\|rt\/object.rs\\|leaked"
  "the end of a hand-over wakes no one (a lost wake-up: the outer map's drop waits forever)#src/rank_local/raw/gate.rs#s/^        heir = land_one(\&h);$/        heir = { let mut s = lock(\&h.inner); s.in_flight -= 1; if s.in_flight == 0 { s.heir.take() } else { None } };/#m26_map_dropped_inside_an_exit_drop_epoch#deadlock"
  "a map dropped inside an exit drop skips the wait without handing its flights over#src/rank_local/raw/gate.rs#s/^    if s.in_flight == 0 {$/    if true {/#m26_map_dropped_inside_an_exit_drop_epoch#returned before a value of the map it owned was dropped"
  "a map dropped inside an exit drop waits for its flights instead of handing them over (two maps owning each other deadlock)#src/rank_local/raw/gate.rs#s/^        if outer != 0 {$/        if outer == usize::MAX {/#m27_two_maps_owning_each_other_exit_together_epoch#deadlock"
  "a hand-over that closes a cycle of heirs (the gates keep each other alive)#src/rank_local/raw/gate.rs#s/^            return; \/\/ a cycle: nothing waits$/            break;/#m27_two_maps_owning_each_other_exit_together_epoch#leaked\\|deadlock"
)
failed=0
for c in "${controls[@]}"; do
  IFS='#' read -r name file expr model expect <<<"$c"
  if [[ -n "${ONLY:-}" && ! "$name" =~ $ONLY ]]; then
    continue
  fi
  rm -rf "$scratch/crate" && mkdir -p "$scratch/crate"
  cp -r Cargo.toml Cargo.lock build.rs src loom_tests README.md papers "$scratch/crate/"
  # benches/ and benches/peers/ are workspace members (the criterion crate, peers): copy their
  # manifests and sources so the scratch workspace resolves with the same Cargo.lock
  mkdir -p "$scratch/crate/benches/peers" "$scratch/crate/examples" "$scratch/crate/tests"
  cp benches/Cargo.toml benches/ranklocal.rs benches/arms.rs benches/peers.rs "$scratch/crate/benches/"
  cp benches/peers/Cargo.toml benches/peers/lib.rs "$scratch/crate/benches/peers/"
  sed -i "$expr" "$scratch/crate/$file"
  if cmp -s "$file" "$scratch/crate/$file"; then
    echo "negative control '$name': the mutation did not apply (update loom_tests/negative.sh)"
    failed=1
    continue
  fi
  out=$(cd "$scratch/crate" && timeout 600 cargo test -q --release --features loom --test loom "$model" -- --test-threads=1 2>&1 || true)
  if grep -q "$expect" <<<"$out"; then
    echo "negative control '$name': caught by $model ($expect)"
  else
    echo "negative control '$name': NOT caught by $model"
    tail -20 <<<"$out"
    failed=1
  fi
done
exit $failed
