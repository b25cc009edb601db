"""README's examples work as written: the component snippet runs under the same mocks as synth."""

from __future__ import annotations

import re
from pathlib import Path

from infra.synth import read_stack_config, run_program, stack_file

README = Path(__file__).resolve().parents[2] / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def test_component_example_registers_an_efa_pool_with_32_interfaces() -> None:
    snippet = next(b for b in python_blocks() if "GpuNodePool(" in b)
    result = run_program("dev", read_stack_config(stack_file("dev")), lambda _cfg: exec(snippet, {}))
    types = {r.type for r in result.resources}
    assert {"aifactory:index:Network", "aifactory:index:GpuCluster", "aifactory:index:GpuNodePool",
            "aws:eks/cluster:Cluster", "aws:ec2/launchTemplate:LaunchTemplate"} <= types
    lt = next(r for r in result.resources if r.type == "aws:ec2/launchTemplate:LaunchTemplate"
              and "ml-h100" in r.urn)
    assert len(lt.inputs["networkInterfaces"]) == 32
    assert "kubeconfig" in result.stack_outputs


def test_readme_names_the_two_commands_and_every_cli_command() -> None:
    text = README.read_text()
    for command in ("make synth", "make test", "aifactory synth", "aifactory validate", "aifactory policy check",
                    "aifactory node-check", "pulumi up -s dev"):
        assert command in text, command


def test_readme_says_which_placeholders_the_shipped_stacks_carry() -> None:
    """Documentation ranges (RFC 5737) and example.com (RFC 2606) reach nothing: the README must say so for each
    kind of placeholder that a shipped stack file really contains."""
    stacks = "".join(p.read_text() for p in sorted((README.parent / "stacks").glob("Pulumi.*.yaml")))
    text = README.read_text()
    placeholders = {r"\b(192\.0\.2|198\.51\.100|203\.0\.113)\.\d+/\d+": "RFC 5737", r"example\.com": "RFC 2606",
                    r"\b123456789012\b": "`123456789012`", r"cr-0a1b2c3d4e5f60718": "`cr-0a1b2c3d4e5f60718`"}
    found = [says for pattern, says in placeholders.items() if re.search(pattern, stacks)]
    assert len(found) == 4
    assert "edit them before `pulumi up`" in text
    assert [says for says in found if says not in text] == []
