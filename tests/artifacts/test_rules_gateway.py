"""The gateway's availability alerts where the stack config says a model has no replica by design, under the real
promtool: a capacity block inside its window (after its warm-up) pages like any model, and a model that scales to
zero gets no ticket while idle and pages only after it has had time to wake. promtool's clock starts at the epoch,
so these stacks' capacity blocks open then.

The shipped stacks' cases (outside a block's window, an overflowing variant) are in tests/artifacts/test_rules.py.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from dashboards.config import ObservabilityConfig
from dashboards.gateway_alerts import (
    CAPACITY_BLOCK_WARMUP_MINUTES,
    SCALE_FROM_ZERO_FOR,
    UNAVAILABLE_FOR,
    block_over_alerts,
    client_clusters,
    expected_down_records,
)
from dashboards.rules import R, alerts, records
from infra.monitoring import from_platform
from infra.synth import load_stack
from telemetry.names import ENVOY
from tests.artifacts.test_alertmanager import amtool, shipped
from tests.artifacts.test_rules import (
    GATEWAY_PODS,
    Case,
    _answers,
    _around,
    _down,
    _gateway_fired,
    _minutes,
    _num,
    _promtool_test,
    _run_promtool_tests,
    _sel,
)
from tests.support.stacks import prod_without_variants, stack_raw

BLOCK_DAYS = 14


@pytest.fixture(scope="module")
def prod() -> ObservabilityConfig:
    return from_platform(load_stack("prod"))


def _annotations(cfg: ObservabilityConfig) -> dict[tuple[str, str, str | None], dict[str, str]]:
    return {(a.alert, a.severity, None): a.to_dict()["annotations"] for a in alerts(cfg)}


def _block_from_epoch(cfg: ObservabilityConfig) -> ObservabilityConfig:
    """prod with its capacity block (h100-block, assistant-fast's pool) from the epoch for BLOCK_DAYS."""
    pools = tuple(dataclasses.replace(p, window=(0, BLOCK_DAYS * 86400)) if p.window else p for p in cfg.pools)
    return dataclasses.replace(cfg, pools=pools)


def test_a_capacity_block_model_pages_inside_its_window_after_the_warm_up(prod: ObservabilityConfig,
                                                                         tmp_path: Path) -> None:
    """assistant-fast alone (prod without its on-demand variant, whose overflow would serve its clients) refuses
    every request from minute 0: nothing fires while its block warms up (its nodes join and the model loads); from
    the warm-up's end the refusals page after UNAVAILABLE_FOR."""
    cfg = _block_from_epoch(from_platform(prod_without_variants()))
    fired = _gateway_fired(cfg, "GatewayModelUnavailable", "critical", "assistant-fast", 2.0)
    case = Case("GatewayModelUnavailable", _down("assistant-fast", (60, 60)),
                [(_minutes(UNAVAILABLE_FOR) + 1, [])] + _around(CAPACITY_BLOCK_WARMUP_MINUTES, [fired]))
    assert case.checks[-1][0] == CAPACITY_BLOCK_WARMUP_MINUTES + _minutes(UNAVAILABLE_FOR)
    _run_promtool_tests(cfg, tmp_path, ("1m", [_promtool_test(case, _annotations(cfg))]))


def test_a_model_that_scales_to_zero_gets_no_ticket_idle_and_pages_after_waking_time(prod: ObservabilityConfig,
                                                                                   tmp_path: Path) -> None:
    """deep-research with replicas.min 0: no replica and nobody asking is its normal state; refused requests wake
    it (KEDA on the gateway's refusals), so they page only after SCALE_FROM_ZERO_FOR, not UNAVAILABLE_FOR."""
    cfg = dataclasses.replace(prod, models=tuple(dataclasses.replace(m, min_replicas=0) if m.name == "deep-research"
                                                 else m for m in prod.models))
    fired = _gateway_fired(cfg, "GatewayModelUnavailable", "critical", "deep-research", 1.0, for_=SCALE_FROM_ZERO_FOR)
    assert fired[2] > _minutes(UNAVAILABLE_FOR)
    waking = Case("GatewayModelUnavailable", _down("deep-research", (60, 0)), _around(1, [fired]))
    idle = Case("GatewayModelUnavailable", _down("deep-research", (0, 0)), [(30, [])])
    _run_promtool_tests(cfg, tmp_path, ("1m", [_promtool_test(c, _annotations(cfg)) for c in (waking, idle)]))


def _ended(cluster: str, code: int, per_minute: float) -> dict[str, str]:
    """Both gateway pods end `per_minute` requests of `cluster` a minute with the route cluster's status `code` (a
    4xx to the router): its per-code series and its class's."""
    out = _answers(cluster, {"4": per_minute})
    out.update({_sel(ENVOY.RQ_CODE, {**p, ENVOY.L_CLUSTER: cluster, ENVOY.L_CODE: str(code)}):
                f"0+{_num(per_minute)}x30" for p in GATEWAY_PODS})
    return out


def test_requests_failed_on_two_replicas_are_server_errors_that_page(prod: ObservabilityConfig,
                                                                     tmp_path: Path) -> None:
    """Issue 44 item 8: a request whose second replica also answered 500 ends as 452 at the route cluster (the
    router neither retries it nor counts it against that replica: a 4xx in upstream_rq_xx) and 500 to the client
    (components/k8s/gateway/envoy/failures.py; live: tests/artifacts/test_envoy_failures_live.py).
    GatewayServerErrorRatioHigh counts it as a server error:
    - a model whose every replica fails (passing its checks): every answer 452, 100%: pages;
    - a burst of poison requests while the replicas serve the rest: 6 of 66 a minute per pod, 9.1%: pages;
    - a request the engine says is at fault (422, x-aifactory-fault: engine-says-request) is the client's: quiet.
    Before, the 452s were 422s, counted by neither: an outage read as client errors, and nothing paged."""
    outage = _gateway_fired(prod, "GatewayServerErrorRatioHigh", "critical", "deep-research", 1.0)
    poison = _gateway_fired(prod, "GatewayServerErrorRatioHigh", "critical", "assistant-tools", 12 / 132)
    quiet = [(1 + outage[2], [])]
    cases = [
        Case("GatewayServerErrorRatioHigh", _ended("deep-research", ENVOY.FAILED_TWICE_CODE, 60), _around(1, [outage])),
        Case("GatewayServerErrorRatioHigh",
             {**_answers("assistant-tools", {"2": 60}), **_ended("assistant-tools", ENVOY.FAILED_TWICE_CODE, 6)},
             _around(1, [poison])),
        Case("GatewayServerErrorRatioHigh",
             {**_answers("assistant-tools", {"2": 60}), **_ended("assistant-tools", 422, 6)}, quiet),
    ]
    _run_promtool_tests(prod, tmp_path, ("1m", [_promtool_test(c, _annotations(prod)) for c in cases]))


def test_the_clients_answers_are_the_models_clusters_and_every_variant_routes_stats(
        prod: ObservabilityConfig) -> None:
    """What GatewayServerErrorRatioHigh reads (issue 44, M1): the clusters of models without variants, which only
    their own routes send to (components/k8s/gateway/envoy/config.py `_route`), and the route stats of every route
    with a stat_prefix: the variant routes (components/k8s/gateway/envoy/variants.py `decision_route`,
    `direct_route`), each by the cluster it sends to. No variant's own cluster, which counts the 503s of tries its
    workload's aggregate retried on the next variant, and no aggregate cluster by name (two of prod's were never
    rendered: assistant__assistant-steady, finance-8b__finance-8b)."""
    assert client_clusters(prod) == ["assistant-batch", "assistant-tools", "deep-research", "embed-rerank"]
    [ratio] = [a for a in alerts(prod) if a.alert == "GatewayServerErrorRatioHigh"]
    assert "__" not in ratio.expr.replace('"(.+__.+)__.+|(.+)"', "")
    assert ratio.expr.count(ENVOY.ROUTE_RQ_XX) == 3 and ratio.expr.count(f"{ENVOY.ROUTE_RQ_CODE}{{") == 1


def test_each_variant_route_counts_for_the_cluster_it_sends_to(prod: ObservabilityConfig, tmp_path: Path) -> None:
    """The routes' stat prefixes as prod renders them, relabelled by the real Prometheus (promtool) to the cluster
    each route sends to: a decision `<workload>__<variant>__<reason>` to its aggregate `<workload>__<variant>`, a
    route naming a variant `<variant>__direct` to the aggregate of that name; the decisions of one aggregate add up."""
    from dashboards.gateway_alerts import client_route_clusters
    routes = {"assistant__assistant-fast__default": 3, "finance-8b__finance-8b-bf16__fits-budget": 1,
              "finance-8b__finance-8b-bf16__rescued": 2, "assistant-fast__direct": 4}
    series = [{"series": _sel(ENVOY.ROUTE_RQ_XX, {**p, ENVOY.L_ROUTE: r, ENVOY.L_VHOST: "models",
                                                 ENVOY.L_CODE_CLASS: "2"}), "values": f"0+{_num(n * 60)}x10"}
              for p in GATEWAY_PODS[:1] for r, n in routes.items()]
    expr = f"sum by ({ENVOY.L_CLUSTER}) ({client_route_clusters(prod, ENVOY.ROUTE_RQ_XX)})"
    test = {"interval": "1m", "input_series": series, "promql_expr_test": [{"expr": expr, "eval_time": "5m",
            "exp_samples": [{"labels": f'{{{ENVOY.L_CLUSTER}="{c}"}}', "value": v} for c, v in (
                ("assistant-fast__direct", 4), ("assistant__assistant-fast", 3), ("finance-8b__finance-8b-bf16", 3))]}]}
    _run_promtool_tests(prod, tmp_path, ("1m", [test]))


def test_an_aggregate_is_expected_down_only_when_every_variant_behind_it_is(prod: ObservabilityConfig) -> None:
    """finance-8b's variants both on l40s (on demand): nothing expected down. With l40s a capacity block, each
    variant's cluster and both of the workload's aggregates are, in the hours outside the block's window."""
    assert [r.labels for r in expected_down_records(prod)] == [{"envoy_cluster_name": "assistant-fast"},
                                                                {"envoy_cluster_name": "assistant-fast__direct"}]
    blocked = dataclasses.replace(prod, pools=tuple(dataclasses.replace(p, window=(3600, 7200))
                                                    if p.name == "l40s" else p for p in prod.pools))
    got = {r.labels["envoy_cluster_name"]: r.expr for r in expected_down_records(blocked)}
    assert set(got) == {"assistant-fast", "assistant-tools", "embed-rerank", "finance-8b", "finance-8b-bf16",
                        "finance-8b__finance-8b", "finance-8b__finance-8b-bf16", "assistant-fast__direct",
                        "finance-8b-bf16__direct"}
    warm = 3600 + CAPACITY_BLOCK_WARMUP_MINUTES * 60
    assert got["finance-8b__finance-8b"] == (
        f"vector(1) unless on () ((vector(time()) >= {warm} and vector(time()) < 7200))")


def test_model_latency_slos_are_records_only_where_the_engine_exports_the_latency(prod: ObservabilityConfig) -> None:
    """Issue 46 item 1: assistant-fast runs on Triton, whose OpenAI frontend exports no first-response histogram and
    whose TensorRT-LLM backend no per-token timing: it has no SLO record, so neither model SLO alert can be generated
    for it. Every other model's SLO is read at its own bucket edge (issue 44 item 9); vLLM's first tokens without the
    gateway's progress checks (issue 44 item 6: tests/artifacts/test_rules_progress_checks.py)."""
    ttft = {r.labels["model"]: r.expr for r in records(prod)[R.MODEL_TTFT_ABOVE_SLO]}
    itl = {r.labels["model"]: r.expr for r in records(prod)[R.MODEL_ITL_ABOVE_SLO]}
    others = {m.name for m in prod.models} - {"assistant-fast"}
    assert set(ttft) == set(itl) == set(r.labels["model"] for r in records(prod)[R.MODEL_SLO_REQUESTS]) == others
    total = 'sum by (model) (model:vllm_time_to_first_token_seconds_bucket:rate5m{model="deep-research", le="+Inf"})'
    assert ttft["deep-research"] == (
        f'({total} - sum by (model) (model:vllm_time_to_first_token_seconds_bucket:rate5m{{model="deep-research", '
        f'le=~"20(\\\\.0)?"}})) / clamp_min({total} - model:gateway_progress_checks:rate5m{{model="deep-research"}}, '
        '1e-9)')
    tools = itl["assistant-tools"]
    assert 'le="0.06"' in tools and "sglang_inter_token_latency_seconds_bucket" in tools


def test_the_gateways_pages_reach_the_pager_and_its_tickets_the_ticket_receivers(
        tmp_path: Path, synthesized: Callable[[str], Path]) -> None:
    """Each rule of the gateway's and the model SLOs' alerts, with the labels it fires with, routed by the real
    amtool through the Alertmanager config prod deploys: to the receivers prod names for its severity."""
    build = synthesized("prod")
    config, _ = shipped(build, tmp_path)
    routes = stack_raw("prod")["observability"]["alerting"]["routes"]
    rules = yaml.safe_load((build / "rules" / "aifactory.rules.yaml").read_text())
    fired = {(r["alert"], r["labels"]["severity"]) for g in rules["groups"] for r in g["rules"]
             if g["name"] in ("aifactory-gateway-alerts", "aifactory-model-slo-alerts")}
    assert {("GatewayModelUnavailable", "critical"), ("GatewayModelUnavailable", "warning"),
            ("GatewayServerErrorRatioHigh", "critical"), ("ModelTtftSloMissed", "warning"),
            ("ModelInterTokenSloMissed", "warning")} <= fired
    for alert, severity in sorted(fired):
        res = amtool("config", "routes", "test", f"--config.file={config}", f"severity={severity}",
                     f"alertname={alert}", "envoy_cluster_name=deep-research", "model=deep-research")
        assert res.returncode == 0, res.stderr
        assert res.stdout.strip() == ",".join(routes[severity]), (alert, severity)


def test_a_variants_requests_count_its_last_resorts_tries(prod: ObservabilityConfig, tmp_path: Path) -> None:
    """The variant panels' requests (and so spend) per variant count every try its replicas served: its own
    cluster's and its last resort's (`<variant>__last`, after every variant of the workload failed the try)."""
    pod = GATEWAY_PODS[0]
    series = [{"series": _sel(ENVOY.RQ_TOTAL, {**pod, ENVOY.L_CLUSTER: c}), "values": f"0+{_num(n)}x10"}
              for c, n in (("finance-8b-bf16", 60), ("finance-8b-bf16__last", 30), ("finance-8b-bf16__gate", 600))]
    test = {"interval": "1m", "input_series": series, "promql_expr_test": [{
        "expr": f'{R.VARIANT_REQUESTS}{{variant="finance-8b-bf16"}}', "eval_time": "5m",
        "exp_samples": [{"labels": f'{R.VARIANT_REQUESTS}{{variant="finance-8b-bf16", workload="finance-8b"}}',
                         "value": 1.5}]}]}
    _run_promtool_tests(prod, tmp_path, ("1m", [test]))


def test_a_model_on_an_ended_capacity_block_gets_a_ticket_from_its_end_on(prod: ObservabilityConfig,
                                                                          tmp_path: Path) -> None:
    """Issue 44 m2: once a capacity block's endTime has passed, KEDA's cron trigger (no year) would scale its model
    up again on the block's start date of every later year: CapacityBlockOver (warning) names the ScaledObject and the
    fix, as `aifactory preflight`'s capacity-block-over does. prod's block (h100-block, assistant-fast) ends at its
    endTime; here it ends two hours after the epoch, so promtool reaches it: nothing at 1h59m, firing from 2h01m."""
    [rule] = block_over_alerts(prod)
    end = int(datetime.datetime(2026, 12, 15, 11, 30, tzinfo=datetime.UTC).timestamp())  # its endTime, as written
    assert rule.expr == f"vector(time()) > {end}" and rule.labels == {"model": "assistant-fast", "pool": "h100-block"}
    cfg = dataclasses.replace(prod, pools=tuple(dataclasses.replace(p, window=(0, 3600), block_end=7200)
                                                if p.block_end else p for p in prod.pools))
    [alert] = block_over_alerts(cfg)
    annotations = alert.to_dict()["annotations"]
    assert annotations["description"] == (
        "The capacity block of pool h100-block ended (endTime, 7200 in UTC epoch seconds), but KEDA's cron trigger "
        "of ScaledObject/assistant/assistant-fast has no year: on the block's start date of every later year it asks "
        "for replicas of assistant-fast on a pool with no nodes, whose pods wait Pending and hold the tenant's GPU "
        "quota. Remove the block from the stack (nodePools.h100-block, and move or remove its models), or give "
        "nodePools.h100-block.capacity a renewed block's reservationId, startTime and endTime; then `pulumi up`.")
    fired = {"exp_labels": {"alertname": "CapacityBlockOver", "severity": "warning", "model": "assistant-fast",
                            "pool": "h100-block"}, "exp_annotations": annotations}
    test = {"interval": "1m", "input_series": [], "alert_rule_test": [
        {"alertname": "CapacityBlockOver", "eval_time": "119m", "exp_alerts": []},
        {"alertname": "CapacityBlockOver", "eval_time": "121m", "exp_alerts": [fired]}]}
    _run_promtool_tests(cfg, tmp_path, ("1m", [test]))
