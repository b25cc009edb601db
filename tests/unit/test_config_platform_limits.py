"""`validate` means the platform would accept it: names Kubernetes would refuse, models that cannot fit their GPUs
and S3 URIs that would widen a model's IAM role are refused with the key path (exit 2, nothing written)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from infra.cli import main
from infra.synth import DEFAULT_STACKS_DIR
from tests.unit.test_stack_file import STACK


def validate(tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str], stack: str = "s") -> str:
    (tmp_path / f"Pulumi.{stack}.yaml").write_text(text)
    assert main(["validate", stack, "--stacks-dir", str(tmp_path)]) == 2
    return capsys.readouterr().err


def test_a_model_name_a_service_cannot_take_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    err = validate(tmp_path, STACK.replace("    chat: {", "    7b-chat: {"), capsys)
    assert ("models.7b-chat: '7b-chat' (7 characters) names the model's Service, which must be a DNS-1035 label: "
            "at most 63 characters of lowercase letters, digits and '-', starting with a letter") in err


def test_a_multi_node_model_whose_worker_sets_would_never_get_a_pod_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    long = "llama-405b-instruct-bf16-sixteen-gpus-two-nodes-onprem"  # 54 characters
    text = (DEFAULT_STACKS_DIR / "Pulumi.onprem.yaml").read_text()
    doc = yaml.safe_load(text)
    models = doc["config"]["aifactory:models"]
    models[long] = models.pop("llama-405b")
    err = validate(tmp_path, yaml.safe_dump(doc, sort_keys=False), capsys, stack="onprem")
    assert f"models.{long}: '{long}' (54 characters) is too long for a multi-node model" in err
    assert "never gets a pod (its pods' controller-revision-hash label would exceed 63); use at most" in err


def test_405b_in_bf16_on_one_l40s_is_refused_with_what_would_fit(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = STACK.replace("model: o/chat,", "model: meta-llama/Llama-3.1-405B-Instruct,").replace("gpuQuota: 2",
                                                                                             "gpuQuota: 100")
    err = validate(tmp_path, text, capsys)
    assert ("models.chat.model: 'meta-llama/Llama-3.1-405B-Instruct' does not fit pool 'gpu-a' (g6e.xlarge): needs "
            "754.4 GiB of weights (none) plus a KV cache of at least 10% of the engine's memory, 838.2 GiB in all; "
            "the replica has 1 x 48 GiB x 0.92 = 44.2 GiB; would fit: 19 GPUs of this kind") in err


@pytest.mark.parametrize(("uri", "expected"), [
    ("s3://*", "models.chat.uri: 's3://*' bucket '*' has a wildcard: the model's IAM role would read every bucket it "
               "matches"),
    ("s3://models-*/llama/", "bucket 'models-*' has a wildcard"),
    ("s3://Models_Prod/llama/", "bucket 'Models_Prod' (11 characters) is not an S3 bucket name"),
    ("s3://models-prod/llama/*", "models.chat.uri: 's3://models-prod/llama/*' has a wildcard in its path"),
])
def test_s3_uris_that_would_widen_the_models_role_are_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], uri: str, expected: str) -> None:
    err = validate(tmp_path, STACK.replace("model: o/chat,", f"model: o/chat, uri: '{uri}',"), capsys)
    assert expected in err


@pytest.mark.parametrize("cidr", ["10.0.0.0/16", "192.168.1.0/24", "100.64.0.0/16"])
def test_a_private_range_as_a_public_access_cidr_is_refused_with_why(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], cidr: str) -> None:
    """The deployer can never reach a public endpoint from 10.0.0.0/16: the endpoint sees the public address its
    traffic is NATed to, so the stack would deploy the cluster and then fail on every Kubernetes object."""
    err = validate(tmp_path, STACK.replace("publicAccessCidrs: [203.0.113.0/24]", f"publicAccessCidrs: ['{cidr}']"),
                   capsys)
    assert f"cluster.publicAccessCidrs[0]: {cidr!r} is inside " in err
    assert "which never reaches a public endpoint: the endpoint sees the public address your traffic leaves from" in err
    assert "is required (non-empty)" not in err  # the list was given; its entry was wrong


def test_more_public_access_cidrs_than_eks_takes_are_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """EKS takes at most 40 public-access CIDRs per cluster, a quota it does not raise (Service Quotas L-93A74D60):
    a longer list passed validate and failed at `pulumi up`."""
    cidrs = ", ".join(f"203.0.{i}.0/24" for i in range(41))
    err = validate(tmp_path, STACK.replace("publicAccessCidrs: [203.0.113.0/24]", f"publicAccessCidrs: [{cidrs}]"),
                   capsys)
    assert ("cluster.publicAccessCidrs: has 41 entries; EKS takes at most 40 per cluster (a quota AWS does not "
            "raise): list wider networks") in err
    assert "is required (non-empty)" not in err


def test_messages_say_the_length_limit_and_read_plainly(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    long = "t" * 70
    text = STACK.replace("    t: {gpuQuota: 2}\n", f"    t: {{gpuQuota: 2}}\n    {long}: {{gpuQuota: 1}}\n")
    text = text.replace("availabilityZones: [us-east-1a, us-east-1b]", "availabilityZones: us-east-1a")
    err = validate(tmp_path, text, capsys)
    assert (f"tenants.{long}: name must be a DNS label (lowercase letters, digits and '-', at most 63 characters; "
            "it has 70)") in err
    # a string where a list belongs is one problem, not a second about an empty list
    assert "target.availabilityZones: expected a list" in err
    assert "must list 2 to 6 zones" not in err


def test_a_namespace_taken_by_another_tenant_reads_plainly(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = STACK.replace("    t: {gpuQuota: 2}\n", "    t: {gpuQuota: 2}\n    search: {gpuQuota: 1, namespace: t}\n")
    err = validate(tmp_path, text, capsys)
    assert "tenants.search.namespace: 't' is already the namespace of tenant 't'" in err


def test_absurd_numbers_and_strings_are_bounded_by_what_the_platform_takes(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """maxSize 1e23 landed in state.json as 99999999999999991611392; a 2 MB model id would exceed Kubernetes'
    object limits. Every number without a bound of its own is held to a 32-bit integer, every string to 2,048."""
    text = STACK.replace("minSize: 1, maxSize: 1", "minSize: 1, maxSize: 100000000000000000000000").replace(
        "model: o/chat,", "model: o/" + "x" * 100_000 + ",")  # a 2 MB one: over the stack file's 1 MiB
    err = validate(tmp_path, text, capsys)
    assert ("nodePools.gpu-a.maxSize: 1e+23 is beyond what Kubernetes and AWS take: at most 2,147,483,647 (their "
            "32-bit integers)") in err
    assert "models.chat.model: is 100,002 characters; a setting is at most 2,048" in err
    assert len(err) < 10_000, "the long value is not echoed back"


def test_a_string_too_long_in_a_list_or_a_mapping_is_named_by_its_key_path(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A 3,000-character audience was accepted: only a setting's own value was bounded, not the items of its list
    or mapping. Each is named by its key path (the label's own 63-character rule then applies to what is left)."""
    long = "a" * 3_000
    text = STACK.replace("gpu-a: {instanceType: g6e.xlarge,", f"gpu-a: {{labels: {{team: {long}}}, instanceType: "
                                                                "g6e.xlarge,") + (
        "  aifactory:gateway:\n    auth:\n      issuers:\n        - issuer: https://sso.example.com/realms/a\n"
        "          jwksUri: https://sso.example.com/realms/a/certs\n"
        f"          audiences: [aifactory-gateway, {long}]\n")
    err = validate(tmp_path, text, capsys)
    limit = ("is 3,000 characters; a setting is at most 2,048 (what it names ends up in Kubernetes objects and AWS "
             "fields, which are shorter)")
    assert err.splitlines()[1:] == [f"  - nodePools.gpu-a.labels.team: {limit}",
                                    f"  - gateway.auth.issuers[0].audiences[1]: {limit}"]
