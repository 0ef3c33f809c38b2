"""The tree as a product (issue 66): the README stays a user's page, bench/ a few entry points, every
probe in bench/probes/ is one a document names (the others leave the tree; git history keeps them and
docs/journal.md names the commit), and the documents' links lead somewhere."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README_MAX_LINES = 300
BENCH_MAX_ENTRIES = 15  # bench/'s top-level files and folders, results/ aside
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _documents() -> list[Path]:
    """README, docs/ and the results index and tables: where a script is named for a reader."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")), *sorted((ROOT / "bench" / "results").glob("*.md"))]


def _entries(folder: Path) -> list[str]:
    """What a reader sees in a folder: no hidden files, no byte-code caches a test run leaves."""
    return sorted(p.name for p in folder.iterdir() if not p.name.startswith(".") and p.name != "__pycache__")


def _named(name: str, text: str) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(name)}", text) is not None


def _anchors(markdown: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces as hyphens."""
    titles = (line.lstrip("#").strip().lower() for line in markdown.read_text().splitlines() if line.startswith("#"))
    return {re.sub(r"[^\w\- ]", "", title).replace(" ", "-") for title in titles}


def _relative_links(doc: Path) -> list[str]:
    return [target for target in LINK.findall(doc.read_text()) if not re.match(r"[a-z]+:", target)]


def test_readme_is_at_most_300_lines():
    lines = len((ROOT / "README.md").read_text().splitlines())
    assert lines <= README_MAX_LINES, (
        f"README.md has {lines} lines (at most {README_MAX_LINES}): full tables belong in docs/results.md, "
        "the README keeps one summary a family")


def test_bench_has_at_most_15_top_level_entries_besides_results():
    entries = [name for name in _entries(ROOT / "bench") if name != "results"]
    assert len(entries) <= BENCH_MAX_ENTRIES, (
        f"bench/ has {len(entries)} top-level entries besides results/ (at most {BENCH_MAX_ENTRIES}): {entries}; "
        "one-off scripts go to bench/probes/ or leave the tree")


def test_every_probe_is_named_by_a_document():
    text = "\n".join(doc.read_text() for doc in _documents())
    unnamed = [name for name in _entries(ROOT / "bench" / "probes") if not _named(name, text)]
    assert not unnamed, (
        f"probes no document names: {unnamed}; link each from the results file it made, or `git rm` it and "
        "name the commit that keeps it in docs/journal.md")


def test_every_relative_link_of_the_documents_names_a_file():
    broken = [f"{doc.relative_to(ROOT)}: {target}" for doc in _documents() for target in _relative_links(doc)
              if not (doc.parent / target.partition("#")[0]).exists()]
    assert not broken, broken


def test_every_anchor_the_readme_links_to_exists():
    readme = ROOT / "README.md"
    broken = []
    for target in _relative_links(readme):
        path, _, anchor = target.partition("#")
        page = readme.parent / path if path else readme
        if anchor and page.suffix == ".md" and anchor not in _anchors(page):
            broken.append(target)
    assert not broken, broken
