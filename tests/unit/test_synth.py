"""Offline synth: stack-export shape, determinism, atomic output."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from infra import artifacts
from infra.synth import synth
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


def test_failing_writer_leaves_no_output_and_keeps_the_previous_one(tmp_path: Path, monkeypatch) -> None:
    out = tmp_path / "dev"
    synth("dev", out, progress=None)
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


def test_rerun_replaces_output_completely(tmp_path: Path) -> None:
    out = tmp_path / "dev"
    synth("dev", out, progress=None)
    (out / "stale.yaml").write_text("left over from an older run")
    synth("dev", out, progress=None)
    assert not (out / "stale.yaml").exists()
