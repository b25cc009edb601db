"""What every policy of the pack shares: levels, the pack's config (allow-lists) and its defaults.

A policy here is a real `pulumi_policy` ResourceValidationPolicy or StackValidationPolicy. The Pulumi
CLI calls their `validate` through the pack's Analyzer gRPC server; `policies.runner` calls the very
same `validate` offline with ResourceValidationArgs / StackValidationArgs built from a stack export.

Config: each policy declares the settings it reads (`Setting`), which become its config schema. The
Pulumi CLI passes a policy's config as a mapping of those names; `settings_of(args, ...)` fills what is
absent with the documented default, so a pack run without any config enforces the kit's defaults.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeGuard

from pulumi_policy import (
    EnforcementLevel,
    PolicyConfigSchema,
    ReportViolation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    Severity,
    StackValidationArgs,
    StackValidationPolicy,
)

from components.k8s import naming
from components.vocabulary import GPU_TAINT_KEY, POOL_LABEL, SYSTEM_NAMESPACES

__all__ = [
    "MANDATORY",
    "ADVISORY",
    "Setting",
    "AGENT_NAMESPACES",
    "PLATFORM_NAMESPACES",
    "GATEWAY_NAMESPACES",
    "ALLOWED_REGISTRIES",
    "ALLOWED_CAPABILITIES",
    "MESH_ROOT_NAMESPACE",
    "POOL_LABEL_KEY",
    "GPU_TAINT_KEYS",
    "REQUIRED_LOG_TYPES",
    "ResourceCheck",
    "StackCheck",
    "settings_of",
    "resource_policy",
    "stack_policy",
    "is_seq",
]

MANDATORY = EnforcementLevel.MANDATORY
ADVISORY = EnforcementLevel.ADVISORY


@dataclass(frozen=True, slots=True)
class Setting:
    """One config property of the pack: a JSON-schema type, a default and what it is for."""

    name: str
    description: str
    default: Any

    def schema(self) -> dict[str, Any]:
        if isinstance(self.default, bool):
            kind: dict[str, Any] = {"type": "boolean"}
        elif isinstance(self.default, str):
            kind = {"type": "string"}
        else:
            kind = {"type": "array", "items": {"type": "string"}}
        return {**kind, "default": self.default, "description": self.description}


AGENT_NAMESPACES = Setting(
    "agentNamespaces",
    "Namespaces of node agents that may run privileged, as root, with host namespaces, host paths or added "
    "capabilities, and may tolerate the GPU taint (GPU operator, network operator, EFA plugin, Istio, monitoring).",
    sorted({"kube-system", naming.GPU_OPERATOR_NAMESPACE, naming.NETWORK_OPERATOR_NAMESPACE,
            naming.SYSTEM_NAMESPACE, naming.ISTIO_NAMESPACE, "monitoring"}),
)
PLATFORM_NAMESPACES = Setting(
    "platformNamespaces",
    "Namespaces that belong to the platform; every other namespace the stack creates is a tenant namespace.",
    sorted(SYSTEM_NAMESPACES),
)
GATEWAY_NAMESPACES = Setting(
    "gatewayNamespaces",
    "Namespaces whose Services may be of type LoadBalancer or NodePort (the inference gateway).",
    ["aifactory-gateway"],
)
ALLOWED_REGISTRIES = Setting(
    "allowedRegistries",
    "Image sources allowed in addition to the kit's defaults (the list extends them; it never removes one): a "
    "registry host or registry/path prefix, shell wildcards allowed (Docker Hub images are docker.io/<org>/...).",
    [
        "*.dkr.ecr.*.amazonaws.com",
        "docker.io/envoyproxy",
        "docker.io/istio",
        "docker.io/jaegertracing",
        "docker.io/grafana",
        "docker.io/otel",
        "docker.io/lmsysorg",  # SGLang (components.k8s.engines.sglang)
        "docker.io/vllm",
        "ghcr.io/open-telemetry",
        "ghcr.io/oliver006/redis_exporter",  # the budget store's exporter (components.k8s.gateway.budget_objects)
        "nvcr.io/nvidia",
        "public.ecr.aws",
        "quay.io/prometheus",
        "quay.io/prometheus-operator",
        "quay.io/kiwigrid",
        "registry.k8s.io",
    ],
)
ALLOWED_CAPABILITIES = Setting(
    "allowedCapabilities",
    "Capabilities any pod may add. None by default, as Pod Security `restricted` allows: RDMA (EFA, "
    "InfiniBand) pins memory under the container runtime's unlimited RLIMIT_MEMLOCK, without IPC_LOCK.",
    [],
)
MESH_ROOT_NAMESPACE = Setting(
    "meshRootNamespace", "Istio's root namespace: a PeerAuthentication there applies mesh-wide.",
    naming.ISTIO_NAMESPACE,
)
POOL_LABEL_KEY = Setting("poolLabel", "Node label that names a node's pool.", POOL_LABEL)
GPU_TAINT_KEYS = Setting("gpuTaintKeys", "Taint keys that keep pods off GPU nodes.", [GPU_TAINT_KEY])
REQUIRED_LOG_TYPES = Setting(
    "requiredLogTypes", "EKS control-plane log types that must be enabled.", ["api", "audit", "authenticator"],
)


def settings_of(args: ResourceValidationArgs | StackValidationArgs, *settings: Setting) -> dict[str, Any]:
    """The policy's config for `settings`, each absent one at its default."""
    given = args.get_config() or {}
    return {s.name: given[s.name] if given.get(s.name) is not None else s.default for s in settings}


def is_seq(value: Any) -> TypeGuard[Sequence[Any]]:
    return isinstance(value, Sequence) and not isinstance(value, str | bytes)


ResourceCheck = Callable[[str, Mapping[str, Any], dict[str, Any]], list[str]]
StackCheck = Callable[[Sequence[Any], dict[str, Any]], list[tuple[str, str | None]]]


def _schema(settings: Sequence[Setting]) -> PolicyConfigSchema | None:
    return PolicyConfigSchema(properties={s.name: s.schema() for s in settings}) if settings else None


def resource_policy(
    *,
    name: str,
    description: str,
    severity: Severity,
    enforcement: EnforcementLevel,
    remediation: str,
    types: Sequence[str] | None,
    check: ResourceCheck,
    settings: Sequence[Setting] = (),
) -> ResourceValidationPolicy:
    """A resource policy: `check(type, props, config)` returns one message per violation.

    `types`: the resource type tokens it applies to (None: it decides itself from the type).
    """
    wanted = frozenset(types) if types is not None else None

    def validate(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
        if wanted is not None and args.resource_type not in wanted:
            return
        for message in check(args.resource_type, args.props, settings_of(args, *settings)):
            report_violation(message, None)

    return ResourceValidationPolicy(
        name=name, description=description, validate=validate, enforcement_level=enforcement,
        severity=severity, remediation_steps=remediation, config_schema=_schema(settings),
    )


def stack_policy(
    *,
    name: str,
    description: str,
    severity: Severity,
    enforcement: EnforcementLevel,
    remediation: str,
    check: StackCheck,
    settings: Sequence[Setting] = (),
) -> StackValidationPolicy:
    """A stack policy: `check(resources, config)` returns (message, urn or None) per violation."""

    def validate(args: StackValidationArgs, report_violation: ReportViolation) -> None:
        for message, urn in check(args.resources, settings_of(args, *settings)):
            report_violation(message, urn)

    return StackValidationPolicy(
        name=name, description=description, validate=validate, enforcement_level=enforcement,
        severity=severity, remediation_steps=remediation, config_schema=_schema(settings),
    )
