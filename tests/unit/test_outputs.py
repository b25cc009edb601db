"""`--json` reports are written whole: a failed or interrupted write leaves the previous file and no scraps."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from infra import outputs


def test_a_report_replaces_the_previous_one_whole(tmp_path: Path) -> None:
    target = tmp_path / "report.json"
    target.write_text('{"old": true}\n')
    outputs.write_json(target, {"new": [1, 2]})
    assert json.loads(target.read_text()) == {"new": [1, 2]}
    assert [p.name for p in tmp_path.iterdir()] == ["report.json"]


def test_an_interrupted_write_keeps_the_previous_report_and_leaves_no_scraps(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "report.json"
    target.write_text('{"old": true}\n')

    def interrupted(src: str, dst: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(outputs.os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        outputs.write_json(target, {"new": True})
    assert target.read_text() == '{"old": true}\n'
    assert [p.name for p in tmp_path.iterdir()] == ["report.json"]


def test_the_cli_and_its_commands_share_one_usage_error() -> None:
    from infra import cli
    from infra.nodecheck import runner

    assert cli.UsageError is runner.UsageError is outputs.UsageError
    assert (cli.EXIT_OK, cli.EXIT_FAILURE, cli.EXIT_USAGE) == (0, 1, 2)
