"""Dashboards against a real Prometheus: synthetic exporter data with known answers is backfilled, the
recording rules are backfilled over it, and every panel's query (variables on All) must return exactly the
series and values panel_answers.py works out from the data (test_panel_known_answer; a panel without a known
answer fails test_every_panel_has_a_known_answer); the key numbers must equal the ground truth within 2%. Also
the Grafana 10-12 contract of every dashboard, and what synth writes."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

import dashboards
from dashboards.config import ObservabilityConfig
from dashboards.deploy import configmap_name
from dashboards.promql import expand
from dashboards.rules import records
from infra.artifacts import ArtifactContext
from infra.monitoring import from_platform
from infra.synth import load_stack, read_stack_config, run_program, stack_file
from infra.writers.dashboards import RULES_FILE, write_dashboards, write_rules
from tests.artifacts.panel_answers import ANSWERED_ELSEWHERE, answers
from tests.support.prometheus import PrometheusServer, backfill, backfill_rules
from tests.support.stacks import prod_without_variants
from tests.support.synthetic import Synthetic, generate

NODES = {"h100-block": 4, "h200": 2, "l40s": 1}  # prod's desired sizes
TOLERANCE = 0.02


@pytest.fixture(scope="module")
def prod() -> ObservabilityConfig:
    # prod's plain models: its finance workload's variant panels are checked with known answers in
    # tests/artifacts/test_variant_panels.py
    return from_platform(prod_without_variants())


@pytest.fixture(scope="module")
def data(prod: ObservabilityConfig) -> Synthetic:
    start = (int(time.time()) - 5 * 3600) // 3600 * 3600  # clear of the head block's last 3 hours
    return generate(prod, nodes=NODES, start=start, minutes=30, step=60)


@pytest.fixture(scope="module")
def prom(prod: ObservabilityConfig, data: Synthetic, tmp_path_factory: pytest.TempPathFactory
         ) -> Iterator[PrometheusServer]:
    work = tmp_path_factory.mktemp("prometheus")
    tsdb = work / "tsdb"
    backfill(data.openmetrics, tsdb, workdir=work)
    # Rules start 10 minutes in, so every 5-minute rate they take has a full window of raw data.
    backfill_rules(dashboards.prometheus_rules(prod), tsdb, workdir=work, start=data.start + 600, end=data.end,
                   interval_s=data.step)
    with PrometheusServer(work / "final", tsdb=tsdb) as server:
        yield server


def _panel(board: str, title: str, prod: ObservabilityConfig) -> list[str]:
    exprs = [e for t, e in dashboards.queries(dashboards.build(prod)[board]) if t == title]
    assert exprs, f"no panel {title!r} on {board}"
    return exprs


def _by(prom: PrometheusServer, expr: str, at: int, label: str) -> dict[str, float]:
    return {r["metric"].get(label, ""): float(r["value"][1]) for r in prom.query(expr, at)}


@pytest.mark.parametrize("board", list(dashboards.BOARDS))
def test_every_panel_query_returns_data(board: str, prod: ObservabilityConfig, prom: PrometheusServer,
                                        data: Synthetic) -> None:
    empty = [(title, expr) for title, expr in dashboards.queries(dashboards.build(prod)[board])
             if not prom.query(expr, data.end)]
    assert empty == []


def _samples(prom: PrometheusServer, expr: str, at: int) -> list[tuple[tuple[tuple[str, str], ...], float]]:
    return sorted((tuple(sorted((k, v) for k, v in r["metric"].items() if k != "__name__")), float(r["value"][1]))
                  for r in prom.query(expr, at))


@pytest.mark.parametrize("board", list(dashboards.BOARDS))
def test_recorded_panels_equal_their_raw_expressions(board: str, prod: ObservabilityConfig, prom: PrometheusServer,
                                                     data: Synthetic) -> None:
    """What the benchmark compares for speed answers the same: the recording rules change nothing."""
    recorded = records(prod)
    compared = 0
    for title, expr in dashboards.queries(dashboards.build(prod)[board]):
        if 'response_code=~"5.."' in expr:  # a regex on a kept label has no raw rewrite
            continue
        raw = expand(expr, recorded)
        if raw != expr:
            compared += 1
            fast, slow = _samples(prom, expr, data.end), _samples(prom, raw, data.end)
            assert [k for k, _ in fast] == [k for k, _ in slow], title
            assert [v for _, v in fast] == pytest.approx([v for _, v in slow], rel=1e-9), title
    assert compared > 0


def test_downstream_latency_is_the_gateway_listeners_only(prod: ObservabilityConfig, prom: PrometheusServer,
                                                            data: Synthetic) -> None:
    """Clients' requests take 50-1000 ms, uniformly (p95 = 50 + 0.95 x 950 = 952.5 ms, exact under linear
    interpolation in Envoy's 500-1000 ms bucket); the stats listener's probes and scrapes (1-2 ms, twice as
    frequent) are another connection manager's series and must not pull the gateway's p95 down."""
    [p95] = _panel("mesh", "Downstream latency p95", prod)
    assert prom.scalar(p95, data.end) == pytest.approx(952.5, rel=TOLERANCE)


def test_total_and_per_pool_spend_equal_nodes_times_config_prices(prod: ObservabilityConfig,
                                                                  prom: PrometheusServer, data: Synthetic) -> None:
    [total] = _panel("gpu-cost", "GPU spend", prod)
    assert prom.scalar(total, data.end) == pytest.approx(data.truth.total_cost_per_hour, rel=TOLERANCE)
    [per_pool] = _panel("gpu-cost", "GPU spend by pool", prod)
    assert _by(prom, per_pool, data.end, "pool") == pytest.approx(dict(data.truth.pool_cost_per_hour), rel=TOLERANCE)
    assert data.truth.total_cost_per_hour == pytest.approx(4 * 31.46 + 2 * 63.30 + 10.49)


def test_idle_gpu_cost_counts_allocated_idle_and_unallocated_gpus(prod: ObservabilityConfig,
                                                                  prom: PrometheusServer, data: Synthetic) -> None:
    """Idle is every GPU-hour not doing model work: GPUs a model holds but barely uses, and GPUs no pod holds
    (prod's desired sizes leave whole nodes free: tests.support.synthetic.allocate)."""
    unallocated = sum(data.truth.unallocated_cost_per_hour.values())
    assert data.truth.idle_cost_per_hour > 0 and unallocated > 0
    [idle] = _panel("gpu-cost", "Idle GPU cost", prod)
    assert prom.scalar(idle, data.end) == pytest.approx(data.truth.idle_cost_per_hour + unallocated, rel=TOLERANCE)
    [allocated] = _panel("gpu-cost", "Allocated idle GPU cost", prod)
    assert prom.scalar(allocated, data.end) == pytest.approx(data.truth.idle_cost_per_hour, rel=TOLERANCE)
    [free] = _panel("gpu-cost", "Unallocated GPU cost", prod)
    assert prom.scalar(free, data.end) == pytest.approx(unallocated, rel=TOLERANCE)


def test_spend_splits_into_working_allocated_idle_and_unallocated(prod: ObservabilityConfig,
                                                                  prom: PrometheusServer, data: Synthetic) -> None:
    total, working, allocated_idle, unallocated = _panel("gpu-cost", "Spend: total, working, idle", prod)
    got = {name: _by(prom, expr, data.end, "pool") for name, expr in (
        ("total", total), ("working", working), ("allocated_idle", allocated_idle), ("unallocated", unallocated))}
    assert got["total"] == pytest.approx(dict(data.truth.pool_cost_per_hour), rel=TOLERANCE)
    assert got["working"] == pytest.approx(dict(data.truth.working_cost_per_hour), rel=TOLERANCE)
    assert got["unallocated"] == pytest.approx(dict(data.truth.unallocated_cost_per_hour), rel=TOLERANCE)
    for pool, cost in data.truth.pool_cost_per_hour.items():  # every GPU-hour is in exactly one part
        parts = got["working"][pool] + got["allocated_idle"].get(pool, 0.0) + got["unallocated"][pool]
        assert parts == pytest.approx(cost, rel=1e-9), pool


def test_cost_per_million_generated_tokens_per_model(prod: ObservabilityConfig, prom: PrometheusServer,
                                                     data: Synthetic) -> None:
    """vLLM and SGLang count generated tokens (vllm:generation_tokens_total, sglang:generation_tokens_total);
    Triton's TensorRT-LLM backend observes each response's tokens in nv_llm_output_token_len, whose _sum counts
    them."""
    [expr] = _panel("gpu-cost", "Cost per 1M generated tokens", prod)
    got = _by(prom, expr, data.end, "model")
    assert got == pytest.approx(dict(data.truth.cost_per_million_tokens), rel=TOLERANCE)
    assert sorted(got) == sorted(m.name for m in prod.models)  # every engine's models alike
    assert {m.engine for m in prod.models} == {"vllm", "triton", "sglang"}


def test_no_panel_or_rule_reads_a_triton_first_response_histogram(prod: ObservabilityConfig) -> None:
    """Issue 46 item 1: Triton's OpenAI frontend (triton-inference-server/server@v2.71.0, r26.07,
    python/openai/openai_frontend/main.py) starts its server without `histogram_latencies`, so Triton core never
    creates nv_inference_first_response_histogram_ms (src/metric_model_reporter.cc): a Triton TTFT panel stays empty
    and an SLO alert on it never fires. Prod serves assistant-fast on Triton: no panel, record or alert reads it, and
    the Triton row has no time-to-first-token panel."""
    exprs = [e for d in dashboards.build(prod).values() for _, e in dashboards.queries(d)]
    rules = yaml.safe_dump(dashboards.prometheus_rules(prod))
    assert not [e for e in exprs if "first_response" in e] and "first_response" not in rules
    assert "Triton time to first token" not in {t for t, _ in dashboards.queries(dashboards.build(prod)["serving"])}
    assert "triton" in {m.engine for m in prod.models}


def test_nvlink_throughput_reads_the_gauge_in_bytes_per_second(prod: ObservabilityConfig, prom: PrometheusServer,
                                                               data: Synthetic) -> None:
    """DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL is the current throughput in 1000 KiB/s (exporter_facts): the panels
    show it times 1,024,000 in B/s; a rate() of it reads every fall as a counter reset."""
    doc = json.loads(dashboards.dashboard_json(dashboards.build(prod)["gpu-fleet"]))
    units = {p["title"]: p["fieldConfig"]["defaults"]["unit"] for p in _panels(doc)}
    assert units["NVLink throughput by pool"] == units["NVLink throughput per GPU"] == "Bps"
    [by_pool] = _panel("gpu-fleet", "NVLink throughput by pool", prod)
    got = _by(prom, by_pool, data.end, "pool")
    assert got == pytest.approx(dict(data.truth.nvlink_bytes_per_second), rel=TOLERANCE)
    assert max(got.values()) > 6e10
    node = "h100-block-node-000"
    board = dashboards.build(prod)["gpu-fleet"]
    [per_gpu] = [e for t, e in dashboards.queries(board, {"node": node}) if t == "NVLink throughput per GPU"]
    got_gpu = {r["metric"]["gpu"]: float(r["value"][1]) for r in prom.query(per_gpu, data.end)}
    want = {gpu: v for (n, gpu), v in data.truth.nvlink_gpu_bytes_per_second.items() if n == node}
    assert got_gpu == pytest.approx(want, rel=TOLERANCE)


def test_per_gpu_panels_read_one_recorded_selector_and_the_node_variable_has_all(prod: ObservabilityConfig) -> None:
    """Issue 46 item 3: the per-GPU panels ran two label_replace over an `or` of both host labels and a join to the
    node-pool series on every refresh (4-5x dcgm-exporter's dashboard 12239 per panel); the join is recorded once
    (dashboards.rules DCGM_PER_GPU) and each panel reads one selector. $node has All, as 12239's $Hostname."""
    doc = json.loads(dashboards.dashboard_json(dashboards.build(prod)["gpu-fleet"]))
    node = next(v for v in doc["templating"]["list"] if v["name"] == "node")
    assert (node["includeAll"], node["allValue"], node["multi"]) == (True, ".*", True)
    recorded = records(prod)
    per_gpu = [(t, e) for t, e in dashboards.queries(dashboards.build(prod)["gpu-fleet"]) if t.endswith("per GPU")]
    assert len(per_gpu) == 11
    for title, expr in per_gpu:
        name = expr.split("{")[0]
        assert name in recorded and expr.startswith(f'{name}{{node=~".*", pool=~".*"}}'), title
        assert "label_replace" not in expr and " on (" not in expr, title


def test_workflow_p95_per_workflow(prod: ObservabilityConfig, prom: PrometheusServer, data: Synthetic) -> None:
    p95 = next(e for e in _panel("compound-latency", "Workflow latency p50 / p95 / p99", prod)
               if 'quantile="0.95"' in e)
    assert _by(prom, p95, data.end, "workflow") == pytest.approx(dict(data.truth.workflow_p95), rel=TOLERANCE)


def test_critical_path_share_per_step_kind(prod: ObservabilityConfig, prom: PrometheusServer,
                                           data: Synthetic) -> None:
    [share] = _panel("compound-latency", "Critical-path share by step kind", prod)
    got = _by(prom, share, data.end, "step_kind")
    assert got == pytest.approx(dict(data.truth.critical_path_share), rel=TOLERANCE)
    assert sum(got.values()) == pytest.approx(1.0, rel=1e-6)


def test_one_workflow_selected_narrows_the_critical_path_panel(prod: ObservabilityConfig, prom: PrometheusServer,
                                                              data: Synthetic) -> None:
    board = dashboards.build(prod)["compound-latency"]
    [expr] = [e for t, e in dashboards.queries(board, {"workflow": "doc-search"})
              if t == "Critical-path seconds per workflow by step kind"]
    assert 'workflow=~"doc-search"' in expr
    got = _by(prom, expr, data.end, "step_kind")
    mean = (10.0 + 30.0) / 2  # doc-search runs are uniform on 10-30 s (tests.support.synthetic.WORKFLOW_SPANS)
    assert got == pytest.approx({k: mean * s for k, s in data.truth.critical_path_share.items()}, rel=TOLERANCE)


# --------------------------------------------------------------------------------------------
# the Grafana contract, without Prometheus


def _panels(doc: dict) -> list[dict]:
    return [p for p in doc["panels"] if p["type"] != "row"]


@pytest.mark.parametrize("board", list(dashboards.BOARDS))
def test_dashboard_sets_what_grafana_10_to_12_needs(board: str, prod: ObservabilityConfig) -> None:
    doc = json.loads(dashboards.dashboard_json(dashboards.build(prod)[board]))
    assert doc["uid"] == f"aifactory-{board}"
    assert doc["schemaVersion"] == 39
    assert doc["tags"][0] == "aifactory" and len(doc["tags"]) > 1
    assert doc["links"] == [{"asDropdown": True, "icon": "external link", "includeVars": False, "keepTime": True,
                             "tags": ["aifactory"], "targetBlank": False, "title": "aifactory dashboards",
                             "tooltip": "", "type": "dashboards", "url": ""}]
    first = doc["templating"]["list"][0]
    assert (first["name"], first["type"], first["query"]) == ("datasource", "datasource", "prometheus")
    for p in _panels(doc):
        assert p["description"], p["title"]
        assert p["fieldConfig"]["defaults"]["unit"], p["title"]
        assert p["datasource"]["uid"] in ("${datasource}", "${loki}"), p["title"]
        for t in p["targets"]:
            assert t["datasource"] == p["datasource"], p["title"]
    ids = [p["id"] for p in doc["panels"]]
    assert len(ids) == len(set(ids))


def _trace_links(cfg: ObservabilityConfig) -> list[str]:
    doc = json.loads(dashboards.dashboard_json(dashboards.build(cfg)["compound-latency"]))
    latency = next(p for p in doc["panels"] if p["title"] == "Workflow latency p50 / p95 / p99")
    assert all(v["name"] != "jaeger_url" for v in doc["templating"]["list"])
    return [link["url"] for link in latency["fieldConfig"]["defaults"]["links"]]


def test_compound_latency_links_traces_through_grafanas_jaeger_datasource(prod: ObservabilityConfig) -> None:
    """Issue 28 item 10: the links named `jaeger-query.monitoring.svc`, a Service the jaeger chart 4.x does not
    render and a name no browser resolves. They open Grafana's Explore on the provisioned Jaeger datasource
    (Explore URL state v1: grafana public/app/features/explore/hooks/useStateSync/migrators/v1.ts; Jaeger query
    model: public/app/plugins/datasource/jaeger/types.ts), which Grafana proxies to the chart's `jaeger` Service."""
    from urllib.parse import parse_qs, urlsplit

    from components.k8s.observability import kube_prometheus_stack_values
    from infra.synth import load_stack

    urls = _trace_links(prod)
    assert not any("svc" in u or "jaeger-query" in u for u in urls)
    panes = []
    for u in urls:
        parts = urlsplit(u)
        assert (parts.scheme, parts.netloc, parts.path) == ("", "", "/explore")
        q = parse_qs(parts.query)
        assert (q["schemaVersion"], q["orgId"]) == (["1"], ["1"])
        [pane] = json.loads(q["panes"][0]).values()
        panes.append(pane)
    provisioned = kube_prometheus_stack_values(load_stack("prod"))["grafana"]["additionalDataSources"]
    jaeger = next(d for d in provisioned if d["type"] == "jaeger")
    assert jaeger["url"] == "http://jaeger.monitoring.svc.cluster.local:16686"  # the chart's one Service
    want = {"refId": "A", "datasource": {"type": "jaeger", "uid": jaeger["uid"]}, "queryType": "search",
            "service": "${trace_service}", "operation": "invoke_workflow ${__field.labels.workflow}",
            "tags": "gen_ai.workflow.name=${__field.labels.workflow}"}
    assert panes[0] == {"datasource": jaeger["uid"], "queries": [want],
                        "range": {"from": "${__from}", "to": "${__to}"}}
    assert panes[1]["queries"] == [{**want, "minDuration": "${__value.raw}s"}]


def test_compound_latency_links_to_a_configured_jaeger_ui(prod: ObservabilityConfig) -> None:
    import dataclasses

    urls = _trace_links(dataclasses.replace(prod, jaeger_url="https://jaeger.example.com/"))
    assert urls[0] == ("https://jaeger.example.com/search?service=${trace_service}&operation=invoke_workflow%20"
                       "${__field.labels.workflow}&tags={%22gen_ai.workflow.name%22%3A%22${__field.labels.workflow}"
                       "%22}&start=${__from}000&end=${__to}000")
    assert urls[1] == urls[0] + "&minDuration=${__value.raw}s"


def test_compound_latency_has_a_request_id_logs_panel(prod: ObservabilityConfig) -> None:
    doc = json.loads(dashboards.dashboard_json(dashboards.build(prod)["compound-latency"]))
    logs = next(p for p in doc["panels"] if p["type"] == "logs")
    assert logs["targets"][0]["expr"] == ('{namespace=~"aifactory-gateway|assistant|finance|research|search"} '
                                          '|= "$request_id"')
    assert logs["datasource"] == {"type": "loki", "uid": "${loki}"}


def test_queries_substitute_variables_and_grafana_builtins(prod: ObservabilityConfig) -> None:
    board = dashboards.build(prod)["mesh"]
    got = dict(dashboards.queries(board, {"cluster": "chat|embed"}))
    assert got["Downstream latency p95"] == (
        'histogram_quantile(0.95, sum by (le) (rate(envoy_http_downstream_rq_time_bucket'
        '{envoy_http_conn_manager_prefix="gateway"}[5m])))')
    assert got["Retries"] == 'cluster:envoy_cluster_upstream_rq_retry:rate5m{envoy_cluster_name=~"chat|embed"}'


def test_synth_writers_are_deterministic_and_match_the_shipped_objects(prod: ObservabilityConfig,
                                                                       tmp_path: Path) -> None:
    outs = []
    for run in ("a", "b"):
        # the dashboards writer copies the program's ConfigMaps
        ctx = ArtifactContext(result=run_program("prod", read_stack_config(stack_file("prod"))), out=tmp_path / run)
        written = write_dashboards(ctx) + write_rules(ctx)
        outs.append({p.relative_to(ctx.out).as_posix(): p.read_bytes() for p in written})
    assert outs[0] == outs[1]
    assert sorted(outs[0]) == sorted([f"dashboards/{k}.json" for k in dashboards.BOARDS] + [f"rules/{RULES_FILE}"])
    shipped = from_platform(load_stack("prod"))  # the stack as shipped, its finance variants included
    assert yaml.safe_load(outs[0][f"rules/{RULES_FILE}"]) == dashboards.prometheus_rules(shipped)
    assert configmap_name("gpu-cost") == "aifactory-dashboard-gpu-cost"


def test_variant_decisions_per_workload_variant_and_reason(prod: ObservabilityConfig, prom: PrometheusServer,
                                                           data: Synthetic) -> None:
    """Route stats <workload>__<variant>__<reason> split into labels and summed over gateway replicas; plain
    model routes (no decision) are left out."""
    [decisions] = _panel("compound-latency", "Requests per workload by variant and reason", prod)
    got = {(r["metric"]["workload"], r["metric"]["variant"], r["metric"]["reason"]): float(r["value"][1])
           for r in prom.query(decisions, data.end)}
    assert got == pytest.approx(dict(data.truth.route_decisions), rel=TOLERANCE)
    [overflow] = _panel("compound-latency", "Overflow to another variant", prod)
    got = {(r["metric"]["workload"], r["metric"]["variant"], r["metric"]["reason"]): float(r["value"][1])
           for r in prom.query(overflow, data.end)}
    assert got == pytest.approx(dict(data.truth.route_overflow), rel=TOLERANCE)


# --- every panel's known answer (tests/artifacts/panel_answers.py) ------------------------------------------------

PROD_ANSWERS = answers(from_platform(prod_without_variants()), NODES)


@pytest.mark.parametrize(("board", "title"), sorted(PROD_ANSWERS), ids=lambda x: x)
def test_panel_known_answer(board: str, title: str, prod: ObservabilityConfig, prom: PrometheusServer,
                            data: Synthetic) -> None:
    """Each query of the panel (variables on All) returns exactly the series and values worked out from the
    synthetic data in panel_answers.py."""
    exprs = _panel(board, title, prod)
    want = PROD_ANSWERS[(board, title)]
    assert len(exprs) == len(want), f"{len(exprs)} queries, {len(want)} known answers"
    for expr, answer in zip(exprs, want, strict=True):
        rows = prom.query(expr, data.end)
        got = {tuple(r["metric"].get(label, "") for label in answer.by): float(r["value"][1]) for r in rows}
        assert len(got) == len(rows), f"{expr}: series not told apart by {answer.by}"
        assert got == pytest.approx(dict(answer.values), rel=1e-6, abs=1e-9), expr


def test_every_panel_has_a_known_answer(prod: ObservabilityConfig) -> None:
    """Every panel of every dashboard (prod: every board and row) has a known answer: in panel_answers.ANSWERS, or
    named in panel_answers.ANSWERED_ELSEWHERE with the test that asserts it. A panel added without one fails here."""
    panels = {(board, title) for board, d in dashboards.build(prod).items() for title, _ in dashboards.queries(d)}
    assert sorted(panels - set(PROD_ANSWERS) - set(ANSWERED_ELSEWHERE)) == []
    assert sorted(set(PROD_ANSWERS) - panels) == []  # no answer for a panel that is gone
    root = Path(__file__).resolve().parents[2]
    for panel, where in ANSWERED_ELSEWHERE.items():
        path, _, function = where.partition("::")
        assert f"def {function}(" in (root / path).read_text(), (panel, where)
