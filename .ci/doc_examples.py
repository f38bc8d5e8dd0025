#!/usr/bin/env python3
"""How many public fns carry an example in their doc comment.

Counts, in src/**/*.rs:
  methods  `pub fn` (also `const`/`unsafe`) in inherent `impl` blocks of the types lib.rs
           re-exports, skipping `#[doc(hidden)]` and `#[cfg(loom)]` items (not in the rendered
           docs);
  all      the above, plus the fns of re-exported traits (`OnBehalfExt`) and free `pub fn`s
           re-exported by lib.rs (`on_behalf_of`).
An fn "has an example" if its own doc comment contains a ``` code block.

Usage: python3 .ci/doc_examples.py [-v]   (-v lists every fn without an example)
"""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
SRC = ROOT / "src"


def exported_names():
    text = (SRC / "lib.rs").read_text()
    names = set()
    for m in re.finditer(r"^pub use crate::[\w:]*?(?:\{([^}]*)\}|(\w+));", text, re.M):
        group = m.group(1) if m.group(1) is not None else m.group(2)
        names.update(n.strip() for n in group.split(",") if n.strip())
    return names


def code_of(line):
    """A line without comments and string literals (enough for brace counting here)."""
    line = re.sub(r'"(\\.|[^"\\])*"', '""', line)
    return line.split("//", 1)[0]


def scan(path, names):
    lines = path.read_text().splitlines()
    stack = []  # headers of the open `{` blocks
    pending = ""  # code since the last `{`, `}` or `;`
    found = []  # (kind, name, has_example, where)
    for i, raw in enumerate(lines):
        stripped = raw.strip()
        m = re.match(r"(pub\s+)?(const\s+)?(unsafe\s+)?fn\s+(\w+)", stripped)
        if m:
            attrs = []
            j = i - 1
            while j >= 0 and re.match(r"\s*(///|#\[|//)", lines[j]):
                attrs.append(lines[j].strip())
                j -= 1
            doc = "\n".join(a for a in attrs if a.startswith("///"))
            hidden = any("doc(hidden)" in a or a.startswith("#[cfg(loom)]") for a in attrs)
            top = stack[-1] if stack else ""
            kind = None
            inherent = re.match(r"impl\b\s*(<.*>)?\s*(\w+)", top)
            if m.group(1) and inherent and " for " not in top and inherent.group(2) in names:
                kind = "method"
            trait = re.match(r"pub trait (\w+)", top)
            if trait and trait.group(1) in names:
                kind = "trait fn"
            if m.group(1) and not stack and m.group(4) in names:
                kind = "free fn"
            if kind and not hidden:
                owner = inherent.group(2) if kind == "method" else (
                    trait.group(1) if kind == "trait fn" else "")
                found.append((kind, f"{owner}::{m.group(4)}" if owner else m.group(4),
                              "```" in doc, f"{path.relative_to(ROOT)}:{i + 1}"))
        for ch in code_of(raw):
            if ch == "{":
                stack.append(" ".join(pending.split()))
                pending = ""
            elif ch == "}":
                if stack:
                    stack.pop()
                pending = ""
            elif ch == ";":
                pending = ""
            else:
                pending += ch
        pending += " "
    return found


def main():
    names = exported_names()
    found = []
    for path in sorted(SRC.rglob("*.rs")):
        found += scan(path, names)
    methods = [f for f in found if f[0] == "method"]
    for label, items in (("methods", methods), ("all", found)):
        n = len(items)
        k = sum(1 for f in items if f[2])
        print(f"{label:8} {k:3} / {n:3} with an example ({100 * k / max(n, 1):.0f}%)")
    if "-v" in sys.argv:
        for kind, name, ok, where in found:
            if not ok:
                print(f"  no example: {kind:8} {name:32} {where}")


if __name__ == "__main__":
    main()
