"""The order `pulumi up` creates and `pulumi destroy` deletes in, read from the dependency graph of prod's
synthesized state (state.json `dependencies`): the engine deletes a resource only after everything that records it
as a dependency, and creates it before them."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

RELEASE = "kubernetes:helm.sh/v3:Release"
ADDON = "aws:eks/addon:Addon"
ROLE = "aws:iam/role:Role"
POLICY_TYPES = ("aws:iam/rolePolicy:RolePolicy", "aws:iam/rolePolicyAttachment:RolePolicyAttachment")


@pytest.fixture(scope="module")
def prod(synthesized: Callable[[str], Path]) -> list[dict[str, Any]]:
    return json.loads((synthesized("prod") / "state.json").read_text())["deployment"]["resources"]


def _of(res: list[dict[str, Any]], typ: str) -> list[dict[str, Any]]:
    return [r for r in res if r["type"] == typ]


def _name(r: dict[str, Any]) -> str:
    return r["urn"].rsplit("::", 1)[-1]


def _deps(r: dict[str, Any]) -> set[str]:
    return set(r.get("dependencies", []))


def _private_egress(res: list[dict[str, Any]]) -> set[str]:
    """Private route tables, their associations and the NAT gateways: node egress to AWS APIs and registries."""
    return {r["urn"] for r in res if r["type"] in ("aws:ec2/routeTable:RouteTable",
                                                  "aws:ec2/routeTableAssociation:RouteTableAssociation")
            and "-private-" in _name(r)} | {r["urn"] for r in _of(res, "aws:ec2/natGateway:NatGateway")}


def test_platform_releases_are_deleted_before_pod_networking_and_node_egress(prod) -> None:
    """Helm uninstall hooks and PVC deletions run while a release is destroyed: they need pod IPs (vpc-cni,
    kube-proxy) and, for EBS CSI to delete volumes, the nodes' way out to the EC2 API (private route table, NAT)."""
    networking = {r["urn"] for r in _of(prod, ADDON) if r["inputs"]["addonName"] in ("vpc-cni", "kube-proxy")}
    egress = _private_egress(prod)
    assert len(networking) == 2 and len(egress) == 3 * 3  # prod: three zones, a NAT gateway per zone
    platform = [r for r in _of(prod, RELEASE) if _name(r).startswith(("platform-", "serving-"))]
    assert len(platform) >= 10
    for release in platform:
        assert networking | egress <= _deps(release), _name(release)


def test_the_cluster_is_deleted_before_its_subnets_lose_their_routes(prod) -> None:
    """EKS deletes its control-plane interfaces and the nodes drain while the cluster is destroyed: the private
    route-table associations must outlive it (the cluster records them through its subnet ids)."""
    (eks,) = _of(prod, "aws:eks/cluster:Cluster")
    associations = {r["urn"] for r in _of(prod, "aws:ec2/routeTableAssociation:RouteTableAssociation")
                    if "-private-" in _name(r)}
    assert len(associations) == 3 and associations <= _deps(eks)
    for ng in _of(prod, "aws:eks/nodeGroup:NodeGroup"):
        assert _deps(ng) & associations, _name(ng)


def _policies_of(res: list[dict[str, Any]], role: dict[str, Any]) -> set[str]:
    return {r["urn"] for r in res if r["type"] in POLICY_TYPES and r.get("parent") == role["urn"]}


@pytest.mark.parametrize(("role_prefix", "user_prefix"), [
    ("cluster-autoscaler-irsa", "cluster-autoscaler-release"),
    ("aifactory-prod-logs-irsa", "platform-observability-loki"),
    ("model-assistant-fast-s3", "model-assistant-fast-serviceaccount"),  # an s3:// model's identity
])
def test_irsa_users_wait_for_the_roles_policies_not_only_the_role(prod, role_prefix: str, user_prefix: str) -> None:
    """Only the role's ARN reached the release before: its pods could start before IAM had the role's policy and
    see AccessDenied until it propagated. The ARN now carries the policies as dependencies (arn_with_policies)."""
    (role,) = [r for r in _of(prod, ROLE) if _name(r) == role_prefix]
    policies = _policies_of(prod, role)
    assert policies, role_prefix
    (user,) = [r for r in prod if _name(r) == user_prefix]
    assert policies <= _deps(user)
