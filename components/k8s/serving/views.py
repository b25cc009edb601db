"""What a model's build functions read (ServingView, ControllersView), and the metadata every object of a model
carries."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from components.k8s import naming
from components.k8s.gateway.envoy.config import ObservabilityView
from components.k8s.settings import InfinibandSettings, Model, NodePool, Tenant

__all__ = ["TargetView", "ServingView", "ControllersView", "model_namespace", "object_meta", "model_labels"]


class TargetView(Protocol):
    @property
    def region(self) -> str | None: ...  # AWS: the region (per-region DLC images)

    @property
    def storage_class(self) -> str | None: ...  # an existing cluster: the class every claim names


class ServingView(Protocol):
    """What a model's build functions read: ModelDeployment's ServingSpec (from its args), or the kit's whole
    PlatformConfig, which has the same attributes."""

    @property
    def is_aws(self) -> bool: ...

    @property
    def target(self) -> TargetView: ...

    @property
    def infiniband(self) -> InfinibandSettings | None: ...

    @property
    def observability(self) -> ObservabilityView: ...

    def tenant_of(self, model: Model) -> Tenant: ...

    def pool_of(self, model: Model) -> NodePool: ...

    def priority_class_of(self, model: Model) -> str | None: ...


class ControllersView(ServingView, Protocol):
    """What ServingControllers reads besides: every model and pool of the stack."""

    @property
    def models(self) -> Mapping[str, Model]: ...

    @property
    def node_pools(self) -> Mapping[str, NodePool]: ...


# vLLM 0.33.0 (PyPI, Nov 2026): its wheel's METADATA requires opentelemetry-sdk/-api/-exporter-otlp, which the
# image's `uv pip install dist/*.whl` then installs, so `--otlp-traces-endpoint` finds the SDK (0.11.0 lacked it and


def model_namespace(cfg: ServingView, model: Model) -> str:
    return cfg.tenant_of(model).namespace


def object_meta(cfg: ServingView, model: Model, name: str | None = None) -> dict[str, Any]:
    return {"name": name or model.name, "namespace": model_namespace(cfg, model), "labels": model_labels(model)}


def model_labels(model: Model) -> dict[str, str]:
    return naming.model_labels(model.name, model.tenant, model.pool)
