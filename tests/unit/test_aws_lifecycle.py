"""AWS over time (issue 45): a Kubernetes version in EKS standard support, a warning before it ends, and every EKS
add-on pinned in the shipped stacks.

EKS calendar: Amazon EKS user guide, Kubernetes release calendar (components/aws/versions.py cites it): 1.34 leaves
standard support on 2026-12-02, 1.35 on 2027-03-27. Add-on versions: the guide's managing-kube-proxy and
managing-coredns tables (components/aws/addons.py ADDON_VERSION_SOURCES)."""

from __future__ import annotations

import datetime
import json
from pathlib import Path

import kubernetes_validate
import pulumi
import pytest

from components.aws.addons import DEFAULT_ADDON_VERSIONS
from components.aws.cluster import ADDONS
from components.aws.versions import EKS_SUPPORT_CALENDAR, support_warning
from infra import cli, commands
from infra.synth import read_stack_config, run_program, stack_file
from tests.support.stacks import stack_config

AWS_STACKS = ("dev", "staging", "prod")
ISSUE_DAY = datetime.date(2026, 12, 2)  # Kubernetes 1.34 leaves EKS standard support


@pytest.mark.parametrize("stack", (*AWS_STACKS, "onprem"))
def test_every_shipped_stack_runs_a_version_in_standard_support_for_more_than_the_warning_window(stack: str) -> None:
    cfg = stack_config(stack)
    assert EKS_SUPPORT_CALENDAR[cfg.kubernetes_version].end_of_standard > ISSUE_DAY + datetime.timedelta(days=60)
    assert support_warning(cfg.kubernetes_version, today=ISSUE_DAY) is None


def test_the_kubernetes_schemas_the_artifact_tests_use_exist_for_the_stacks_version() -> None:
    """tests/artifacts/test_k8s_schemas.py validates every object against the stack's own version: kubernetes-validate
    1.37.0 must carry it (it raises SchemaNotFoundError for every object otherwise, read as 'custom')."""
    version = stack_config("prod").kubernetes_version
    kubernetes_validate.validate({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}, version,
                                 strict=True)


def test_the_warning_names_the_date_within_60_days_and_after_the_end() -> None:
    assert support_warning("1.35", today=datetime.date(2027, 1, 25)) is None  # 61 days before
    assert support_warning("1.35", today=datetime.date(2027, 1, 26)) == (
        "kubernetesVersion: 1.35 leaves EKS standard support on 2027-03-27 (in 60 days): then EKS upgrades the "
        "control plane itself and the next `pulumi up` asks for a downgrade it refuses; raise it one minor version at "
        "a time (docs/deploying.md, \"Upgrading Kubernetes\")")
    assert support_warning("1.34", today=ISSUE_DAY, support_type="EXTENDED") == (
        "kubernetesVersion: 1.34 left EKS standard support on 2026-12-02: the cluster is billed for extended support; "
        "raise it one minor version at a time (docs/deploying.md, \"Upgrading Kubernetes\")")
    assert support_warning("1.36", today=ISSUE_DAY).startswith(
        "kubernetesVersion: '1.36' is not in the kit's EKS support calendar")


def test_validate_warns_on_stderr_with_the_date(monkeypatch, capsys) -> None:
    monkeypatch.setattr(commands, "_today", lambda: datetime.date(2027, 3, 1))
    assert cli.main(["validate", "prod"]) == 0
    out = capsys.readouterr()
    assert out.out.startswith("prod: valid")
    assert out.err.splitlines() == [
        "warning: kubernetesVersion: 1.35 leaves EKS standard support on 2027-03-27 (in 26 days): then EKS upgrades "
        "the control plane itself and the next `pulumi up` asks for a downgrade it refuses; raise it one minor "
        "version at a time (docs/deploying.md, \"Upgrading Kubernetes\")"]
    monkeypatch.setattr(commands, "_today", lambda: ISSUE_DAY)
    assert cli.main(["validate", "onprem"]) == 0  # an existing cluster's support is its operator's calendar
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("stack", AWS_STACKS)
def test_every_shipped_stack_pins_every_add_on(stack: str) -> None:
    pins = stack_config(stack).cluster.addon_versions
    assert sorted(pins) == sorted(ADDONS)
    kit = DEFAULT_ADDON_VERSIONS["1.35"]  # where the user guide lists a version, the pin is it
    assert {a: pins[a] for a in kit} == kit


def _warnings(monkeypatch, stack: str, **cluster_overrides) -> tuple[list[str], dict[str, str]]:
    warned: list[str] = []
    monkeypatch.setattr(pulumi.log, "warn", lambda msg, *a, **k: warned.append(msg))
    values = read_stack_config(stack_file(stack))
    if cluster_overrides:
        values["aifactory:cluster"] = json.dumps({**json.loads(values["aifactory:cluster"]), **cluster_overrides})
    res = run_program(stack, values).resources
    versions = {r.inputs["addonName"]: r.inputs["addonVersion"] for r in res if r.type == "aws:eks/addon:Addon"}
    return [w for w in warned if w.startswith("cluster.addonVersions")], versions


def test_the_shipped_stack_synths_without_an_add_on_warning_and_an_unpinned_add_on_warns_once(monkeypatch) -> None:
    warned, versions = _warnings(monkeypatch, "dev")
    assert warned == []
    assert versions == stack_config("dev").cluster.addon_versions
    pins = dict(stack_config("dev").cluster.addon_versions)
    del pins["aws-ebs-csi-driver"]
    warned, _ = _warnings(monkeypatch, "dev", addonVersions=pins)
    assert warned == [
        "cluster.addonVersions: the kit has no default version of aws-ebs-csi-driver for Kubernetes 1.35, so EKS's "
        "default is asked at every run and a new eksbuild is applied at the next `pulumi up`; pin "
        "cluster.addonVersions.aws-ebs-csi-driver (aws eks describe-addon-versions --kubernetes-version 1.35 "
        "--addon-name <add-on>)"]


# --- item 5: tags AWS accepts, the VPC CNI on IRSA, log groups under keys of their own, a versioned log bucket ---

def _prod_state(synthesized) -> list[dict]:
    return json.loads((synthesized("prod") / "state.json").read_text())["deployment"]["resources"]


def _named(res: list[dict], typ: str, suffix: str) -> dict:
    (found,) = [r for r in res if r["type"] == typ and r["urn"].endswith(suffix)]
    return found


def test_label_keys_and_tag_count_fit_aws_tags() -> None:
    """A label becomes `k8s.io/cluster-autoscaler/node-template/label/<key>` (46 characters before the key) on the
    node group and its ASG; AWS tag keys take at most 128 characters and a resource at most 50 tags (AWS General
    Reference, tagging limits)."""
    from components.aws.node_pool import pool_spec
    from tests.unit.test_aws_node_pool import pool_args

    ok = "example.com/" + "k" * 70  # 82 characters: a 128-character tag key
    assert pool_spec("gpu", pool_args("g6e.xlarge", labels={ok: "v"})).labels == {ok: "v"}
    long = ok + "x"
    with pytest.raises(pulumi.InputPropertiesError) as err:
        pool_spec("gpu", pool_args("g6e.xlarge", labels={long: "v"}))
    assert [(e["property_path"], e["reason"]) for e in err.value.errors] == [(
        f"labels.{long}", f"the key makes the cluster-autoscaler tag 'k8s.io/cluster-autoscaler/node-template/label/"
                          f"{long}' (129 characters); AWS tag keys take at most 128: shorten the label key to 82 "
                          "characters or fewer")]
    # g6e.xlarge: 3 discovery tags, the kit's 4 labels, the GPU taint and resource: 9 tags before the pool's labels
    many = {f"team.example.com/l{i:02d}": "x" for i in range(42)}
    with pytest.raises(pulumi.InputPropertiesError) as err:
        pool_spec("gpu", pool_args("g6e.xlarge", labels=many))
    assert [(e["property_path"], e["reason"]) for e in err.value.errors] == [(
        "labels", "42 labels make the node group 51 tags (one per label, taint and extended resource, and the "
                  "autoscaler's own); AWS allows 50 per resource: drop 1 label(s)")]
    assert pool_spec("gpu", pool_args("g6e.xlarge", labels=dict(list(many.items())[:41]))) is not None


def test_the_vpc_cni_uses_irsa_on_aws_node_and_no_node_role_carries_its_policy(synthesized) -> None:
    """EKS user guide, cni-iam-role: the VPC CNI's AmazonEKS_CNI_Policy on an IAM role for the `aws-node` service
    account rather than the node role, which every pod on the node could use."""
    res = _prod_state(synthesized)
    cni = _named(res, "aws:eks/addon:Addon", "-vpc-cni")
    role = next(r for r in res if r["type"] == "aws:iam/role:Role"
                and r["outputs"].get("arn") == cni["inputs"]["serviceAccountRoleArn"])
    condition = json.loads(role["inputs"]["assumeRolePolicy"])["Statement"][0]["Condition"]["StringEquals"]
    assert [v for k, v in condition.items() if k.endswith(":sub")] == ["system:serviceaccount:kube-system:aws-node"]
    attachments = [r for r in res if r["type"] == "aws:iam/rolePolicyAttachment:RolePolicyAttachment"]
    with_cni = {r["parent"] for r in attachments if r["inputs"]["policyArn"].endswith("/AmazonEKS_CNI_Policy")}
    assert with_cni == {role["urn"]}


def test_flow_log_and_control_plane_log_groups_are_encrypted_with_keys_cloudwatch_logs_may_use(synthesized) -> None:
    """CloudWatch Logs user guide, encrypt-log-data-kms: the key policy lets `logs.<region>.amazonaws.com` use the key
    for the log group's ARN (kms:EncryptionContext:aws:logs:arn)."""
    res = _prod_state(synthesized)
    for group_suffix, key_suffix, pattern in (
            ("-control-plane", "-control-plane-logs", "/aws/eks/aifactory-prod/cluster"),
            ("-flow-logs", "-flow-logs", "aifactory-prod-flow-logs-*")):
        group = _named(res, "aws:cloudwatch/logGroup:LogGroup", group_suffix)
        key = _named(res, "aws:kms/key:Key", key_suffix)
        assert group["inputs"]["kmsKeyId"] == key["outputs"]["arn"]
        assert key["urn"] in group["dependencies"]
        assert key["inputs"]["enableKeyRotation"] is True
        logs = json.loads(key["inputs"]["policy"])["Statement"][1]
        assert logs["Principal"] == {"Service": "logs.us-east-1.amazonaws.com"}
        assert logs["Condition"] == {"ArnLike": {"kms:EncryptionContext:aws:logs:arn":
                                                 f"arn:aws:logs:us-east-1:123456789012:log-group:{pattern}"}}


def test_the_loki_bucket_is_versioned_and_old_versions_expire(synthesized) -> None:
    from components.aws.log_store import NONCURRENT_VERSION_DAYS

    res = _prod_state(synthesized)
    bucket = next(r for r in res if r["type"] == "aws:s3/bucket:Bucket")
    versioning = next(r for r in res if r["type"] == "aws:s3/bucketVersioning:BucketVersioning")
    assert versioning["parent"] == bucket["urn"]
    assert versioning["inputs"]["versioningConfiguration"] == {"status": "Enabled"}
    lifecycle = next(r for r in res if r["type"] == "aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration")
    assert versioning["urn"] in lifecycle["dependencies"]
    (rule,) = [r for r in lifecycle["inputs"]["rules"] if r["id"] == "expire-noncurrent-versions"]
    assert rule["noncurrentVersionExpiration"] == {"noncurrentDays": NONCURRENT_VERSION_DAYS}
    assert rule["expiration"] == {"expiredObjectDeleteMarker": True}


def test_iam_needs_not_the_cluster_module_even_for_types() -> None:
    """Issue 47 item 3: cluster.py and iam.py needed each other (iam for GpuCluster's type, under TYPE_CHECKING);
    the shared type (what an IRSA role trusts) lives in iam now, and the cluster satisfies it."""
    import ast
    from pathlib import Path

    from components.aws import iam
    from components.aws.cluster import GpuCluster

    tree = ast.parse(Path(iam.__file__).read_text())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert "components.aws.cluster" not in imported
    assert set(iam.OidcIssuer.__annotations__) <= set(GpuCluster.__annotations__)


def test_every_component_documents_the_kubernetes_version_it_defaults_to() -> None:
    """The args' `kubernetes_version` docstrings state the default the components use (they said 1.34 after the kit
    moved to 1.35): what a component user reads is what they get."""
    import re

    from components.k8s.defaults import DEFAULT_KUBERNETES_VERSION

    root = Path(__file__).resolve().parents[2] / "components" / "k8s"
    stated = {str(p.relative_to(root)): m.group(1) for p in sorted(root.rglob("*.py"))
              for m in re.finditer(r"Kubernetes minor version \([^)]*\)\. Default: ([0-9.]+)\.", p.read_text())}
    assert len(stated) == 7 and set(stated.values()) == {DEFAULT_KUBERNETES_VERSION}, stated
