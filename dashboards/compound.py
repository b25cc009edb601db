"""Compound latency: what users feel (workflow end to end), where the time goes, and each hop under it."""

from __future__ import annotations

import json
from urllib.parse import quote

from grafanalib.core import Dashboard

from dashboards.config import ObservabilityConfig
from dashboards.engines import ENGINE_RULES
from dashboards.gateway_alerts import failed_answers
from dashboards.panels import (
    Link,
    Q,
    custom_variable,
    dashboard,
    datasource_variable,
    logs,
    query_variable,
    textbox_variable,
    timeseries,
)
from dashboards.rules import R
from telemetry.names import (
    ENVOY,
    FIDELITY_DROP_BOUND,
    FIDELITY_SCORE,
    L_VARIANT,
    L_WORKLOAD,
    WORKFLOW_DURATION,
)

__all__ = ["UID", "build"]

UID = "aifactory-compound-latency"
WF = 'workflow=~"$workflow", tenant=~"$tenant"'
MODEL = 'model=~"$model"'


TRACE_OPERATION = "invoke_workflow ${__field.labels.workflow}"  # the workflow's root span (telemetry.instrument)
TRACE_TAGS = "gen_ai.workflow.name=${__field.labels.workflow}"  # logfmt, as the Jaeger datasource's `tags` field


def _explore_url(cfg: ObservabilityConfig, *, slowest: bool) -> str:
    """Grafana Explore on the Jaeger datasource, searching the clicked workflow's traces over the panel's range.

    Explore's URL state is `schemaVersion=1&panes={<pane id>: {datasource, queries, range}}`, range strings
    (grafana public/app/features/explore/hooks/useStateSync/migrators/v1.ts); a Jaeger query is
    {queryType: "search", service, operation, tags (logfmt), minDuration} (grafana
    public/app/plugins/datasource/jaeger/types.ts JaegerQuery).
    Grafana interpolates the `${...}` variables of a data link before the browser follows it, so they stay
    unescaped."""
    uid = cfg.jaeger_datasource_uid
    query = {"refId": "A", "datasource": {"type": "jaeger", "uid": uid}, "queryType": "search",
             "service": "${trace_service}", "operation": TRACE_OPERATION, "tags": TRACE_TAGS,
             **({"minDuration": "${__value.raw}s"} if slowest else {})}
    panes = {"trc": {"datasource": uid, "queries": [query], "range": {"from": "${__from}", "to": "${__to}"}}}
    return "/explore?schemaVersion=1&orgId=1&panes=" + quote(json.dumps(panes, separators=(",", ":")), safe="${}_.")


def _jaeger_ui_url(base: str, *, slowest: bool) -> str:
    """The Jaeger UI's own search page at `base` (a URL browsers reach)."""
    tags = quote('{"gen_ai.workflow.name":"${__field.labels.workflow}"}', safe="${}._")
    search = (f"{base.rstrip('/')}/search?service=${{trace_service}}&operation="
              + quote(TRACE_OPERATION, safe="${}._") + "&tags=" + tags + "&start=${__from}000&end=${__to}000")
    return search + ("&minDuration=${__value.raw}s" if slowest else "")


def _jaeger_links(cfg: ObservabilityConfig) -> list[Link]:
    """Trace links of the workflow latency panel: Grafana's Explore on the Jaeger datasource (default), or the
    Jaeger UI at `cfg.jaeger_url`. Never a cluster DNS name: the browser, not Grafana, follows the link."""
    def url(slowest: bool) -> str:
        return (_explore_url(cfg, slowest=slowest) if cfg.jaeger_url is None
                else _jaeger_ui_url(cfg.jaeger_url, slowest=slowest))

    return [Link("Traces of this workflow (Jaeger)", url(False)),
            Link("Slowest traces of this workflow (Jaeger)", url(True))]


def _quantiles(record: str, selector: str, legend: str) -> list[Q]:
    return [Q(f'{record}{{quantile="{q}", {selector}}}', f"{legend} p{q[2:].ljust(2, '0')}")
            for q in ("0.5", "0.95", "0.99")]


def _workflows(cfg: ObservabilityConfig) -> list:
    targets = ", ".join(f"{o.workflow or 'others'} {o.latency_seconds:g}s @ {o.latency_target:.2%}"
                        for o in cfg.objectives)
    return [
        timeseries("Workflow latency p50 / p95 / p99",
                   "End-to-end wall time of agent workflows (tasks), from the kit's workflow duration histogram. "
                   "Click a series for its traces in Jaeger.", "s",
                   *_quantiles(R.WF_QUANTILE, WF, "{{workflow}}"), links=_jaeger_links(cfg)),
        timeseries("Workflows completed per second by status",
                   "Finished workflows per second, ok or error.", "reqps",
                   Q(f"sum by (workflow, status) ({R.WF_COUNT}{{{WF}}})", "{{workflow}} {{status}}")),
        timeseries("Latency SLO compliance (24h)",
                   f"Share of workflows finishing under their latency threshold over the last day. Objectives: "
                   f"{targets}. Thresholds between histogram buckets count against the next lower bucket.",
                   "percentunit", Q(f"1 - {R.slo_errors('latency', '1d')}{{{WF}}}", "{{workflow}}")),
        timeseries("Workflow error ratio",
                   "Share of workflows that ended in error (5-minute rate); the availability SLI.", "percentunit",
                   Q(f"{R.slo_errors('availability', '5m')}{{{WF}}}", "{{workflow}}")),
    ]


def _critical_path() -> list:
    return [
        timeseries("Critical-path share by step kind",
                   "Share of workflow wall time each step kind is responsible for (LLM, tool, retrieval, "
                   "planning, network, other); overlapping parallel steps split the overlap, so kinds sum to 100%.",
                   "percentunit",
                   Q(f"sum by (step_kind) ({R.CRITICAL_PATH}{{{WF}}}) / ignoring (step_kind) group_left "
                     f"sum({R.WF_SUM}{{{WF}}})", "{{step_kind}}"), stacked=True),
        timeseries("Critical-path seconds per workflow by step kind",
                   "Mean seconds of each workflow spent on the critical path in each step kind.", "s",
                   Q(f"sum by (step_kind) ({R.CRITICAL_PATH}{{{WF}}}) / ignoring (step_kind) group_left "
                     f"sum({R.WF_COUNT}{{{WF}}})", "{{step_kind}}"), stacked=True),
        timeseries("Step latency p95 by kind",
                   "95th percentile duration of single steps, whether or not they were on the critical path.",
                   "s", Q(f"histogram_quantile(0.95, sum by (step_kind, le) ({R.STEP_BUCKET}{{{WF}}}))",
                          "{{step_kind}}")),
        timeseries("Step errors by kind",
                   "Failed steps per second by step kind and error type.", "reqps",
                   Q(f"sum by (step_kind, error_type) ({R.STEP_ERRORS}{{{WF}}})", "{{step_kind}} {{error_type}}")),
    ]


def _models() -> list:
    """Each engine's latency panels (dashboards.engines)."""
    return [p for e in ENGINE_RULES.values() for p in e.compound_panels()]


def _hops(cfg: ObservabilityConfig) -> list:
    return [
        timeseries("Gateway upstream latency p95 (Envoy)",
                   "Time from the gateway to a model backend and back, per Envoy cluster.", "ms",
                   Q(f'{R.ENVOY_QUANTILE}{{quantile="0.95"}}', "{{envoy_cluster_name}}")),
        timeseries("Mesh hop latency p95 (Istio)",
                   "Server-side request duration of each source -> destination hop in the mesh.", "ms",
                   Q(f'{R.ISTIO_QUANTILE}{{quantile="0.95"}}', "{{source_workload}} -> {{destination_workload}}")),
        timeseries("Gateway 5xx ratio", "Share of requests answered 5xx, per Envoy cluster: the answers' 5xx and "
                                        "the requests that failed on two replicas (452 at the cluster, 500 to the "
                                        "client).",
                   "percentunit",
                   Q(f"({failed_answers(cfg)} or "
                     f"sum by (envoy_cluster_name) ({R.ENVOY_REQUESTS}) * 0) / "
                     f"sum by (envoy_cluster_name) ({R.ENVOY_REQUESTS})", "{{envoy_cluster_name}}")),
        timeseries("Mesh 5xx ratio", "Share of requests answered 5xx, per destination workload.", "percentunit",
                   Q(f'(sum by (destination_workload) ({R.ISTIO_REQUESTS}{{response_code=~"5.."}}) or '
                     f"sum by (destination_workload) ({R.ISTIO_REQUESTS}) * 0) / "
                     f"sum by (destination_workload) ({R.ISTIO_REQUESTS})", "{{destination_workload}}")),
    ]


def _variants(cfg: ObservabilityConfig) -> list:
    return [
        timeseries("Requests per workload by variant and reason",
                   "Requests the gateway routed to each variant of a workload, by why: fits-budget (the cheapest "
                   "variant whose expected latency fits the caller's remaining budget), rescued (nothing fits: the "
                   "fastest), default (no budget: the workload's policy).", "reqps",
                   Q(R.ROUTE_DECISIONS, "{{workload}} {{variant}} {{reason}}"), stacked=True),
        timeseries("Overflow to another variant",
                   "Tries the gateway sent on to the next variant because the chosen one failed them (503 from a "
                   "saturated engine, reset, timeout), by the decision that chose it.", "reqps",
                   Q(R.ROUTE_OVERFLOW, "{{workload}} from {{variant}} ({{reason}})")),
        timeseries("Budget left at step start",
                   "Latency budget the workflow had left when its steps started, by step kind: the median, and the "
                   "tightest tenth (p10). Workflows with a deadline only (telemetry workflow(budget_s=...)).", "s",
                   *(Q(f"histogram_quantile({q}, sum by (step_kind, le) ({R.STEP_BUDGET_BUCKET}{{{WF}}}))",
                       f"{{{{step_kind}}}} p{p}") for q, p in (("0.5", "50"), ("0.1", "10")))),
        timeseries("Deadline misses",
                   "Share of workflows with a deadline that ended after it (5-minute rate), per workflow.",
                   "percentunit",
                   Q(f'(sum by (workflow) ({R.WF_DEADLINES}{{deadline="missed", {WF}}}) or '
                     f"sum by (workflow) ({R.WF_DEADLINES}{{{WF}}}) * 0) / "
                     f"sum by (workflow) ({R.WF_DEADLINES}{{{WF}}})",
                     "{{workflow}}")),
        *(_variant_spend() if cfg.variants else []),
    ]


def _variant_spend() -> list:
    return [
        timeseries("Spend vs all-fastest",
                   "What the requests the gateway sent to each workload's variants cost ($/hour: each variant's "
                   "served tries times its cost per request from the stack config), against the same requests all "
                   "sent to the workload's fastest variant.", "currencyUSD",
                   Q(f"{R.VARIANT_SPEND} * 3600", "{{workload}} spent"),
                   Q(f"{R.VARIANT_SPEND_ALL_FASTEST} * 3600", "{{workload}} all fastest")),
        timeseries("Saving vs all-fastest",
                   "Share of the all-fastest spend the variant routing saved, per workload.", "percentunit",
                   Q(f"1 - {R.VARIANT_SPEND} / {R.VARIANT_SPEND_ALL_FASTEST}", "{{workload}}")),
    ]


def _trilemma(cfg: ObservabilityConfig) -> list:
    """Each variant's latency, cost and fidelity side by side (docs/fidelity.md)."""
    names = "|".join(v.model for v in cfg.variants)
    workloads = "|".join(sorted({v.workload for v in cfg.variants}))
    cost = " or ".join(f'label_replace(label_replace(vector({v.cost_per_request!r}), "variant", "{v.model}", "", ""), '
                       f'"workload", "{v.workload}", "", "")' for v in cfg.variants)
    return [
        timeseries("Latency p95 by variant",
                   "95th percentile of the time each variant takes to answer the gateway (Envoy's upstream request "
                   "time of the variant's cluster), 5-minute window.", "ms",
                   Q(f"histogram_quantile(0.95, sum by ({ENVOY.L_CLUSTER}, le) (rate({ENVOY.RQ_TIME}_bucket"
                     f'{{{ENVOY.L_CLUSTER}=~"{names}"}}[5m])))', f"{{{{{ENVOY.L_CLUSTER}}}}}"), width=8),
        timeseries("Cost per request by variant",
                   "The variant's configured cost per request (its costPerRequest, or its pool's GPU price x GPUs "
                   "over its throughput).", "currencyUSD", Q(cost, "{{workload}} {{variant}}"), width=8),
        timeseries("Fidelity by variant (last evaluation)",
                   "Share of the workload's suite each variant answered right in its last evaluation (`aifactory "
                   "eval --otlp-endpoint`, the evaluation Job), and the upper end of its drop against the baseline "
                   "(95%); the gate passes a variant whose drop bound is at most maxDrop.", "percentunit",
                   Q(f"max by ({L_WORKLOAD}, {L_VARIANT}) (last_over_time({FIDELITY_SCORE.prom}"
                     f'{{{L_WORKLOAD}=~"{workloads}"}}[30d]))', "{{workload}} {{variant}} score"),
                   Q(f"max by ({L_WORKLOAD}, {L_VARIANT}) (last_over_time({FIDELITY_DROP_BOUND.prom}"
                     f'{{{L_WORKLOAD}=~"{workloads}"}}[30d]))', "{{workload}} {{variant}} drop bound"), width=8),
    ]


def build(cfg: ObservabilityConfig) -> Dashboard:
    namespaces = "|".join(cfg.log_namespaces)
    return dashboard(
        uid=UID, title="aifactory / Compound latency",
        description="End-to-end latency of agent workflows, where it goes by step kind, and each hop below it.",
        tags=["latency", "slo"],
        variables=[
            custom_variable("tenant", "Tenant", cfg.tenants),
            query_variable("workflow", "Workflow",
                           f'label_values({WORKFLOW_DURATION.prom}_count{{tenant=~"$tenant"}}, workflow)'),
            custom_variable("model", "Model", [m.name for m in cfg.models]),
            datasource_variable("loki", "loki", "Loki"),
            textbox_variable("request_id", "Request id (logs)", ""),
            textbox_variable("trace_service", "Agent service (traces)", ""),
        ],
        rows=[
            ("Workflows, end to end", _workflows(cfg)),
            ("Where the time goes (critical path)", _critical_path()),
            ("Models", _models()),
            ("Gateway and mesh hops", _hops(cfg)),
            ("Variant routing (gateway)", _variants(cfg)),
            *([("Latency, cost and fidelity per variant", _trilemma(cfg))] if cfg.variants else []),
            ("Logs", [logs("Logs for request id",
                           "Log lines in tenant and gateway namespaces that contain the request id typed above "
                           "(x-request-id, propagated by the gateway and the mesh).",
                           f'{{namespace=~"{namespaces}"}} |= "$request_id"')]),
        ],
    )
