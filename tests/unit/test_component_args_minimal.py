"""Components from minimal args: what the args leave out takes the component's own default, and that default is the
stack model's (the same settings dataclass, components/k8s/settings/). The equivalence tests elsewhere pass every
field; here a stack that sets nothing optional, and a component given nothing optional, must agree."""

from __future__ import annotations

from typing import Any

from components.k8s.gateway.spec import _settings as gateway_settings
from components.k8s.observability import observability_spec
from components.k8s.settings import GatewaySettings, Ingest, ObservabilitySettings, Retries, VolumeSizes
from infra.component_args import gateway_args, observability_args, same_names
from infra.config import PlatformConfig, parse

# The least a stack must say: where it runs and one GPU pool (an on-prem type has no list price: give one).
MINIMAL: dict[str, Any] = {
    "target": {"provider": "existing", "kubeconfig": "~/.kube/config", "storageClass": "fast"},
    "nodePools": {"gpu": {"instanceType": "dgx-h100"}},
    "observability": {"prices": {"dgx-h100": 40.0}},
}


def _minimal() -> PlatformConfig:
    return parse(MINIMAL, stack="minimal")


def test_a_stack_that_sets_no_gateway_setting_gets_the_dataclass_defaults() -> None:
    assert _minimal().gateway == GatewaySettings()


def test_the_gateway_component_given_no_optional_arg_takes_the_same_defaults() -> None:
    assert gateway_settings({"models": {}, "tenants": {}}) == GatewaySettings()


def test_the_gateway_component_from_a_minimal_stack_resolves_what_the_stack_model_resolved() -> None:
    cfg = _minimal()
    assert gateway_settings(gateway_args(cfg)) == cfg.gateway


def test_the_observability_component_given_no_optional_arg_takes_the_stack_models_defaults() -> None:
    """Only storageClass is required off AWS; every other setting is the dataclass default, as the stack model
    reads an empty observability section (prices aside, which the component does not take)."""
    spec = observability_spec("o", {"storage_class": "fast"})
    assert spec.observability == ObservabilitySettings()
    cfg = _minimal()
    assert observability_spec("o", observability_args(cfg)).observability == ObservabilitySettings(
        namespace=cfg.observability.namespace, retention=cfg.observability.retention,
        trace_retention=cfg.observability.trace_retention, ingest=cfg.observability.ingest,
        volumes=cfg.observability.volumes)
    assert (cfg.observability.ingest, cfg.observability.volumes) == (Ingest(), VolumeSizes())


def test_same_names_maps_a_settings_section_field_by_field() -> None:
    assert same_names(Retries()) == {"attempts": 2, "budget_percent": 20.0}
    assert same_names(VolumeSizes(loki_gib=50), unset_left_out=True) == {"loki_gib": 50}
    assert same_names(VolumeSizes(loki_gib=50)) == {"prometheus_gib": None, "loki_gib": 50, "jaeger_gib": None}
