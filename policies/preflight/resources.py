"""The state as the rules read it: resources of a stack export or of CrossGuard (`Res`), findings,
Kubernetes quantities, what a resource is created after, and the resource kinds the rules look for."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from policies import kube

__all__ = [
    "CORE",
    "NODE_GROUP",
    "EKS_CLUSTER",
    "EKS_ADDON",
    "K8S_PROVIDER",
    "GPU",
    "MIG_PREFIX",
    "Res",
    "from_entries",
    "from_policy_resources",
    "Finding",
    "parse_quantity",
    "show_quantity",
    "created_after",
    "get_path",
    "chart_of",
    "namespace_labels",
]


CORE = ("", "core")  # the core API group: kubernetes:core/v1:<Kind> in Pulumi type tokens

NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"

EKS_CLUSTER = "aws:eks/cluster:Cluster"

EKS_ADDON = "aws:eks/addon:Addon"

K8S_PROVIDER = "pulumi:providers:kubernetes"

GPU = "nvidia.com/gpu"

MIG_PREFIX = "nvidia.com/mig-"


@dataclass(frozen=True)
class Res:
    """One resource of a stack export: inputs as the engine passed them (camelCase)."""

    urn: str
    type: str
    props: Mapping[str, Any]
    parent: str | None = None
    deps: tuple[str, ...] = ()
    custom_timeout_create: float | None = None

    @property
    def kind(self) -> str:
        return kube.kind_of(self.type)[1]

    @property
    def group(self) -> str:
        return kube.kind_of(self.type)[0]

    @property
    def namespace(self) -> str:
        return kube.namespace_of(self.props)

    @property
    def name(self) -> str:
        return kube.name_of(self.props)

    @property
    def label(self) -> str:
        """kind/namespace/name for Kubernetes objects, else the URN's last part."""
        if self.type.startswith("kubernetes:") and self.name:
            ns = (self.props.get("metadata") or {}).get("namespace")
            return f"{self.kind}/{ns}/{self.name}" if ns else f"{self.kind}/{self.name}"
        if self.type == kube.HELM_RELEASE:
            return f"HelmRelease/{self.props.get('namespace') or 'default'}/{self.props.get('name') or self.urn_name}"
        return self.urn_name

    @property
    def urn_name(self) -> str:
        return self.urn.rsplit("::", 1)[-1]


def _timeout(entry: Mapping[str, Any]) -> float | None:
    ct = entry.get("customTimeouts") or {}
    value = ct.get("create") if isinstance(ct, Mapping) else None
    return float(value) if isinstance(value, int | float) and value > 0 else None


def from_entries(entries: Iterable[Mapping[str, Any]]) -> list[Res]:
    """Resources of a stack export (`deployment.resources`), the stack itself left out."""
    return [Res(e["urn"], e["type"], e.get("inputs") or e.get("outputs") or {}, e.get("parent"),
                tuple(e.get("dependencies") or ()), _timeout(e))
            for e in entries if e["type"] != "pulumi:pulumi:Stack"]


def from_policy_resources(resources: Sequence[Any]) -> list[Res]:
    """CrossGuard's StackValidationArgs.resources (PolicyResource) as the rules read them."""
    out = []
    for r in resources:
        timeouts = getattr(getattr(r, "opts", None), "custom_timeouts", None)
        create = getattr(timeouts, "create_seconds", 0) or None
        out.append(Res(r.urn, r.resource_type, r.props, r.parent.urn if r.parent is not None else None,
                       tuple(d.urn for d in r.dependencies or ()), float(create) if create else None))
    return out


@dataclass(frozen=True)
class Finding:
    rule: str
    resource: str  # kind/namespace/name for Kubernetes objects, else the resource's name
    message: str  # what the real system would do
    fix: str
    urn: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"rule": self.rule, "resource": self.resource, "urn": self.urn, "message": self.message,
                "fix": self.fix}


_SUFFIX: dict[str, int | Fraction] = {
    "": 1, "m": Fraction(1, 1000), "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}

_QUANTITY = re.compile(r"^([+-]?[0-9.]+)(e[+-]?[0-9]+)?([a-zA-Z]*)$")


def parse_quantity(value: Any) -> Fraction:
    """A Kubernetes resource quantity ("100m", "819Gi", 8, "1.5") as an exact number of base units."""
    if isinstance(value, bool):
        raise ValueError(f"not a quantity: {value!r}")
    if isinstance(value, int | float):
        return Fraction(value)
    m = _QUANTITY.match(str(value).strip())
    if not m or m.group(3) not in _SUFFIX:
        raise ValueError(f"not a quantity: {value!r}")
    exponent = int(m.group(2)[1:]) if m.group(2) else 0
    return Fraction(m.group(1)) * Fraction(10) ** exponent * _SUFFIX[m.group(3)]


def show_quantity(resource: str, amount: Fraction) -> str:
    if resource in ("memory", "ephemeral-storage") or resource.startswith("hugepages-"):
        gib = amount / 2**30
        return f"{float(gib):.4g}Gi" if gib >= 1 else f"{float(amount / 2**20):.4g}Mi"
    if resource == "cpu":
        return f"{float(amount):.4g}"
    return f"{float(amount):g}"


def created_after(resources: Sequence[Res]) -> dict[str, frozenset[str]]:
    """URN -> every URN the engine finishes creating before it: recorded dependencies (a dependency on a
    component is recorded as its children) and, transitively, those of its ancestors (children register
    after their parent, whose own dependencies it waited for)."""
    by_urn = {r.urn: r for r in resources}
    memo: dict[str, frozenset[str]] = {}

    def walk(urn: str, seen: frozenset[str]) -> frozenset[str]:
        if urn in memo:
            return memo[urn]
        r = by_urn.get(urn)
        if r is None or urn in seen:
            return frozenset()
        out: set[str] = set()
        seen = seen | {urn}
        for d in r.deps:
            out.add(d)
            out |= walk(d, seen)
        if r.parent:
            out |= walk(r.parent, seen)
        memo[urn] = frozenset(out)
        return memo[urn]

    return {r.urn: walk(r.urn, frozenset()) for r in resources}


def get_path(value: Any, *path: str, default: Any = None) -> Any:
    for key in path:
        if not isinstance(value, Mapping) or key not in value:
            return default
        value = value[key]
    return value


def chart_of(r: Res) -> str:
    """The chart a Helm release installs: its name, or the last part of an oci:// reference."""
    return str(r.props.get("chart") or "").rstrip("/").rsplit("/", 1)[-1]


def namespace_labels(resources: Sequence[Res]) -> dict[str, Mapping[str, Any]]:
    return {r.name: (r.props.get("metadata") or {}).get("labels") or {} for r in resources
            if r.type == kube.NAMESPACE and r.name}
