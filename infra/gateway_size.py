"""Whether a stack's gateway config fits the ConfigMap that carries it: checked by `validate` and `synth` before
anything is written (infra/commands.py, infra/synth.py), not by every reader of a stack (node-check reads stacks on GPU
hosts without the OpenTelemetry SDK the gateway modules import, so they are imported here only when called)."""

from __future__ import annotations

from infra.config import ConfigError, PlatformConfig, Problem

__all__ = ["gateway_fits"]


def gateway_fits(cfg: PlatformConfig) -> None:
    """ConfigError unless the gateway's envoy.yaml fits its ConfigMap: the API server refuses one whose data is over
    1 MiB (policies.preflight.sizes), and the config grows with every model's replicas.max (a hop per replica,
    components/k8s/gateway/envoy/hops.py), so a stack the rest of validation takes could never be applied. Rendered as
    the
    Gateway renders it, every variant routable (the most the fidelity gate can let through)."""
    from components.k8s.gateway.envoy.config import render
    from components.k8s.gateway.spec import gateway_spec
    from infra.component_args import gateway_args
    from policies.preflight.sizes import MAX_DATA_BYTES

    size = len(render(gateway_spec("gateway", gateway_args(cfg))).encode())
    if size <= MAX_DATA_BYTES or not cfg.models:
        return
    hops = sum(m.replicas.max for m in cfg.models.values())
    top = max(cfg.models.values(), key=lambda m: (m.replicas.max, m.name))
    raise ConfigError([Problem(f"models.{top.name}.replicas.max", (
        f"{top.replicas.max}: the gateway's envoy.yaml would be {size} bytes, over the {MAX_DATA_BYTES} bytes "
        f"(1 MiB) the API server takes in a ConfigMap; the gateway reaches each replica up to replicas.max through "
        f"a hop of its own ({hops} in all, about {size // max(hops, 1)} bytes each): lower this model's (or other "
        f"models') replicas.max, or split the models across stacks"))])
