"""README's and docs/'s examples work as written: the component snippets run under the same mocks as synth, the
commands and their sample output are what the commands do (docs/components.md, docs/deploying.md, docs/policies.md,
README.md)."""

from __future__ import annotations

import re
from pathlib import Path

from infra.synth import read_stack_config, run_program, stack_file

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"


def doc_text() -> str:
    """README.md, CONTRIBUTING.md and every page of docs/, one after the other."""
    return "\n".join(p.read_text() for p in [README, ROOT / "CONTRIBUTING.md", *sorted(DOCS.glob("*.md"))])


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", doc_text(), flags=re.S)


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
    """docs/policies.md's `allowedRegistries` example adds a registry: the kit's own stack still passes it."""
    import yaml

    from policies.runner import parse_config, read_state, run_policies

    example = yaml.safe_load(re.findall(r"```yaml\n(images-from-allowed-registries:.*?)```",
                                        (DOCS / "policies.md").read_text(),
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
    """docs/components.md's unit-test example for teams using the components, run as they would run it (pytest)."""
    import subprocess
    import sys

    example = next(b for b in python_blocks() if "@pulumi.runtime.test" in b)
    broken = example.replace("len(interfaces) == 32", "len(interfaces) == 31")
    assert broken != example
    # One pytest run (a process start and the SDK's import are most of its cost) over the example as written and a
    # copy whose assertion is off by one: the first must pass, the second fail, so the example's assertion runs.
    (tmp_path / "test_my_pools.py").write_text(example)
    (tmp_path / "test_my_pools_broken.py").write_text(broken)
    res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rfE", "-p", "no:cacheprovider", str(tmp_path)],
                         capture_output=True, text=True, timeout=120, check=False, cwd=tmp_path)
    assert res.returncode == 1, res.stdout + res.stderr
    failed = [line.split(" - ")[0] for line in res.stdout.splitlines() if line.startswith(("FAILED", "ERROR"))]
    assert [f.split("::")[0] for f in failed] == ["FAILED test_my_pools_broken.py"], res.stdout
    assert "1 failed, 1 passed" in res.stdout


def test_components_k8s_exports_what_readme_names() -> None:
    from components.k8s import ClusterAutoscaler, Gateway, ModelDeployment, Platform
    from components.k8s.platform import Platform as Direct

    assert Platform is Direct
    assert {c.__name__ for c in (ClusterAutoscaler, Gateway, ModelDeployment)} == {
        "ClusterAutoscaler", "Gateway", "ModelDeployment"}


def test_the_commands_after_make_synth_work_as_written(tmp_path: Path, synthesized) -> None:
    """README's block of commands to run after `make synth`, run as written from a directory laid out like the
    repository root (.venv beside it), through a shell. What `make synth` leaves, build/dev, is the run's shared
    synth of dev (the same bytes: synth is deterministic, tests/unit/test_synth.py)."""
    import os
    import shutil
    import subprocess
    import sys

    block = next(b for b in re.findall(r"```sh\n(.*?)```", README.read_text(), flags=re.S)
                 if ".venv/bin/aifactory validate dev" in b)
    commands = [line for line in block.splitlines() if line.strip()]
    assert commands and all(c.startswith(".venv/bin/aifactory ") for c in commands)
    (tmp_path / ".venv").symlink_to(Path(sys.executable).parents[1])
    env = {**os.environ, "AIFACTORY_DEBUG": ""}
    shutil.copytree(synthesized("dev"), tmp_path / "build" / "dev")  # what `make synth` leaves
    for command in commands:
        res = subprocess.run(command, shell=True, cwd=tmp_path, env=env, capture_output=True, text=True,
                             timeout=120, check=False)
        assert res.returncode == 0, (command, res.stderr)
        assert "Traceback" not in res.stderr


def test_make_targets_named_in_readme_exist() -> None:
    import subprocess

    repo = README.parent
    for target in ("synth", "validate", "policy", "test", "bench", "lint", "setup"):
        assert f"make {target}" in README.read_text(), target
    res = subprocess.run(["make", "-n", "-o", ".venv/.installed", "validate", "policy", "STACK=prod"], cwd=repo,
                         capture_output=True, text=True, timeout=60, check=True)
    assert ".venv/bin/aifactory validate prod" in res.stdout
    assert ".venv/bin/aifactory policy check build/prod/state.json" in res.stdout


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


def test_the_validate_example_is_what_validate_prints(tmp_path: Path) -> None:
    """docs/deploying.md's `validate broken` block: dev with its only pool replaced by an EFA g6e.xlarge pool,
    min 3 > max 1."""
    import subprocess
    import sys

    import yaml

    stack = yaml.safe_load((README.parent / "stacks" / "Pulumi.dev.yaml").read_text())
    stack["config"]["aifactory:nodePools"] = {"gpu-a": {"instanceType": "g6e.xlarge", "fabric": "efa", "minSize": 3,
                                                        "maxSize": 1}}
    (tmp_path / "Pulumi.broken.yaml").write_text(yaml.safe_dump(stack))
    block = re.search(r"\$ \.venv/bin/aifactory validate broken\n(.*?)\$ echo \$\?\n(\d+)",
                      (DOCS / "deploying.md").read_text(),
                      flags=re.S)
    assert block is not None
    res = subprocess.run([str(Path(sys.executable).with_name("aifactory")), "validate", "broken", "--stacks-dir",
                          str(tmp_path)], capture_output=True, text=True, timeout=60, check=False)
    assert (res.stdout + res.stderr, res.returncode) == (block.group(1), int(block.group(2)))


def test_kubernetes_component_example_runs_without_the_kits_stack_config() -> None:
    """docs/components.md's ModelDeployment + Tenancy + Gateway program, run under the kit's mocks: it imports
    nothing of infra/ (no stack config), the model's pods run the stock vLLM image with 2 GPUs each, and the
    gateway it builds routes the model's name to the model's Service in the tenant namespace."""
    import yaml

    snippet = next(b for b in python_blocks() if "Gateway(" in b and "ModelDeployment(" in b)
    assert "infra" not in snippet
    result = run_program("dev", read_stack_config(stack_file("dev")), lambda _cfg: exec(snippet, {}))
    by_name = {r.name: r for r in result.resources}
    assert by_name["teams-chat"].inputs["metadata"]["name"] == "chat"
    assert by_name["teams-chat-resourcequota-tenant-quota"].inputs["spec"]["hard"]["requests.nvidia.com/gpu"] == "8"
    pod = by_name["llama-8b-statefulset"].inputs["spec"]["template"]["spec"]
    assert by_name["llama-8b-statefulset"].inputs["metadata"]["namespace"] == "chat"
    assert pod["containers"][0]["image"] == "vllm/vllm-openai:v0.33.0"
    assert pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "2"
    assert pod["nodeSelector"] == {"aifactory.io/pool": "l40s"}
    assert by_name["llama-8b-scaledobject"].inputs["spec"]["maxReplicaCount"] == 3
    envoy = yaml.safe_load(by_name["edge-configmap"].inputs["data"]["envoy.yaml"])
    # llama-8b's replicas: the addresses of its headless Service (components.k8s.gateway.envoy.replicas)
    cluster = next(c for c in envoy["static_resources"]["clusters"] if c["name"] == "llama-8b")
    assert cluster["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"] == {
        "socket_address": {"address": "llama-8b.chat.svc.cluster.local.", "port_value": 8000}}
    listener = next(li for li in envoy["static_resources"]["listeners"] if li["name"] == "gateway")
    vhost = listener["filter_chains"][0]["filters"][0]["typed_config"]["route_config"]["virtual_hosts"][0]
    route = next(r for r in vhost["routes"] if r["name"] == "llama-8b")
    assert route["match"]["headers"] == [{"name": "x-model", "string_match": {"exact": "llama-8b",
                                                                              "ignore_case": True}}]
    assert (route["route"]["cluster"], route["route"]["timeout"]) == ("llama-8b", "120s")
    assert by_name["edge-ns"].inputs["metadata"]["name"] == "aifactory-gateway"
    assert result.stack_outputs["gateway"] == "aifactory-gateway.aifactory-gateway.svc.cluster.local"


def test_the_telemetry_example_prints_what_readme_shows(tmp_path: Path) -> None:
    """README's 20-line agent, run by the README's own command line (through a shell, `python` on PATH being the
    project's interpreter): the shown output is the output, the spans of one trace and the agent's last line."""
    import os
    import subprocess
    import sys

    text = README.read_text()
    section = text[text.index("## Instrumenting an agent in 20 lines"):]
    agent = re.findall(r"```python\n(.*?)```", section, flags=re.S)[0]
    command, shown = re.search(r"```sh\n(OTEL_TRACES_EXPORTER=console .*?)\n```\n\n```\n(.*?)```", section,
                               flags=re.S).groups()
    assert len([line for line in agent.splitlines() if line.strip()]) <= 20
    (tmp_path / "agent.py").write_text(agent)
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    res = subprocess.run(["bash", "-o", "pipefail", "-c", command], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=120, check=False)
    assert (res.returncode, res.stderr) == (0, "")
    assert res.stdout == shown


def test_the_synth_sample_output_is_what_synth_prints(tmp_path: Path) -> None:
    """README's sample of `make synth`'s summary: the same lines as `aifactory synth dev` prints, but for the
    counts and the time, which README shows as one run gave them."""
    import subprocess
    import sys

    shown = re.search(r"```\n(synth dev: .*?)```", README.read_text(), flags=re.S)
    assert shown is not None
    out = tmp_path / "build" / "dev"
    res = subprocess.run([str(Path(sys.executable).with_name("aifactory")), "synth", "dev", "--out", str(out)],
                         capture_output=True, text=True, timeout=300, check=False)
    assert res.returncode == 0, res.stderr

    def shape(lines: str) -> list[str]:
        return [re.sub(r"\d[\d.,]*", "N", line) for line in lines.splitlines()]

    printed = res.stdout.replace(str(out), "build/dev")
    assert shape(printed) == shape(shown.group(1))


def test_readme_names_the_compound_latency_dashboards_rows(synthesized) -> None:
    import json

    dashboard = json.loads((synthesized("dev") / "dashboards" / "compound-latency.json").read_text())
    rows = [p["title"] for p in dashboard["panels"] if p["type"] == "row"]
    listed = re.search(r"\*Compound latency\* \(its rows, top to bottom: (.*?)\) answers", README.read_text(),
                       flags=re.S)
    assert listed is not None
    assert re.findall(r"\*([^*]+)\*", listed.group(1)) == rows
    assert sorted(p.name for p in (synthesized("dev") / "dashboards").iterdir()) == sorted(
        re.search(r"build/dev/dashboards/ +(.*)", README.read_text()).group(1).split())  # type: ignore[union-attr]
