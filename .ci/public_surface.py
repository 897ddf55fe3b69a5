#!/usr/bin/env python3
"""Counts tollgate's public surface from rustdoc's HTML, all features on.

    python3 .ci/public_surface.py            # builds the docs, prints the counts
    python3 .ci/public_surface.py --no-build # counts docs already built
    python3 .ci/public_surface.py --list     # also every public function, one a line

Rustdoc's JSON output would be the precise source but needs a nightly
toolchain; the HTML of a stable `cargo doc` carries the same facts. Items
are the entries of rustdoc's "all items" page (structs, enums, traits,
functions, type aliases, constants, statics, macros, unions), each counted
once however many paths re-export it. Public modules are counted apart.
Functions are the free functions, the methods and associated functions of
inherent impls (on structs, enums and unions; a type alias would repeat its
target's), and the methods a public trait declares. Trait impls (`Debug`,
`From`, the crate's own traits on its types) add none: their methods are
counted once, where the trait declares them.
"""

import argparse
import json
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

CRATE = "tollgate"
ROOT = Path(__file__).resolve().parent.parent

# all.html's section ids, and the name printed for each.
KINDS = {
    "structs": "structs",
    "enums": "enums",
    "unions": "unions",
    "traits": "traits",
    "functions": "functions",
    "types": "type aliases",
    "constants": "constants",
    "statics": "statics",
    "macros": "macros",
}


def doc_dir(build):
    if build:
        subprocess.run(
            ["cargo", "doc", "-p", CRATE, "--all-features", "--no-deps", "--quiet"],
            cwd=ROOT,
            check=True,
        )
    metadata = subprocess.run(
        ["cargo", "metadata", "--format-version", "1", "--no-deps"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    )
    return Path(json.loads(metadata.stdout)["target_directory"]) / "doc" / CRATE


def items(doc):
    """Maps each all.html section id to the pages it lists."""
    html = (doc / "all.html").read_text()
    found = {}
    for section, body in re.findall(
        r'<h3 id="([a-z-]+)">[^<]*</h3><ul class="all-items">(.*?)</ul>', html
    ):
        if section not in KINDS:
            sys.exit(f"all.html has a section this script does not know: {section}")
        found[section] = re.findall(r'<li><a href="([^"]+)">', body)
    return found


def between(html, start, ends):
    """The part of `html` from the heading with id `start` to the first
    heading after it with an id in `ends` (or the end)."""
    begin = html.find(f'id="{start}"')
    if begin < 0:
        return ""
    cut = [i for i in (html.find(f'id="{end}"', begin) for end in ends) if i >= 0]
    return html[begin : min(cut) if cut else len(html)]


def functions(doc, pages):
    """Every public function: `(owner, name)` pairs."""
    found = [("", Path(page).stem.split(".", 1)[1]) for page in pages.get("functions", [])]
    for kind in ("structs", "enums", "unions"):
        for page in pages.get(kind, []):
            html = (doc / page).read_text()
            inherent = between(html, "implementations-list", ["trait-implementations", "synthetic-implementations", "blanket-implementations"])
            owner = page.removesuffix(".html").replace("/", "::")
            for name in re.findall(r'<section id="method\.([A-Za-z0-9_]+)(?:-\d+)?" class="method', inherent):
                found.append((owner, name))
    for page in pages.get("traits", []):
        html = (doc / page).read_text()
        after = ["object-safety", "dyn-compatibility", "foreign-impls", "implementors"]
        declared = between(html, "required-methods", ["provided-methods", *after])
        declared += between(html, "provided-methods", after)
        owner = page.removesuffix(".html").replace("/", "::")
        for name in re.findall(r'<section id="(?:ty)?method\.([A-Za-z0-9_]+)" class="method', declared):
            found.append((owner, name))
    return found


def modules(doc):
    """Public modules below the crate root, redirect pages left out: those
    of the API, and the guide's (its pages are modules of documentation)."""
    api, guide = 0, 0
    for index in doc.rglob("index.html"):
        if index.parent == doc or "<h1>Module " not in index.read_text():
            continue
        if index.parent.relative_to(doc).parts[0] == "guide":
            guide += 1
        else:
            api += 1
    return api, guide


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-build", action="store_true", help="count docs already built")
    parser.add_argument("--list", action="store_true", help="print every public function")
    args = parser.parse_args()

    doc = doc_dir(build=not args.no_build)
    pages = items(doc)
    fns = functions(doc, pages)

    by_kind = ", ".join(f"{len(pages[k])} {KINDS[k]}" for k in KINDS if pages.get(k))
    total = sum(len(v) for v in pages.values())
    per_owner = Counter(owner for owner, _ in fns)
    free = per_owner.pop("", 0)
    traits = sum(n for owner, n in per_owner.items() if "trait." in owner)
    print(f"public items: {total} ({by_kind})")
    api, guide = modules(doc)
    print(f"public modules below the root: {api} (and {guide} of the guide)")
    print(
        f"public functions: {len(fns)} ({free} free, "
        f"{len(fns) - free - traits} in inherent impls, {traits} declared by traits)"
    )
    print("most functions:", ", ".join(f"{o} {n}" for o, n in per_owner.most_common(5)))
    if args.list:
        for owner, name in sorted(fns):
            print(f"  {owner}::{name}" if owner else f"  {name}")


if __name__ == "__main__":
    main()
