"""The aifactory CLI: help on every command, exit codes, clear errors without tracebacks."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from infra.cli import build_parser, main
from tests.support.preflight_baseline import synth_exit_code

GOOD = {
    "aifactory:target": {"provider": "aws", "region": "us-east-1", "availabilityZones": ["us-east-1a", "us-east-1b"]},
    "aifactory:nodePools": {"gpu-a": {"instanceType": "g6e.xlarge", "minSize": 1, "maxSize": 1}},
    "aifactory:tenants": {"t": {"gpuQuota": 1}},
    "aifactory:models": {"m": {"engine": "vllm", "model": "o/m", "tenant": "t", "pool": "gpu-a"}},
}


def write_stack(d: Path, name: str, config: dict) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    (d / f"Pulumi.{name}.yaml").write_text(yaml.safe_dump({"config": config}))
    return d


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).with_name("aifactory")
    return subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=120, cwd=cwd,
                          env={**os.environ, "AIFACTORY_DEBUG": ""}, check=False)


@pytest.mark.parametrize("argv", [[], ["synth"], ["validate"], ["policy"], ["policy", "check"], ["node-check"]])
def test_help_on_every_command(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args([*argv, "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: aifactory")


def test_usage_error_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["synth"])
    assert exc.value.code == 2


def test_bad_config_exits_2_with_every_path_and_no_traceback(tmp_path: Path) -> None:
    bad = dict(GOOD)
    bad["aifactory:nodePools"] = {"gpu-a": {"instanceType": "g6e.xlarge", "fabric": "efa", "minSize": 3,
                                            "maxSize": 1}}
    stacks = write_stack(tmp_path / "stacks", "bad", bad)
    res = run("synth", "bad", "--stacks-dir", str(stacks), "--out", str(tmp_path / "out"))
    assert res.returncode == 2, res.stderr
    assert "Traceback" not in res.stderr + res.stdout
    assert "nodePools.gpu-a.fabric: 'efa' is not available on g6e.xlarge" in res.stderr
    assert "nodePools.gpu-a.minSize: 3 is greater than maxSize 1" in res.stderr
    assert not (tmp_path / "out").exists(), "nothing is written for a bad config"


def test_missing_stack_exits_2_naming_the_stacks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stacks = write_stack(tmp_path / "stacks", "good", GOOD)
    assert main(["validate", "nope", "--stacks-dir", str(stacks)]) == 2
    err = capsys.readouterr().err
    assert "Pulumi.nope.yaml: no such stack file; stacks: good" in err


def test_invalid_yaml_exits_2_with_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = tmp_path / "stacks"
    d.mkdir()
    (d / "Pulumi.x.yaml").write_text("config:\n  aifactory:target: {provider: aws\n")
    assert main(["validate", "x", "--stacks-dir", str(d)]) == 2
    assert "not valid YAML" in capsys.readouterr().err


def test_secret_values_are_refused_offline(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stacks = write_stack(tmp_path / "stacks", "s", {**GOOD, "aifactory:gateway": {"secure": "AAAA"}})
    assert main(["validate", "s", "--stacks-dir", str(stacks)]) == 2
    assert "gateway: is a Pulumi secret; offline synth cannot decrypt it" in capsys.readouterr().err


def test_validate_ok(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stacks = write_stack(tmp_path / "stacks", "good", GOOD)
    assert main(["validate", "good", "--stacks-dir", str(stacks)]) == 0
    assert capsys.readouterr().out == "good: valid (aws, 1 pools, 1 tenants, 1 models)\n"


def test_synth_staging_prints_progress_and_summary(tmp_path: Path) -> None:
    res = run("synth", "staging", "--out", str(tmp_path / "s"))
    assert res.returncode == synth_exit_code("staging"), res.stderr  # 0 once the issue #12 fixes are merged
    assert "[1/3] config" in res.stderr and "[3/3] write" in res.stderr
    assert res.stdout.startswith("synth staging: ")
    assert "artifacts: state (1)" in res.stdout
    assert (tmp_path / "s" / "state.json").is_file()
