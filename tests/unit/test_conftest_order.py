"""The suite's scheduling list (tests/conftest.py LONGEST_FIRST) names test files that exist, once each, and
`make test` hands files out in collection order, so that list decides which files start first."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import ALONE_FILES, LONGEST_FIRST

REPO = Path(__file__).resolve().parents[2]


def test_every_listed_file_exists_once() -> None:
    assert [p for p in LONGEST_FIRST if not (REPO / p).is_file()] == []
    assert len(set(LONGEST_FIRST)) == len(LONGEST_FIRST)
    assert [p for p in ALONE_FILES if not (REPO / p).is_file()] == []


def test_make_test_keeps_the_collection_order() -> None:
    recipe = [line for line in (REPO / "Makefile").read_text().splitlines() if "-m pytest" in line and "-n " in line]
    assert recipe and all("--dist loadfile" in line and "--no-loadscope-reorder" in line for line in recipe), recipe
