#!/usr/bin/env python3
"""Every file path a doc names exists.

Reads the README, the pages of docs/, the manifests, the CI scripts and the
comments of every Rust file in the workspace, finds the repository paths
they name (`src/...`, `tests/...`, `benches/...`, `examples/...`,
`docs/...`, `loom-tests/...`, `.ci/...`, `fuzz/...`), and fails listing
each one that does not exist. CHANGELOG.md is history and is not read.
"""

import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
PATH = re.compile(
    r"(?<![\w./-])((?:src|tests|benches|examples|docs|loom-tests|fuzz|\.ci)/[\w./-]*[\w/])"
)
# Paths that name something made by a run, not kept in the repository.
MADE = ("target/",)


def sources():
    yield ROOT / "README.md"
    yield from sorted((ROOT / "docs").glob("*.md"))
    yield from sorted((ROOT / ".ci").iterdir())
    for pattern in ("**/*.rs", "**/Cargo.toml", "**/*.py"):
        for path in sorted(ROOT.glob(pattern)):
            if "target" not in path.relative_to(ROOT).parts:
                yield path


def named(path):
    text = path.read_text(encoding="utf-8", errors="replace")
    for number, line in enumerate(text.splitlines(), 1):
        for match in PATH.finditer(line):
            name = match.group(1).rstrip(".")
            yield number, name


def main():
    missing = []
    for source in sources():
        if source.is_dir():
            continue
        for number, name in named(source):
            if name.startswith(MADE) or "*" in name:
                continue
            # A path named from inside a member crate may be relative to it.
            bases = [ROOT] + [p for p in source.parents if (p / "Cargo.toml").exists()]
            if not any((base / name).exists() for base in bases):
                missing.append(f"{source.relative_to(ROOT)}:{number}: {name}")
    for line in missing:
        print(line)
    if missing:
        print(f"{len(missing)} paths named in docs and comments do not exist")
        sys.exit(1)
    print("every path named in docs and comments exists")


if __name__ == "__main__":
    main()
