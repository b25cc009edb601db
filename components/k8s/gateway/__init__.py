"""The Envoy inference gateway: one component (Gateway) and the pure functions that build what it registers.

    args (GatewayArgs) -> spec (validation, defaults) -> envoy/ (the bootstrap: listeners, routes, clusters)
    -> component (the Deployment, Services, autoscaler, ServiceMonitor; registers every object)

Modules: `args` (the component's typed arguments), `spec` (their validation and defaults), `names` (object names,
labels, the Service's address), `network` (NetworkPolicies, AuthorizationPolicies, the in-mesh DestinationRule),
`component` (the Envoy workload and the component), and `envoy/` (the bootstrap builders, one module per concern).

`from components.k8s.gateway import Gateway` (and every other name in `component.__all__`) is resolved lazily, so
that importing one small module of this package (`gateway.names`, `gateway.envoy.base`) does not import the
component and, through it, the serving package that imports those modules.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from components.k8s.gateway.component import *  # noqa: F403


def __getattr__(name: str) -> Any:
    component = importlib.import_module(f"{__name__}.component")
    if name in component.__all__:
        return getattr(component, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(importlib.import_module(f"{__name__}.component").__all__)
