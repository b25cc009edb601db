"""Constants and value checks the stack model's sections share (names, patterns, catalog look-ups)."""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path

from components import catalog
from components.k8s.settings import DNS_SUBDOMAIN_PATTERN, MIG_PROFILE_PATTERN
from components.vocabulary import SYSTEM_NAMESPACES
from infra.stack.reader import (
    DNS_LABEL,
)

NAMESPACE = "aifactory"
DEFAULT_STACKS_DIR = Path(__file__).resolve().parents[2] / "stacks"  # Pulumi.yaml's stackConfigDir
SUPPORTED_KUBERNETES_VERSIONS = ("1.31", "1.32", "1.33", "1.34", "1.35", "1.36")
DEFAULT_SYSTEM_INSTANCE_TYPE = "m7i.2xlarge"


MIG_PROFILE_RE = re.compile(MIG_PROFILE_PATTERN)
# Namespaces of the platform's components other than the gateway and observability (whose names are settings).
_KIT_NAMESPACES = frozenset({"istio-system", "gpu-operator", "nvidia-network-operator", "aifactory-system"})
DNS_SUBDOMAIN = re.compile(DNS_SUBDOMAIN_PATTERN)
MIN_CAPACITY_BLOCK_DRAIN_MINUTES = 31
ROLE_ARN = re.compile(r"^arn:aws[a-z-]*:iam::\d{12}:role/[\w+=,.@/-]+$")
# The keys a stack may set under `aifactory:`; anything else is a typo and is reported.
TOP_LEVEL_KEYS = (
    "target",
    "kubernetesVersion",
    "cluster",
    "network",
    "nodePools",
    "infiniband",
    "tenants",
    "models",
    "gateway",
    "observability",
)


def _reserved_namespace(value: str) -> str | None:
    """Why a namespace cannot be a tenant's (Kubernetes' own, kube-*, or one the platform runs in), or None."""
    if value in SYSTEM_NAMESPACES or value.startswith("kube-"):
        named = sorted(n for n in SYSTEM_NAMESPACES if not n.startswith("kube-"))
        return f"is reserved for the platform (kube-*, {', '.join(named)})"
    return None


def _dns_label(value: str) -> str | None:
    if DNS_LABEL.match(value):
        return None
    return ("is not a DNS label (lowercase letters, digits and '-', at most 63 characters"
            + (f"; it has {len(value)})" if len(value) > 63 else ")"))


def _cidr(value: str) -> str | None:
    try:
        ipaddress.ip_network(value, strict=True)
    except ValueError:
        return "is not a CIDR block such as 10.0.0.0/16"
    return None


def _known_type(value: str) -> str | None:
    if value in catalog.CATALOG:
        return None
    return f"is not a known instance type; known: {', '.join(catalog.known_types())}"


def _dns_subdomain(value: str) -> str | None:
    return None if DNS_SUBDOMAIN.match(value) else "is not a Kubernetes object name (a DNS subdomain)"
