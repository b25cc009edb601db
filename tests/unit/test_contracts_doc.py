"""docs/contracts.md stays true: every assumption names its upstream source and a test that exists.

A row whose "Pinned by" test was renamed or deleted would claim a guarantee nothing checks any more; a section
left empty would claim the kit assumes nothing of that system. And the repository stands on its own: nothing in it
cites notes that live outside it.
"""

from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CONTRACTS = ROOT / "docs" / "contracts.md"
# `tests/…/test_x.py::test_name` (optionally `::Class::test_name`); a row may name several.
TEST_REF = re.compile(r"(tests/[\w/]+\.py)(?:::([\w:]+))?")
# A source is a repository at a tag or commit and a path (owner/repo@tag:path), an issue/PR (owner/repo#N), a
# published document (a URL or a paper), or a package at a version (name==1.2.3, name@1.2.3, "vllm 0.33.0 wheel").
SOURCE = re.compile(r"[\w.-]+/[\w.-]+@[\w.+-]+|[\w.-]+/[\w.-]+#\d+|https?://|\b[\w.-]+(==|@)\d[\w.]*|\(\d{4}\)"
                    r"|\b[A-Za-z][\w.-]* v?\d+\.\d+(\.\d+)?\b"
                    # weaker, still checkable: a repository path without a tag, a documentation site's page, a vendor
                    # guide or API reference by name
                    r"|[\w.-]+/[\w.-]+:[\w./{}-]+|\b[\w-]+\.(io|com|org|dev)/\S+|user guide|API reference|docs\b")


def rows() -> list[tuple[str, str, str, str]]:
    """(section, assumption, source, pinned by) of every table row."""
    out, section = [], ""
    for line in CONTRACTS.read_text().splitlines():
        if line.startswith("## "):
            section = line[3:].strip()
        elif line.startswith("|") and not re.fullmatch(r"\|[\s|:-]+\|", line):
            cells = [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]
            if cells[:3] == ["Assumption", "Source", "Pinned by"]:
                continue
            assert len(cells) == 3, f"{section}: a row needs exactly three cells: {line}"
            out.append((section, *cells))
    return out


def _defined(path: Path, dotted: str) -> bool:
    tree = ast.parse(path.read_text())
    scope: list[ast.stmt] = tree.body
    for part in dotted.split("::"):
        found = next((n for n in scope if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
                      and n.name == part), None)
        if found is None:
            return False
        scope = found.body if isinstance(found, ast.ClassDef) else []
    return True


@pytest.mark.parametrize("row", rows(), ids=lambda r: f"{r[0][:20]}:{r[1][:40]}")
def test_every_row_names_a_source_and_an_existing_test(row: tuple[str, str, str, str]) -> None:
    section, assumption, source, pinned = row
    assert assumption and SOURCE.search(source), f"{section}: '{assumption}' has no upstream source: {source!r}"
    refs = TEST_REF.findall(pinned)
    assert refs, f"{section}: '{assumption}' names no test: {pinned!r}"
    for file, name in refs:
        path = ROOT / file
        assert path.is_file(), f"{section}: '{assumption}': {file} does not exist"
        if name:
            assert _defined(path, name), f"{section}: '{assumption}': {file} defines no {name}"


def test_every_section_lists_at_least_one_assumption() -> None:
    sections = re.findall(r"^## (.+)$", CONTRACTS.read_text(), flags=re.M)
    covered = {s for s, *_ in rows()}
    assert [s for s in sections if s not in covered] == []


def test_nothing_in_the_repository_cites_notes_outside_it() -> None:
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True,
                             text=True).stdout.split("\0")
    pattern = re.compile(r"(\.\./)?shared/(DESIGN|STYLE|reference|tools)|\b(FACTS|REALITY)\.md\b")
    this = Path(__file__).resolve().relative_to(ROOT).as_posix()
    hits = [f for f in tracked if f and f != this and f.endswith((".py", ".md", ".yaml", "Makefile"))
            and (ROOT / f).is_file() and pattern.search((ROOT / f).read_text(errors="replace"))]
    assert hits == []
