//! The design paper's invariants and the code's `// SAFETY:` comments cite each other: every
//! invariant papers/design.md §4 states is cited by at least one `// SAFETY:` comment, and every
//! invariant a `// SAFETY:` comment cites is stated there (the one place they are stated).

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

/// Every `I<n>` cited in a `// SAFETY:` comment (the comment runs over the following `//` lines).
fn cited_in(dir: &Path, out: &mut BTreeSet<String>, blocks: &mut usize) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            cited_in(&path, out, blocks);
            continue;
        }
        if path.extension().is_none_or(|e| e != "rs") {
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
                assert!(
                    !names.is_empty(),
                    "{}: a `// SAFETY:` comment cites no invariant: {block}",
                    path.display()
                );
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

    let mut cited = BTreeSet::new();
    let mut blocks = 0;
    cited_in(&root.join("src"), &mut cited, &mut blocks);
    assert!(blocks >= 10, "only {blocks} `// SAFETY:` comments found");
    assert_eq!(
        stated, cited,
        "invariants stated (left) vs cited by `// SAFETY:` comments (right)"
    );
}
