"""Offline synth: stack-export shape, determinism, atomic output."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from infra import artifacts
from infra.synth import shipped_stacks, synth
from tests.support.stacks import SHIPPED_STACKS


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("stack", SHIPPED_STACKS)
def test_state_json_has_the_stack_export_shape(stack: str, synthesized: Callable[[str], Path]) -> None:
    state = json.loads((synthesized(stack) / "state.json").read_text())
    assert state["version"] == 3
    dep = state["deployment"]
    assert set(dep["manifest"]) == {"time", "magic", "version"}
    resources = dep["resources"]
    root = resources[0]
    assert root["type"] == "pulumi:pulumi:Stack" and root["custom"] is False
    assert root["urn"] == f"urn:pulumi:{stack}::aifactory::pulumi:pulumi:Stack::aifactory-{stack}"
    assert root["outputs"]["stack"] == stack
    seen = {root["urn"]}
    for r in resources[1:]:
        assert r["urn"].startswith(f"urn:pulumi:{stack}::aifactory::"), r["urn"]
        assert set(r) >= {"urn", "custom", "type", "inputs", "outputs"}
        if r["custom"]:
            assert r["id"], r["urn"]
        if not r["type"].startswith("pulumi:providers:"):
            assert r["parent"] in seen, f"{r['urn']}: parent listed after the child"
            if r["custom"]:
                assert r["provider"].rsplit("::", 1)[0] in seen, f"{r['urn']}: provider listed after it"
        for dep_urn in r.get("dependencies", []):
            assert dep_urn in seen, f"{r['urn']}: dependency {dep_urn} listed after it"
        seen.add(r["urn"])
    assert len(seen) == len(resources), "URNs are unique"


def test_inputs_use_engine_camel_case_keys(synthesized: Callable[[str], Path]) -> None:
    state = json.loads((synthesized("onprem") / "state.json").read_text())
    provider = next(r for r in state["deployment"]["resources"] if r["type"] == "pulumi:providers:kubernetes")
    assert provider["inputs"]["kubeconfig"] == "~/.kube/onprem.yaml"
    assert provider["inputs"]["enableServerSideApply"] == "true"  # provider inputs travel as strings
    assert provider["urn"] == "urn:pulumi:onprem::aifactory::pulumi:providers:kubernetes::existing-cluster"


def test_nested_urns_carry_the_whole_parent_type_chain_as_the_engine_builds_them(
        synthesized: Callable[[str], Path]) -> None:
    state = json.loads((synthesized("onprem") / "state.json").read_text())
    by_urn = {r["urn"]: r for r in state["deployment"]["resources"]}
    ns = "urn:pulumi:onprem::aifactory::aifactory:k8s:Platform$aifactory:k8s:Mesh$kubernetes:core/v1:Namespace" \
         "::platform-mesh-ns"
    platform = "urn:pulumi:onprem::aifactory::aifactory:k8s:Platform"
    assert by_urn[ns]["parent"] == f"{platform}$aifactory:k8s:Mesh::platform-mesh"
    assert by_urn[by_urn[ns]["parent"]]["parent"] == f"{platform}::platform"


@pytest.mark.parametrize("stack", ["staging", "onprem"])
def test_same_config_same_bytes(stack: str, tmp_path: Path, synthesized: Callable[[str], Path]) -> None:
    again = synth(stack, tmp_path / stack, progress=None).out
    first = synthesized(stack)
    a, b = tree(first), tree(again)
    assert sorted(a) == sorted(b)
    different = [name for name in a if a[name] != b[name]]
    assert not different, different


def test_failing_writer_leaves_no_output_and_keeps_the_previous_one(tmp_path: Path, monkeypatch,
                                                                   synthesized: Callable[[str], Path]) -> None:
    out = tmp_path / "dev"
    shutil.copytree(synthesized("dev"), out)  # a previous synth's output (marker included)
    before = tree(out)

    def broken(ctx: artifacts.ArtifactContext) -> list[Path]:
        (ctx.out / "half.txt").write_text("partial")
        raise RuntimeError("disk full")

    artifacts.writers()  # import every real writer first
    monkeypatch.setitem(artifacts._REGISTRY, "zz-broken", (99, broken))
    with pytest.raises(RuntimeError, match="disk full"):
        synth("dev", out, progress=None)
    assert tree(out) == before, "the previous output is untouched"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dev"], "no temporary directory is left behind"

    fresh = tmp_path / "fresh"
    with pytest.raises(RuntimeError):
        synth("dev", fresh, progress=None)
    assert not fresh.exists()


def test_rerun_replaces_output_completely(tmp_path: Path, synthesized: Callable[[str], Path]) -> None:
    out = tmp_path / "dev"
    shutil.copytree(synthesized("dev"), out)  # a previous synth's output (marker included)
    (out / "stale.yaml").write_text("left over from an older run")
    synth("dev", out, progress=None)
    assert not (out / "stale.yaml").exists()


def test_a_failed_run_leaves_the_process_able_to_run_again(tmp_path: Path) -> None:
    """A run that fails after the mocks are set (a ConfigError in load(), Ctrl-C) used to leave Outputs of its
    closed event loop in the SDK's process-wide SETTINGS.outputs; the next run_program then waited on them
    forever. Run in a child process under a timeout, so a regression fails instead of hanging the suite."""
    script = """
import warnings
from infra.config import ConfigError
from infra.synth import read_stack_config, run_program, stack_file, synth
good = read_stack_config(stack_file("dev"))
bad = {**good, "aifactory:nodePools": '{"gpu-a": {"instanceType": "nope"}}'}
try:
    run_program("dev", bad)
except ConfigError as err:
    print("bad:", err.problems[0].path)
def interrupted(cfg):
    raise KeyboardInterrupt
try:
    run_program("dev", good, interrupted)
except KeyboardInterrupt:
    print("interrupted")
print("good:", len(run_program("dev", good).resources) > 100)
print("synth:", synth("dev", OUT, progress=None).out.name)
"""
    res = subprocess.run([sys.executable, "-c", f"OUT = {str(tmp_path / 'dev')!r}\n" + script],
                         capture_output=True, text=True, timeout=120, check=False, cwd=Path(__file__).parents[2])
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines() == ["bad: nodePools.gpu-a.instanceType", "interrupted", "good: True",
                                       "synth: dev"]
    assert "Task was destroyed" not in res.stderr and "never retrieved" not in res.stderr, res.stderr


def test_tests_and_benchmarks_use_the_shipped_stacks_only(tmp_path: Path) -> None:
    stacks = tmp_path / "stacks"
    stacks.mkdir()
    for name in ("dev", "mine", "broken"):
        (stacks / f"Pulumi.{name}.yaml").write_text("config: {}\n")
    assert shipped_stacks(stacks) == ["dev"]
    assert SHIPPED_STACKS == ["dev", "onprem", "prod", "staging"]


@pytest.mark.parametrize("failure", ["config", "interrupt"])
def test_a_failed_run_leaves_no_asyncio_noise(failure: str) -> None:
    """What Ctrl-C (or a bad config) in the middle of a run used to print on exit: asyncio's 'Task was destroyed
    but it is pending!' / 'Task exception was never retrieved' blocks for the tasks the run left behind."""
    script = f"""
from infra.synth import read_stack_config, run_program, stack_file
good = read_stack_config(stack_file("dev"))
bad = {{**good, "aifactory:nodePools": '{{"gpu-a": {{"instanceType": "nope"}}}}'}}
def interrupted(cfg):
    import pulumi_kubernetes as k8s
    k8s.core.v1.Namespace("x", metadata={{"name": "x"}})
    raise KeyboardInterrupt
try:
    run_program("dev", bad) if {failure!r} == "config" else run_program("dev", good, interrupted)
except (Exception, KeyboardInterrupt) as err:
    print(type(err).__name__)
import gc
gc.collect()
"""
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False,
                         cwd=Path(__file__).parents[2])
    assert res.returncode == 0 and res.stdout.strip() in ("ConfigError", "KeyboardInterrupt"), res.stderr
    assert res.stderr == "", res.stderr
