"""Kubernetes components of the kit: each takes its own typed args (infra.component_args maps the stack config).

`from components.k8s import Platform` (and the other names in `__all__`) imports the component lazily, so
importing a small module of this package (naming, versions) stays cheap and free of import cycles.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from components.k8s.autoscaler import ClusterAutoscaler
    from components.k8s.gateway import Gateway
    from components.k8s.platform import Platform
    from components.k8s.serving import ModelDeployment, ServingControllers
    from components.k8s.storage import ModelCacheStorage

__all__ = ["Platform", "ModelDeployment", "ServingControllers", "Gateway", "ClusterAutoscaler", "ModelCacheStorage"]

_HOME = {"Platform": "platform", "ModelDeployment": "serving", "ServingControllers": "serving",
         "Gateway": "gateway", "ClusterAutoscaler": "autoscaler", "ModelCacheStorage": "storage"}


def __getattr__(name: str) -> Any:
    if name in _HOME:
        return getattr(importlib.import_module(f"{__name__}.{_HOME[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
