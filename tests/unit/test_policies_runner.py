"""`aifactory policy check` and synth's policy report: exit codes, grouped output, JSON, config errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from infra.artifacts import ArtifactContext
from infra.cli import main
from infra.synth import read_stack_config, run_program, stack_file, state_export
from infra.writers.policy import write_policy_report
from policies.pack import POLICIES
from policies.runner import PolicyInputError, parse_config, run_policies, state_resources
from tests.support.stacks import SHIPPED_STACKS

STACK = {"urn": "urn:pulumi:dev::aifactory::pulumi:pulumi:Stack::aifactory-dev", "custom": False,
         "type": "pulumi:pulumi:Stack", "outputs": {}}


def entry(type_: str, name: str, inputs: dict[str, Any]) -> dict[str, Any]:
    return {"urn": f"urn:pulumi:dev::aifactory::{type_}::{name}", "custom": True, "type": type_,
            "inputs": inputs, "outputs": inputs}


OPEN_SG = entry("aws:ec2/securityGroup:SecurityGroup", "node-sg",
                {"ingress": [{"protocol": "tcp", "fromPort": 22, "toPort": 22, "cidrBlocks": ["0.0.0.0/0"],
                              "description": "ssh"}]})
V1_TEMPLATE = entry("aws:ec2/launchTemplate:LaunchTemplate", "gpu-lt", {"metadataOptions": {
    "httpTokens": "optional", "httpPutResponseHopLimit": 1}})
STRAY_GPU_POD = entry("kubernetes:apps/v1:Deployment", "llm", {
    "metadata": {"name": "llm", "namespace": "istio-system"},
    "spec": {"template": {"spec": {"securityContext": {"runAsNonRoot": True}, "containers": [{
        "name": "server", "image": "docker.io/vllm/vllm-openai:v0.11.0",
        "resources": {"requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "1"}}}]}}}})


MESH = entry("kubernetes:security.istio.io/v1:PeerAuthentication", "mesh", {
    "metadata": {"name": "default", "namespace": "istio-system"}, "spec": {"mtls": {"mode": "STRICT"}}})


def export(*resources: dict[str, Any]) -> dict[str, Any]:
    return {"version": 3, "deployment": {"manifest": {"time": "1970-01-01T00:00:00Z", "magic": "", "version": "v3"},
                                         "resources": [STACK, MESH, *resources]}}


def write(tmp_path: Path, doc: Any, name: str = "state.json") -> Path:
    path = tmp_path / name
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return path


def test_mandatory_violations_exit_1_grouped_by_severity(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state = write(tmp_path, export(OPEN_SG, V1_TEMPLATE, STRAY_GPU_POD))
    assert main(["policy", "check", str(state)]) == 1
    fix = {p.name: p.remediation_steps for p in POLICIES}
    assert capsys.readouterr().out == (
        f"policy check: {len(POLICIES)} policies over 4 resources: 2 mandatory, 1 advisory violation(s)\n"
        "\nCRITICAL (1)\n"
        "  [mandatory] no-public-ingress  node-sg (aws:ec2/securityGroup:SecurityGroup)\n"
        "      ingress rule 'ssh' allows 0.0.0.0/0\n"
        f"    fix (no-public-ingress): {fix['no-public-ingress']}\n"
        "\nHIGH (1)\n"
        "  [mandatory] launch-template-imdsv2  gpu-lt (aws:ec2/launchTemplate:LaunchTemplate)\n"
        "      metadataOptions.httpTokens is optional; IMDSv1 is reachable\n"
        f"    fix (launch-template-imdsv2): {fix['launch-template-imdsv2']}\n"
        "\nMEDIUM (1)\n"
        "  [advisory] gpu-pods-on-gpu-pools  llm (kubernetes:apps/v1:Deployment)\n"
        "      spec.template.spec: GPU pod does not select a GPU pool by node label 'aifactory.io/pool'\n"
        f"    fix (gpu-pods-on-gpu-pools): {fix['gpu-pods-on-gpu-pools']}\n"
    )


def test_advisory_only_exits_0_and_writes_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state = write(tmp_path, export(STRAY_GPU_POD))
    out = tmp_path / "policy.json"
    assert main(["policy", "check", str(state), "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["summary"] == {"advisory": 1, "mandatory": 0} and doc["resources"] == 2
    assert doc["violations"] == [{
        "enforcement": "advisory", "message": "spec.template.spec: GPU pod does not select a GPU pool by node label "
                                              "'aifactory.io/pool'",
        "policy": "gpu-pods-on-gpu-pools", "resource_name": "llm", "resource_type": "kubernetes:apps/v1:Deployment",
        "severity": "medium", "urn": STRAY_GPU_POD["urn"],
        "remediation": next(p.remediation_steps for p in POLICIES if p.name == "gpu-pods-on-gpu-pools")}]
    assert [p["name"] for p in doc["policies"]] == [p.name for p in POLICIES]
    assert "0 mandatory, 1 advisory" in capsys.readouterr().out


def test_config_changes_levels_and_allow_lists(tmp_path: Path) -> None:
    state = write(tmp_path, export(OPEN_SG, V1_TEMPLATE, STRAY_GPU_POD))
    config = write(tmp_path, "no-public-ingress: advisory\n"
                             "launch-template-imdsv2: {enforcementLevel: disabled}\n", name="policy.yaml")
    assert main(["policy", "check", str(state), "--config", str(config)]) == 0
    promote = write(tmp_path, {"gpu-pods-on-gpu-pools": "mandatory", "all": "advisory"}, name="promote.json")
    violations = run_policies(export(STRAY_GPU_POD)["deployment"]["resources"], parse_config(
        json.loads(promote.read_text())))
    assert [(v.policy, v.enforcement) for v in violations] == [("gpu-pods-on-gpu-pools", "mandatory")]


@pytest.mark.parametrize(("content", "message"), [
    (None, "cannot read stack export: No such file or directory"),
    ("{not json", "stack export is not valid JSON: Expecting property name enclosed in double quotes"),
    ({"resources": []}, "not a stack export: expected deployment.resources (the output of `pulumi stack export` "
                        "or synth's state.json)"),
    ({"deployment": {"resources": [{"urn": 1}]}}, "deployment.resources[0] has no urn and type"),
])
def test_unusable_state_exits_2_with_a_message(tmp_path: Path, capsys: pytest.CaptureFixture[str], content: Any,
                                               message: str) -> None:
    state = tmp_path / "state.json" if content is None else write(tmp_path, content)
    assert main(["policy", "check", str(state)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"aifactory: policy check: {state}: {message}") and "Traceback" not in err


def test_bad_config_lists_every_problem_with_its_key_path(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state = write(tmp_path, export(OPEN_SG))
    config = write(tmp_path, {"no-such-policy": "mandatory", "all": "strict",
                              "images-from-allowed-registries": {"allowedRegistries": "nvcr.io", "colour": "red"},
                              "no-public-ingress": {"enforcementLevel": "warn"}}, name="bad.json")
    assert main(["policy", "check", str(state), "--config", str(config)]) == 2
    assert capsys.readouterr().err == (
        f"aifactory: policy check: {config}: 5 problem(s):\n"
        "  - no-such-policy: unknown policy; policies: " + ", ".join(sorted(p.name for p in POLICIES)) + "\n"
        "  - all: 'strict' is not an enforcement level; choose one of: advisory, mandatory, remediate, disabled\n"
        "  - images-from-allowed-registries.allowedRegistries: expected a list of strings, got \"nvcr.io\"\n"
        "  - images-from-allowed-registries.colour: unknown property; images-from-allowed-registries takes: "
        "enforcementLevel, allowedRegistries\n"
        "  - no-public-ingress.enforcementLevel: 'warn' is not an enforcement level; choose one of: advisory, "
        "mandatory, remediate, disabled\n"
    )


def test_a_misspelt_policy_name_names_the_policy_meant() -> None:
    with pytest.raises(PolicyInputError) as err:
        parse_config({"no-public-ingres": "mandatory"}, source="cfg")
    assert str(err.value).startswith("cfg: 1 problem(s):\n  - no-public-ingres: unknown policy (did you mean "
                                     "'no-public-ingress'?); policies: ")


def test_parse_config_rejects_a_non_mapping() -> None:
    with pytest.raises(PolicyInputError, match=r"^cfg: expected a mapping of policy name to settings, got list$"):
        parse_config([], source="cfg")


def test_synth_writer_reports_and_fails_on_mandatory_violations(tmp_path: Path) -> None:
    def program(_cfg: Any) -> None:
        import pulumi_aws as aws

        aws.ec2.LaunchTemplate("v1", metadata_options={"http_tokens": "optional", "http_put_response_hop_limit": 1})

    result = run_program("dev", read_stack_config(stack_file("dev")), program)
    ctx = ArtifactContext(result=result, out=tmp_path)
    assert write_policy_report(ctx) == [tmp_path / "policy-report.json"]
    doc = json.loads((tmp_path / "policy-report.json").read_text())
    assert [(v["policy"], v["resource_name"]) for v in doc["violations"]] == [("launch-template-imdsv2", "v1")]
    assert ctx.failures == ["policy launch-template-imdsv2 (high, mandatory): v1: metadataOptions.httpTokens is "
                            "optional; IMDSv1 is reachable"]


def test_secrets_of_a_real_export_are_read_or_masked() -> None:
    sig = {"4dabf18193072939515e22adb298388d": "1b47061264138c4ac30d75fd1eb44270"}
    admin = json.dumps({"Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]})
    shown = entry("aws:iam/policy:Policy", "shown", {"policy": {**sig, "plaintext": json.dumps(admin)}})
    hidden = entry("aws:ec2/launchTemplate:LaunchTemplate", "lt", {
        "userData": {**sig, "ciphertext": "AAABAK..."},
        "metadataOptions": {"httpTokens": "required", "httpPutResponseHopLimit": 1}})
    violations = run_policies([shown, hidden])
    assert [(v.policy, v.resource_name, v.message) for v in violations] == [
        ("iam-no-admin-wildcard", "shown", "policy statement 0 allows '*' on '*'"),
        ("iam-s3-read-scoped", "shown", "policy statement 0 allows s3:GetObject/s3:ListBucket on '*': every bucket")]




@pytest.mark.parametrize("stack", SHIPPED_STACKS)
def test_shipped_stacks_have_no_violations(stack: str) -> None:
    """The shipped stacks pass the whole pack, the preflight policies included."""
    result = run_program(stack, read_stack_config(stack_file(stack)))
    violations = run_policies(state_resources(state_export(result)))
    assert sorted({(v.policy, v.resource_name) for v in violations}) == []
