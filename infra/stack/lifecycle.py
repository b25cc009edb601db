"""A stack's Kubernetes version against the EKS support calendar (components/aws/versions.py): what `aifactory
validate` warns about. Only provider aws stacks: an existing cluster's support is its operator's calendar."""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING

from components.aws.versions import support_warning

if TYPE_CHECKING:
    from infra.config import PlatformConfig

__all__ = ["version_warning"]


def version_warning(cfg: PlatformConfig, *, today: datetime.date) -> str | None:
    """The stack's kubernetesVersion within 60 days of (or past) its end of EKS standard support, else None."""
    if not cfg.is_aws or cfg.cluster is None:
        return None
    return support_warning(cfg.kubernetes_version, today=today, support_type=cfg.cluster.support_type)
