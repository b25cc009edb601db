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


def test_policy_config_example_keeps_the_kit_stacks_clean_and_extends_the_registries(synthesized) -> None:
    """README's `allowedRegistries` example adds a registry: the kit's own stack still passes it."""
    import yaml

    from policies.runner import parse_config, read_state, run_policies

    example = yaml.safe_load(re.findall(r"```yaml\n(images-from-allowed-registries:.*?)```", README.read_text(),
                                        flags=re.S)[0])
    config = parse_config(example)
    violations = run_policies(read_state(synthesized("prod") / "state.json"), config)
    assert [(v.policy, v.resource_name) for v in violations] == []
    added = example["images-from-allowed-registries"]["allowedRegistries"][0]
    pod = {"urn": "urn:pulumi:s::aifactory::kubernetes:core/v1:Pod::p", "type": "kubernetes:core/v1:Pod",
           "custom": True, "inputs": {"metadata": {"name": "p", "namespace": "t"}, "spec": {"containers": [
               {"name": "a", "image": f"{added}/agent:1.0"}, {"name": "b", "image": "evil.example.com/x:1.0"}]}}}
    assert [v.message for v in run_policies([pod], config) if v.policy == "images-from-allowed-registries"] == [
        "spec: container 'b' image 'evil.example.com/x:1.0' is not from an allowed registry"]


def test_the_unit_test_example_passes_under_pytest(tmp_path: Path) -> None:
    """README's unit-test example for teams using the components, run as they would run it (pytest)."""
    import subprocess
    import sys

    example = next(b for b in python_blocks() if "@pulumi.runtime.test" in b)
    (tmp_path / "test_my_pools.py").write_text(example)
    res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
                         capture_output=True, text=True, timeout=120, check=False, cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "1 passed" in res.stdout
    broken = example.replace("len(interfaces) == 32", "len(interfaces) == 31")
    (tmp_path / "test_my_pools.py").write_text(broken)
    res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
                         capture_output=True, text=True, timeout=120, check=False, cwd=tmp_path)
    assert res.returncode == 1 and "1 failed" in res.stdout, "the example's assertion really runs"


def test_components_k8s_exports_what_readme_names() -> None:
    from components.k8s import ClusterAutoscaler, Gateway, ModelDeployment, Platform
    from components.k8s.platform import Platform as Direct

    assert Platform is Direct
    assert {c.__name__ for c in (ClusterAutoscaler, Gateway, ModelDeployment)} == {
        "ClusterAutoscaler", "Gateway", "ModelDeployment"}
