"""Token budgets in the stack file (issue 48): tenants.<t>.tokenBudget and gateway.routing.<workload>.tokenBudget are
read with their defaults, and bad values are refused with the key path, the value and what is allowed."""

from __future__ import annotations

from typing import Any

import pytest

from components.k8s.settings import TokenBudget
from infra.config import ConfigError, PlatformConfig, parse
from tests.support.stacks import stack_raw

IMAGE = "registry.example/aifactory-budgets:1"


def _parse(tenant_budget: Any = None, routing: dict[str, Any] | None = None, image: str | None = IMAGE
           ) -> PlatformConfig:
    raw = stack_raw("dev")
    if tenant_budget is not None:
        raw["tenants"]["demo"]["tokenBudget"] = tenant_budget
    if routing is not None:
        raw.setdefault("gateway", {})["routing"] = routing
    if image is not None:
        raw.setdefault("gateway", {})["budgetService"] = {"image": image}
    return parse(raw, stack="dev")


def _problems(**kw: Any) -> list[str]:
    with pytest.raises(ConfigError) as err:
        _parse(**kw)
    return [str(p) for p in err.value.problems]


def test_a_tenant_budget_is_read_with_its_defaults() -> None:
    t = _parse({"perMinute": 20000, "perDay": 5_000_000}).tenants["demo"]
    assert t.token_budget == TokenBudget(per_minute=20000, per_hour=None, per_day=5_000_000, output_weight=1.0,
                                         default_max_tokens=4096, prompt_bytes_per_token=1.0,
                                         on_store_failure="open")
    assert t.token_budget.limits() == {"perMinute": 20000, "perDay": 5_000_000}


def test_every_key_of_a_budget_is_read() -> None:
    b = _parse({"perMinute": 1, "perHour": 2, "perDay": 3, "outputWeight": 4, "defaultMaxTokens": 512,
                "promptBytesPerToken": 3.5, "onStoreFailure": "closed"}).tenants["demo"].token_budget
    assert b == TokenBudget(1, 2, 3, 4.0, 512, 3.5, "closed")


def test_no_budget_by_default() -> None:
    cfg = _parse()
    assert cfg.tenants["demo"].token_budget is None
    assert cfg.gateway.token_budgets == {}


def test_a_budget_without_any_window_is_refused() -> None:
    assert _problems(tenant_budget={"outputWeight": 3}) == [
        "tenants.demo.tokenBudget: limits no window: set at least one of perMinute, perHour, perDay (weighted tokens "
        "per UTC minute, hour, calendar day), or remove tokenBudget"]


def test_bad_budget_values_are_refused_with_their_key_paths() -> None:
    problems = _problems(tenant_budget={"perMinute": 0, "perHour": "lots", "outputWeight": -1,
                                        "onStoreFailure": "maybe", "perWeek": 5})
    assert problems == [
        "tenants.demo.tokenBudget.perWeek: unknown key; allowed keys: perMinute, perHour, perDay, outputWeight, "
        "defaultMaxTokens, promptBytesPerToken, onStoreFailure",
        "tenants.demo.tokenBudget.perMinute: 0 is below the minimum 1",
        "tenants.demo.tokenBudget.perHour: expected an integer, got a string 'lots'",
        "tenants.demo.tokenBudget.outputWeight: -1.0 is below the minimum 0",
        "tenants.demo.tokenBudget.onStoreFailure: 'maybe' is not allowed; choose one of: open, closed"]


def test_a_workload_budget_needs_no_variants() -> None:
    cfg = _parse(routing={"chat": {"tokenBudget": {"perHour": 100000, "outputWeight": 2}}})
    assert cfg.gateway.token_budgets == {"chat": TokenBudget(per_hour=100000, output_weight=2.0)}
    assert cfg.gateway.routing == {}  # no policy: chat has no variants, and says nothing about them


def test_a_workload_budget_names_a_workload() -> None:
    assert _problems(routing={"nope": {"tokenBudget": {"perHour": 10}}}) == [
        "gateway.routing.nope.tokenBudget: 'nope' is not a workload of any model; workloads: chat"]


def test_a_routing_policy_still_needs_variants() -> None:
    assert _problems(routing={"chat": {"policy": "fastest", "tokenBudget": {"perHour": 10}}}) == [
        "gateway.routing.chat: 'chat' is not a workload with variants; workloads with variants: (none)"]


def test_budgets_need_the_service_image() -> None:
    assert _problems(tenant_budget={"perHour": 10}, routing={"chat": {"tokenBudget": {"perDay": 5}}},
                     image=None) == [
        "gateway.budgetService.image: is required: tenants.demo.tokenBudget, gateway.routing.chat.tokenBudget need the "
        "token budget service; build its image from components/k8s/gateway/budgets/Dockerfile and give its reference "
        "here"]


def test_the_budget_service_settings_are_read_with_their_defaults() -> None:
    b = _parse({"perHour": 10}).gateway.budget_service
    assert (b.image, b.replicas, b.store_replicas, b.store_volume_gib) == (IMAGE, 2, 0, 8)
