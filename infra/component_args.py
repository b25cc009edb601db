"""PlatformConfig -> the args of each Kubernetes component (the AWS layer's mapping is in infra/program.py).

The components take their own typed args, so a platform team can use one without the kit's stack config;
this module is the only place that knows both shapes.
"""

from __future__ import annotations

from components.k8s.tenancy import TenancyArgs
from infra.config import PlatformConfig

__all__ = ["tenancy_args"]

WEIGHT_DOWNLOAD_SCHEMES = ("hf://", "s3://")  # model URIs whose server fetches weights over HTTPS at start-up


def tenancy_args(cfg: PlatformConfig) -> TenancyArgs:
    """Every tenant with its (derived) quotas, and what the tenants' network policies need of each model."""
    return {
        "tenants": {t.name: {"namespace": t.namespace, "gpu_quota": t.gpu_quota, "mig_quota": dict(t.mig_quota),
                             "cpu_quota": t.cpu_quota, "memory_quota": t.memory_quota}
                    for t in cfg.tenants.values()},
        "models": {m.name: {"tenant": m.tenant, "callers": list(m.callers), "multi_node": m.multi_node,
                            "downloads_weights": m.uri.startswith(WEIGHT_DOWNLOAD_SCHEMES)}
                   for m in cfg.models.values()},
        "kubernetes_version": cfg.kubernetes_version,
        "gateway_namespace": cfg.gateway.namespace,
        "monitoring_namespace": cfg.observability.namespace,
    }
