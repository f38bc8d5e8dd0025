//! The design paper's invariants and the code's `// SAFETY:` comments cite each other: every
//! invariant papers/design.md §4 states is cited by at least one `// SAFETY:` comment, and every
//! invariant a `// SAFETY:` comment cites is stated there (the one place they are stated).
//!
//! A `// SAFETY:` comment gives its local reason first and an invariant number only where the
//! reason is not local (it rests on what other code does), so a comment may cite none.

mod common;

use std::collections::BTreeSet;
use std::path::Path;

fn invariant_names(text: &str, prefix: &str) -> BTreeSet<String> {
    text.match_indices(prefix)
        .filter_map(|(i, _)| {
            let rest = &text[i + prefix.len()..];
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            (!digits.is_empty()).then(|| format!("I{digits}"))
        })
        .collect()
}

/// Every `I<n>` cited in a `// SAFETY:` comment (the comment runs over the following `//` lines);
/// counts the comments in `blocks`, and those that cite a number in `citing`.
fn cited_in(dir: &Path, out: &mut BTreeSet<String>, blocks: &mut usize, citing: &mut usize) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            cited_in(&path, out, blocks, citing);
            continue;
        }
        if path.extension().map_or(true, |e| e != "rs") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        let mut i = 0;
        while i < lines.len() {
            if lines[i].contains("// SAFETY:") {
                let mut block = String::from(lines[i]);
                i += 1;
                while i < lines.len() && lines[i].trim_start().starts_with("//") {
                    block.push_str(lines[i]);
                    i += 1;
                }
                let names = invariant_names(&block, "I");
                *citing += usize::from(!names.is_empty());
                out.extend(names);
                *blocks += 1;
            } else {
                i += 1;
            }
        }
    }
}

#[test]
#[cfg_attr(miri, ignore = "reads files: Miri isolates the file system")]
fn every_invariant_is_cited_and_every_citation_is_stated() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let paper = std::fs::read_to_string(root.join("papers/design.md")).unwrap();
    let stated = invariant_names(&paper, "* **I");
    assert!(stated.len() >= 8, "the paper states {stated:?}");

    let (mut cited, mut blocks, mut citing) = (BTreeSet::new(), 0, 0);
    cited_in(&root.join("src"), &mut cited, &mut blocks, &mut citing);
    assert!(
        blocks >= 10 && citing >= 10,
        "only {blocks} `// SAFETY:` comments found, {citing} citing an invariant"
    );
    let unstated: Vec<_> = cited.difference(&stated).collect();
    assert!(
        unstated.is_empty(),
        "`// SAFETY:` comments cite invariants design.md §4 does not state: {unstated:?}"
    );
    let uncited: Vec<_> = stated.difference(&cited).collect();
    assert!(
        uncited.is_empty(),
        "invariants design.md §4 states that no `// SAFETY:` comment cites: {uncited:?}"
    );
}
