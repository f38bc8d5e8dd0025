//! Unit tests of the trie and the writer's reclamation rule.

use super::*;
use std::cell::Cell;
use std::collections::BTreeMap;
use std::rc::Rc;

fn ptr(n: u64) -> Erased {
    Erased::from_non_null(NonNull::new((n as usize).wrapping_mul(8).max(8) as *mut ()).unwrap())
}

/// A test-only owner of a trie's nodes: frees replaced nodes at once (nothing else reads).
struct Owned {
    trie: Trie,
    seq: u64,
}

impl Owned {
    fn new() -> Owned {
        Owned {
            trie: Trie::EMPTY,
            seq: 0,
        }
    }
    fn insert(&mut self, k: u64, p: Erased) -> Option<Erased> {
        self.seq += 1;
        let mut scratch = Scratch::default();
        // SAFETY: single-threaded test; each write uses a fresh seq (I12).
        let old = unsafe { self.trie.insert(k, p, self.seq, &mut scratch) };
        for n in scratch.replaced.drain(..) {
            // SAFETY: nothing else reads the replaced node (I13).
            unsafe { Node::free(n) };
        }
        old
    }
    fn remove(&mut self, k: u64) -> Option<Erased> {
        self.seq += 1;
        let mut scratch = Scratch::default();
        // SAFETY: as above (I12).
        let old = unsafe { self.trie.remove(k, self.seq, &mut scratch) };
        for n in scratch.replaced.drain(..) {
            // SAFETY: as above (I13).
            unsafe { Node::free(n) };
        }
        old
    }
    fn get(&self, k: u64) -> Option<Erased> {
        // SAFETY: nodes alive while `self` is (I13).
        unsafe { self.trie.get(k) }
    }
    fn entries(&self) -> Vec<(u64, Erased)> {
        // SAFETY: as above (I13).
        unsafe { entries(&self.trie) }.collect()
    }
}

impl Drop for Owned {
    fn drop(&mut self) {
        // SAFETY: the only owner (I6, I13).
        unsafe { self.trie.free_nodes() };
    }
}

/// A small deterministic generator (xorshift).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn check_against(t: &Owned, model: &BTreeMap<u64, Erased>, probes: &[u64]) {
    assert_eq!(t.trie.len(), model.len());
    let got = t.entries();
    let want: Vec<(u64, Erased)> = model.iter().map(|(&k, &v)| (k, v)).collect();
    assert_eq!(got, want, "iteration differs from the model");
    for &k in probes {
        assert_eq!(t.get(k), model.get(&k).copied(), "lookup of {k}");
    }
}

#[test]
fn random_inserts_and_removes_match_a_btreemap() {
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let n = if cfg!(miri) { 60 } else { 3000 };
    for &spread in &[64u64, 5000, 300_000, u64::MAX] {
        let mut t = Owned::new();
        let mut model = BTreeMap::new();
        let mut probes = Vec::new();
        for i in 0..n {
            let k = rng.next() % spread.max(1);
            probes.push(k);
            probes.push(k.wrapping_add(1));
            if i % 5 == 4 {
                let victim = *model
                    .keys()
                    .nth(rng.next() as usize % model.len().max(1))
                    .unwrap_or(&k);
                assert_eq!(t.remove(victim), model.remove(&victim));
            } else {
                let p = ptr(i as u64 + 1);
                assert_eq!(t.insert(k, p), model.insert(k, p));
            }
        }
        check_against(&t, &model, &probes);
        // remove everything: the trie empties and stays usable
        let keys: Vec<u64> = model.keys().copied().collect();
        for k in keys {
            assert_eq!(t.remove(k), model.remove(&k));
        }
        assert_eq!(t.trie.len(), 0);
        assert!(t.trie.root.is_none());
        assert_eq!(t.entries(), vec![]);
        t.insert(3, ptr(3));
        assert_eq!(t.get(3), Some(ptr(3)));
    }
}

#[test]
fn ids_across_level_boundaries() {
    let f = FANOUT as u64;
    let mut edges = vec![
        0,
        1,
        f - 1,
        f,
        f + 1,
        f * f - 1,
        f * f,
        f * f * f - 1,
        f * f * f,
    ];
    edges.extend([1 << 40, (1 << 40) + 1, u64::MAX / 2, u64::MAX - 1, u64::MAX]);
    let mut t = Owned::new();
    let mut model = BTreeMap::new();
    for (i, &k) in edges.iter().enumerate() {
        let p = ptr(i as u64 + 1);
        t.insert(k, p);
        model.insert(k, p);
        // every earlier id still found after each growth
        let probes: Vec<u64> = edges.iter().flat_map(|&e| [e, e.wrapping_add(2)]).collect();
        check_against(&t, &model, &probes);
    }
    assert_eq!(t.trie.height(), MAX_HEIGHT);
}

#[test]
fn huge_ids_first() {
    let mut t = Owned::new();
    t.insert(u64::MAX, ptr(1));
    assert_eq!(t.trie.height(), MAX_HEIGHT);
    assert_eq!(t.get(u64::MAX), Some(ptr(1)));
    assert_eq!(t.get(u64::MAX - 1), None);
    assert_eq!(t.get(0), None);
    t.insert(1, ptr(2));
    assert_eq!(t.entries(), vec![(1, ptr(2)), (u64::MAX, ptr(1))]);
    assert_eq!(t.remove(u64::MAX), Some(ptr(1)));
    assert_eq!(t.entries(), vec![(1, ptr(2))]);
    assert_eq!(t.get(u64::MAX), None);
}

#[test]
fn dense_ids_use_few_levels() {
    let mut t = Owned::new();
    let n = (FANOUT * FANOUT) as u64;
    for k in 1..n {
        t.insert(k, ptr(k));
    }
    assert_eq!(t.trie.height(), 2);
    t.insert(n, ptr(n));
    assert_eq!(t.trie.height(), 3);
    assert_eq!(t.entries().len() as u64, n);
}

#[test]
fn old_versions_are_unchanged_by_later_writes() {
    // a persistent use: keep every version, never free a replaced node until the end
    let mut versions: Vec<(Trie, BTreeMap<u64, Erased>)> = Vec::new();
    let mut all_replaced = Vec::new();
    let mut t = Trie::EMPTY;
    let mut model = BTreeMap::new();
    let n = if cfg!(miri) { 40 } else { 600 };
    let mut rng = Rng(7);
    for seq in 1..=n {
        let mut scratch = Scratch::default();
        let k = if seq % 3 == 0 {
            rng.next() % 10_000
        } else {
            seq
        };
        if seq % 7 == 0 && !model.is_empty() {
            let victim = *model.keys().next().unwrap();
            // SAFETY: fresh seq per write; old nodes kept alive below (I12, I13).
            let got = unsafe { t.remove(victim, seq, &mut scratch) };
            assert_eq!(got, model.remove(&victim));
        } else {
            let p = ptr(seq);
            // SAFETY: as above (I12, I13).
            let got = unsafe { t.insert(k, p, seq, &mut scratch) };
            assert_eq!(got, model.insert(k, p));
            // path copying: at most one replaced node per level
            assert!(
                scratch.replaced.len() as u32 <= t.height(),
                "copied more than the path"
            );
        }
        all_replaced.append(&mut scratch.replaced);
        versions.push((t, model.clone()));
    }
    for (v, m) in &versions {
        // SAFETY: no node was freed yet (I13).
        let got: Vec<_> = unsafe { entries(v) }.collect();
        let want: Vec<_> = m.iter().map(|(&k, &v)| (k, v)).collect();
        assert_eq!(got, want, "an old version changed");
    }
    // free: the last version's nodes plus every replaced node, each exactly once
    let mut live = std::collections::HashSet::new();
    // SAFETY: nothing freed yet (I13).
    unsafe { t.for_each_node(&mut |n| assert!(live.insert(n))) };
    for n in all_replaced {
        assert!(
            live.insert(n),
            "a node was replaced twice or is still in the last version"
        );
    }
    for n in live {
        // SAFETY: each node once; nothing reads any more (I13).
        unsafe { Node::free(n) };
    }
}

/// A fake version handle whose deadness the test controls.
struct Fake(Rc<Cell<bool>>);
impl ReplacedVersion for Fake {
    fn is_dead(&self) -> bool {
        self.0.get()
    }
}

/// A fake version handle the backend reuses ([`ReplacedVersion::REUSED`]), numbered.
struct Reused(u64, Rc<Cell<bool>>);
impl ReplacedVersion for Reused {
    const REUSED: bool = true;
    fn is_dead(&self) -> bool {
        self.1.get()
    }
}

/// A backend that reuses versions gets back the ones seen dead, and only those, at most
/// `SPARE_VERSIONS` of them (the rest are dropped); one that does not reuse them keeps none.
#[test]
fn dead_versions_are_kept_for_reuse_up_to_the_cap() {
    use super::reclaimer::SPARE_VERSIONS;
    let mut r: Reclaimer<Reused> = Reclaimer::NEW;
    let mut t = Trie::EMPTY;
    let n = SPARE_VERSIONS as u64 + 10;
    let mut flags = Vec::new();
    for seq in 1..=n + 1 {
        // SAFETY: the only writer; the published version's nodes are alive and nothing is born
        // at `seq` yet (I12, I13, I16).
        let mut w = unsafe { r.write(t, seq - 1) };
        assert!(
            w.reuse_version().is_none(),
            "a version reused before it died"
        );
        w.insert(seq, ptr(seq));
        t = w.trie();
        let old = (seq > 1).then(|| {
            let dead = Rc::new(Cell::new(false));
            flags.push(dead.clone());
            Reused(seq - 1, dead)
        });
        // SAFETY: version `seq` replaced version seq-1 (I14).
        unsafe { w.retire(old) };
    }
    // versions 1..=n retired; all but the last die, then one more write collects them
    for d in &flags[..flags.len() - 1] {
        d.set(true);
    }
    // SAFETY: as above (I12, I13, I16).
    let mut w = unsafe { r.write(t, n + 1) };
    w.insert(n + 2, ptr(n + 2));
    t = w.trie();
    let last = Rc::new(Cell::new(false));
    // SAFETY: version n+2 replaced version n+1 (I14).
    unsafe { w.retire(Some(Reused(n + 1, last.clone()))) };
    // SAFETY: as above (I12, I13, I16).
    let mut w = unsafe { r.write(t, n + 2) };
    let mut reused = Vec::new();
    while let Some(v) = w.reuse_version() {
        assert!(v.is_dead(), "version {} reused while alive", v.0);
        reused.push(v.0);
    }
    reused.sort_unstable();
    assert_eq!(reused.len(), SPARE_VERSIONS, "kept {reused:?}");
    assert!(
        reused.iter().all(|&v| v < n),
        "a live version kept: {reused:?}"
    );
    last.set(true);
    flags[flags.len() - 1].set(true);
    // SAFETY: every version is dead (I13).
    unsafe { r.collect_all() };
    assert_eq!(r.pending().0, 0);
    // SAFETY: the last version's nodes, only owner (I13).
    unsafe { t.free_nodes() };
    // a backend that does not reuse versions: none kept
    let mut r: Reclaimer<Fake> = Reclaimer::NEW;
    let mut t = Trie::EMPTY;
    for seq in 1..=3u64 {
        // SAFETY: as above (I12, I13, I16).
        let mut w = unsafe { r.write(t, seq - 1) };
        assert!(w.reuse_version().is_none(), "kept a version nobody reuses");
        w.insert(seq, ptr(seq));
        t = w.trie();
        // SAFETY: as above (I14).
        unsafe { w.retire((seq > 1).then(|| Fake(Rc::new(Cell::new(true))))) };
    }
    // SAFETY: the last version's nodes, only owner (I13).
    unsafe { r.free_replaced() };
    // SAFETY: as above (I13).
    unsafe { t.free_nodes() };
}

#[test]
fn replaced_nodes_wait_for_every_version_that_contains_them() {
    let mut r: Reclaimer<Fake> = Reclaimer::NEW;
    let mut t = Trie::EMPTY;
    let mut flags = Vec::new();
    let mut tries = Vec::new();
    let f = FANOUT as u64;
    // versions 1..=6, each inserting an id in the same leaf, so each replaces the path
    for seq in 1..=6u64 {
        // SAFETY: the only writer; version seq-1's nodes are alive (held versions are not freed)
        // and nothing is born at `seq` yet (I12, I13, I16).
        let mut w = unsafe { r.write(t, seq - 1) };
        w.insert(f * f + seq, ptr(seq));
        assert_eq!(w.seq(), seq);
        t = w.trie();
        tries.push(t);
        let old = (seq > 1).then(|| {
            let dead = Rc::new(Cell::new(false));
            flags.push(dead.clone());
            Fake(dead)
        });
        // SAFETY: version `seq` replaced version seq-1 (I14).
        unsafe { w.retire(old) };
    }
    // versions 1..=5 retired, none dead: every replaced node kept
    let (garbage, retired) = r.pending();
    assert_eq!(retired, 5);
    assert_eq!(garbage as u32, 5 * t.height());
    // version 3 stays held; the others die
    for (i, d) in flags.iter().enumerate() {
        if i + 1 != 3 {
            d.set(true);
        }
    }
    // SAFETY: as recorded (I13).
    unsafe { r.collect_all() };
    let (garbage, retired) = r.pending();
    assert_eq!(retired, 1, "only the held version is left");
    // only version 3's own nodes that later versions replaced are kept: its path
    assert_eq!(garbage as u32, t.height());
    // version 3 still reads correctly (Miri checks the nodes are alive)
    // SAFETY: version 3 is not dead, so its nodes are alive (I13).
    let v3: Vec<_> = unsafe { entries(&tries[2]) }.map(|(k, _)| k).collect();
    assert_eq!(v3, vec![f * f + 1, f * f + 2, f * f + 3]);
    flags[2].set(true);
    // SAFETY: as recorded (I13).
    unsafe { r.collect_all() };
    assert_eq!(r.pending(), (0, 0));
    // SAFETY: the last version's nodes, only owner (I13).
    unsafe { t.free_nodes() };
}

/// The writer's buffers give their memory back once a backlog drained (halved at a quarter full),
/// and the front of the queues is freed without a full rescan.
/// The writer keeps one spare node per 32 entries of its map, at least 4 and at most 64: a small
/// map holds a few hundred bytes of spares, a large one no more than 64 nodes (33 KiB); when the
/// map shrinks, the spares above the new cap are freed.
#[test]
fn spare_nodes_scale_with_the_map() {
    let mut s = Scratch::NEW;
    for (entries, cap) in [
        (0, 4),
        (10, 4),
        (159, 4),
        (160, 5),
        (1_024, 32),
        (2_047, 63),
        (2_048, 64),
        (1 << 20, 64),
    ] {
        s.size_for(entries);
        assert_eq!(
            s.spares().0,
            cap,
            "spares kept for a map of {entries} entries"
        );
    }
    for _ in 0..100 {
        // SAFETY: a fresh node nothing else reaches (I13).
        unsafe { s.recycle(Node::empty(0)) };
    }
    assert_eq!(s.spares(), (64, 64), "recycled beyond the cap");
    s.size_for(1_024);
    assert_eq!(
        s.spares(),
        (32, 32),
        "the map shrank: spares above the cap are freed"
    );
    s.size_for(0);
    assert_eq!(s.spares(), (4, 4));
}

#[test]
fn a_drained_backlog_gives_its_buffers_back() {
    let mut r: Reclaimer<Fake> = Reclaimer::NEW;
    let mut t = Trie::EMPTY;
    let f = FANOUT as u64;
    let mut flags = Vec::new();
    let n = if cfg!(miri) { 300 } else { 3000 };
    for seq in 1..=n {
        // SAFETY: the only writer; no node is freed while its version is held (I12, I13, I16).
        let mut w = unsafe { r.write(t, seq - 1) };
        w.insert(f * f + seq % f, ptr(seq));
        t = w.trie();
        let old = (seq > 1).then(|| {
            let dead = Rc::new(Cell::new(false));
            flags.push(dead.clone());
            Fake(dead)
        });
        // SAFETY: version `seq` replaced version seq-1 (I14).
        unsafe { w.retire(old) };
    }
    let (garbage, versions) = r.pending();
    assert_eq!(versions as u64, n - 1, "a version was forgotten while held");
    assert!(garbage as u64 >= n - 1);
    let (gcap, vcap) = r.capacities();
    assert!(gcap >= garbage && vcap >= versions);
    for d in &flags {
        d.set(true);
    }
    // the next write frees the dead front in order, then the buffers shrink
    for seq in n + 1..=n + 8 {
        // SAFETY: as above (I12, I13, I16).
        let mut w = unsafe { r.write(t, seq - 1) };
        w.insert(f * f + seq % f, ptr(seq));
        t = w.trie();
        let dead = Rc::new(Cell::new(true));
        // SAFETY: as above (I14).
        unsafe { w.retire(Some(Fake(dead))) };
    }
    assert_eq!(
        r.pending(),
        (0, 0),
        "dead versions and their nodes were kept"
    );
    let (gcap2, vcap2) = r.capacities();
    assert!(
        gcap2 <= gcap / 2 && vcap2 <= vcap / 2,
        "the buffers kept their peak: {gcap} -> {gcap2}, {vcap} -> {vcap2}"
    );
    // SAFETY: the last version's nodes, only owner (I13).
    unsafe { t.free_nodes() };
}

/// Versions that cannot die (a pin held elsewhere keeps every version replaced after it alive)
/// make the writer's backlog grow, not the work per write: over n writes the full rescans examine
/// O(n) entries in all (each rescan waits for the backlog to double), where rescanning at every
/// write examined O(n²). Then, one version held out of order keeps little behind it.
#[test]
fn a_held_pin_costs_linear_work_over_many_writes() {
    let mut r: Reclaimer<Fake> = Reclaimer::NEW;
    let mut t = Trie::EMPTY;
    let f = FANOUT as u64;
    let pinned = Rc::new(Cell::new(false)); // every version while "a pin is held elsewhere"
    let held = Rc::new(Cell::new(false)); // version 1: never dies during the writes
    let n = if cfg!(miri) { 400 } else { 10_000 };
    let before = crate::counters::get(&crate::counters::RESCANNED);
    for seq in 1..=n {
        // SAFETY: the only writer; no node is freed while a version that has it is held (I12,
        // I13, I16).
        let mut w = unsafe { r.write(t, seq - 1) };
        w.insert(f * f + seq % f, ptr(seq));
        t = w.trie();
        let old = match seq {
            1 => None,
            2 => Some(Fake(held.clone())),
            _ => Some(Fake(pinned.clone())),
        };
        // SAFETY: version `seq` replaced version seq-1 (I14).
        unsafe { w.retire(old) };
    }
    let examined = crate::counters::get(&crate::counters::RESCANNED) - before;
    let pushed = n * (1 + u64::from(t.height())); // a version and its replaced path per write
    assert!(
        examined <= 4 * pushed,
        "full rescans examined {examined} entries for {pushed} retired: not linear"
    );
    // the pin ends; version 1 stays held: within n/4 more writes only what it keeps is left
    pinned.set(true);
    for seq in n + 1..=n + n / 4 {
        // SAFETY: as above (I12, I13, I16).
        let mut w = unsafe { r.write(t, seq - 1) };
        w.insert(f * f + seq % f, ptr(seq));
        t = w.trie();
        // SAFETY: as above (I14).
        unsafe { w.retire(Some(Fake(Rc::new(Cell::new(true))))) };
    }
    // what the held version keeps: its own path, and at most about as much again
    let (garbage, versions) = r.pending();
    assert!(
        versions + garbage <= 2 * super::reclaimer::MIN_SCAN,
        "{garbage} nodes and {versions} versions kept behind one held version"
    );
    held.set(true);
    // SAFETY: as recorded (I13).
    unsafe { r.collect_all() };
    assert_eq!(r.pending(), (0, 0));
    // SAFETY: the last version's nodes, only owner (I13).
    unsafe { t.free_nodes() };
}

/// One version held (a long-lived iterator) over a large map while later versions die in order:
/// the held version keeps every node later writes replace, and the probe's rescans must not
/// rescan all of that every few writes (they did when triggered by dead versions alone: 3.2
/// million entries examined for 40,000 retired, 10,000 writes over 20,000 entries, growing with
/// the map).
#[test]
fn a_held_version_over_a_large_map_costs_linear_work() {
    let mut r: Reclaimer<Fake> = Reclaimer::NEW;
    let mut t = Trie::EMPTY;
    let (n, writes) = if cfg!(miri) {
        (600, 300)
    } else {
        (20_000, 10_000)
    };
    let held = Rc::new(Cell::new(false));
    let mut seq = 0;
    let mut write = |r: &mut Reclaimer<Fake>, t: &mut Trie, k: u64, old: Option<Fake>| {
        // SAFETY: the only writer; no node is freed while a version that has it is held (I12,
        // I13, I16).
        let mut w = unsafe { r.write(*t, seq) };
        w.insert(k, ptr(k + seq));
        seq += 1;
        *t = w.trie();
        // SAFETY: version `seq` replaced version seq-1 (I14).
        unsafe { w.retire(old) };
    };
    for k in 0..n {
        let old = (k > 0).then(|| Fake(Rc::new(Cell::new(true))));
        write(&mut r, &mut t, k, old);
    }
    let before = crate::counters::get(&crate::counters::RESCANNED);
    write(&mut r, &mut t, 0, Some(Fake(held.clone())));
    // writes spread over the map: each replaces a path, most of it the held version's nodes
    for i in 1..writes {
        let k = (i * 7919) % n;
        write(&mut r, &mut t, k, Some(Fake(Rc::new(Cell::new(true)))));
    }
    let examined = crate::counters::get(&crate::counters::RESCANNED) - before;
    let pushed = writes * (1 + u64::from(t.height()));
    assert!(
        examined <= 8 * pushed,
        "rescans examined {examined} entries for {pushed} retired behind one held version"
    );
    held.set(true);
    // SAFETY: as recorded (I13).
    unsafe { r.collect_all() };
    assert_eq!(r.pending(), (0, 0));
    // SAFETY: the last version's nodes, only owner (I13).
    unsafe { t.free_nodes() };
}

/// The shrink rule's boundaries: a buffer gives memory back only when it holds more than 64
/// slots and is less than a quarter full (halving then keeps pushes amortized O(1): a shrink never
/// leaves a buffer full).
#[test]
fn buffers_shrink_only_above_64_slots_and_below_a_quarter_full() {
    use super::reclaimer::drained;
    assert!(!drained(0, 64), "64 slots or fewer are kept");
    assert!(drained(0, 65));
    assert!(drained(31, 128));
    assert!(!drained(32, 128), "a quarter full is kept");
    assert!(!drained(100, 128));
    assert!(!drained(128, 128));
}

/// `insert_in_place` as the writer calls it, with a scratch of its own.
fn fill(t: &Owned, id: u64, frozen: u64) -> bool {
    let mut scratch = Scratch::default();
    // SAFETY: single-threaded test: the only writer, nodes alive while `t` is (I13, I16); the
    // nodes a hang builds join the trie, freed with it or when a write replaces them.
    unsafe { t.trie.insert_in_place(id, ptr(id), frozen, &mut scratch) }
}

/// I38: a first touch fills its slot of the published leaf in place only when the leaf exists,
/// is younger than the newest snapshot taken (`frozen`) and the slot is empty, and only below the
/// trie's range; what it fills, lookups and iteration then see, and the trie's shape (its nodes
/// and their births) is unchanged.
#[test]
fn fills_in_place_only_into_an_existing_unfrozen_leafs_empty_slot() {
    let mut t = Owned::new();
    t.insert(1, ptr(1)); // one leaf (ids 0..64), born at 1
    assert!(
        fill(&t, 2, 0),
        "an empty slot of an existing, unfrozen leaf"
    );
    assert_eq!(t.get(2), Some(ptr(2)));
    assert!(!fill(&t, 2, 0), "a full slot is never written in place");
    assert!(
        !fill(&t, 3, 1),
        "a leaf born at or before the newest snapshot is frozen"
    );
    assert!(fill(&t, 3, 0));
    assert!(
        !fill(&t, 64, 0),
        "beyond the trie's range: the write must grow it"
    );
    t.insert(64, ptr(64)); // height 2: leaves 0..64 and 64..128 under a root
    assert!(fill(&t, 65, 0));
    assert_eq!(t.get(65), Some(ptr(65)));
    assert_eq!(t.get(4), None);
    let ids: Vec<u64> = t.entries().into_iter().map(|(k, _)| k).collect();
    assert_eq!(ids, [1, 2, 3, 64, 65]);
    assert_eq!(
        t.trie.len(),
        2,
        "the trie counts its own writes, not the fills"
    );
}

/// A first touch whose leaf is missing hangs a new one under its existing parent (I38): born at
/// the parent's birth, holding only the new entry, and never under a frozen parent.
#[test]
fn hangs_a_missing_leaf_only_under_an_unfrozen_parent() {
    let mut t = Owned::new();
    t.insert(1, ptr(1));
    t.insert(64, ptr(64)); // height 2, root and leaves born at 2 (the leaf of 1 at 1)
    assert!(
        !fill(&t, 200, 2),
        "a root born at or before the newest snapshot is frozen: no leaf is hung under it"
    );
    assert_eq!(t.get(200), None);
    assert!(fill(&t, 200, 1), "no leaf for ids 192..256: one is hung");
    assert_eq!(t.get(200), Some(ptr(200)));
    assert_eq!(t.get(201), None);
    // SAFETY: reachable from `t`, alive (I13).
    let (root, leaf) = unsafe {
        let root = t.trie.root.unwrap().cast::<Node>();
        let leaf = (*root.as_ptr()).slots[3].get().unwrap().cast::<Node>();
        (Node::birth_of(root), Node::birth_of(leaf))
    };
    assert_eq!(
        (root, leaf),
        (2, 2),
        "a hung leaf is born at its parent's birth"
    );
    assert!(fill(&t, 201, 1), "the hung leaf takes fills like any other");
    // height 3 (ids below 262,144): a missing inner node and its leaf are hung together
    t.insert(5000, ptr(5000));
    assert_eq!(t.trie.height(), 3);
    assert!(fill(&t, 100_000, 2));
    assert_eq!(t.get(100_000), Some(ptr(100_000)));
    assert_eq!(t.get(100_001), None);
    let ids: Vec<u64> = t.entries().into_iter().map(|(k, _)| k).collect();
    assert_eq!(ids, [1, 64, 200, 201, 5000, 100_000]);
    // a write that copies the path replaces hung nodes like any other
    t.insert(202, ptr(202));
    t.remove(200);
    let ids: Vec<u64> = t.entries().into_iter().map(|(k, _)| k).collect();
    assert_eq!(ids, [1, 64, 201, 202, 5000, 100_000]);
}

/// Fills and hangs interleaved with writes agree with a `BTreeMap`: lookups and iteration see
/// exactly what was filled, hung or written, and a refused fill changes nothing.
#[test]
fn random_fills_hangs_and_writes_match_a_btreemap() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let n = if cfg!(miri) { 120 } else { 4000 };
    for &spread in &[200u64, 20_000, 2_000_000] {
        let mut t = Owned::new();
        let mut model = BTreeMap::new();
        let mut probes = Vec::new();
        let mut frozen = 0;
        for i in 0..n {
            let k = rng.next() % spread;
            probes.push(k);
            match rng.next() % 8 {
                0 => {
                    if let Some(&victim) =
                        model.keys().nth(rng.next() as usize % model.len().max(1))
                    {
                        assert_eq!(t.remove(victim), model.remove(&victim));
                    }
                }
                1 => {
                    let p = ptr(i as u64 + 1);
                    assert_eq!(t.insert(k, p), model.insert(k, p));
                }
                2 => frozen = t.seq, // a snapshot of the current version
                _ => {
                    if fill(&t, k, frozen) {
                        // the count the map keeps itself and hands to the next write (I38)
                        t.trie.set_len(t.trie.len() + 1);
                        assert!(model.insert(k, ptr(k)).is_none(), "filled a full slot {k}");
                    } else if let std::collections::btree_map::Entry::Vacant(e) = model.entry(k) {
                        // refused: the writer writes a new version instead
                        assert_eq!(t.insert(k, ptr(k)), None);
                        e.insert(ptr(k));
                    }
                }
            }
        }
        check_against(&t, &model, &probes);
    }
}
