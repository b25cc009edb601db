"""The large-stack bench's baseline (tests/bench/bench_large_stack.py): a bare program calling the same typed
constructors must register exactly what the kit registers, or the ratio measures something else."""

from __future__ import annotations

import dataclasses
import functools

import pytest

from infra.synth import read_stack_config, run_program, stack_file
from tests.bench.bench_large_stack import Recorded, differences, record, replay_typed


@functools.cache
def recorded_run(stack: str) -> Recorded:
    """The kit's program for `stack`, recorded once per worker (both tests read dev's; neither changes it)."""
    return record(stack, read_stack_config(stack_file(stack)))


@pytest.mark.parametrize("stack", ["dev", "onprem"])
def test_same_constructor_replay_registers_the_kits_resources_inputs_and_edges(stack: str) -> None:
    recorded = recorded_run(stack)
    replay = run_program(stack, read_stack_config(stack_file(stack)), lambda _cfg: replay_typed(recorded)).resources
    assert differences(recorded.resources, replay) == []
    assert len(replay) == len(recorded.resources)
    # flat: the kit's components are there, but nothing is parented to them
    assert {r.parent for r in replay} == {f"urn:pulumi:{stack}::aifactory::pulumi:pulumi:Stack::aifactory-{stack}"}
    # every typed resource went through the class the kit called (a provider the harness added has none)
    assert {c.cls.__module__.split(".")[0] for c in recorded.constructed.values()} >= {"pulumi_kubernetes"}


def test_differences_names_what_a_replay_got_wrong() -> None:
    recorded = recorded_run("dev")
    ours = recorded.resources
    sa = next(r for r in ours if r.type == "kubernetes:core/v1:ServiceAccount")
    other = [dataclasses.replace(r, inputs={**r.inputs, "automountServiceAccountToken": True}) if r is sa else r
             for r in ours if r.type != "kubernetes:core/v1:ConfigMap" or r is not ours[-1]]
    other = [*other[:-1], dataclasses.replace(other[-1], dependencies=[*other[-1].dependencies, sa.urn])]
    problems = differences(ours, other)
    assert any(p.startswith(f"inputs of {sa.urn}: ") for p in problems)
    assert f"dependency edges: ours {sum(len(r.dependencies) for r in ours)}, " \
           f"replay {sum(len(r.dependencies) for r in ours) + 1}" in problems
    fewer = differences(ours, [r for r in ours if r.type != "kubernetes:core/v1:ServiceAccount"])
    assert fewer[0].startswith("resources per type: ours {'kubernetes:core/v1:ServiceAccount': ")
