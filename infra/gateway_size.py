"""Whether a stack's gateway config fits the ConfigMap that carries it: checked by `validate` and `synth` before
anything is written (infra/commands.py, infra/synth.py), not by every reader of a stack (node-check reads stacks on GPU
hosts without the OpenTelemetry SDK the gateway modules import, so they are imported here only when called)."""

from __future__ import annotations

from infra.config import ConfigError, PlatformConfig, Problem

__all__ = ["gateway_fits"]


def gateway_fits(cfg: PlatformConfig) -> None:
    """ConfigError unless the gateway's envoy.yaml fits its ConfigMap: the API server refuses one whose data is over
    1 MiB (policies.preflight.sizes), and the config grows with every model (its routes and cluster), so a stack the
    rest of validation takes could never be applied. Rendered as the Gateway renders it, every variant routable (the
    most the fidelity gate can let through)."""
    from components.k8s.gateway.envoy.config import render
    from components.k8s.gateway.spec import gateway_spec
    from infra.component_args import gateway_args
    from policies.preflight.sizes import MAX_DATA_BYTES

    size = len(render(gateway_spec("gateway", gateway_args(cfg))).encode())
    if size <= MAX_DATA_BYTES or not cfg.models:
        return
    raise ConfigError([Problem("models", (
        f"{len(cfg.models)} models: the gateway's envoy.yaml would be {size} bytes, over the {MAX_DATA_BYTES} bytes "
        f"(1 MiB) the API server takes in a ConfigMap (about {size // len(cfg.models)} bytes per model, with its "
        f"routes and cluster): split the models across stacks"))])
