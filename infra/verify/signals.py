"""The signals of the requests: the trace in Jaeger, the access-log lines in Loki, the series in Prometheus
(gateway, engine, sidecar, KEDA's query, DCGM per GPU node), and Alertmanager's Watchdog; each a check retried
until the wait runs out."""

from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from components.k8s.engines import ENGINES
from components.k8s.gateway.envoy.config import SERVICE_NAME as GATEWAY_SERVICE_NAME
from components.k8s.settings import Model
from infra.config import PlatformConfig
from infra.verify.endpoints import Endpoints, Unreachable, http_get, shorten, unresolved_cause
from infra.verify.gateway import Sent
from infra.verify.report import Hop, Progress, progress_line
from telemetry.names import DCGM, ENVOY, ISTIO, KSM, TRITON

__all__ = [
    "WATCHDOG",
    "POOL_LABEL_KSM",
    "MODEL_LABEL",
    "Check",
    "PROGRESS_SECONDS",
    "trace_check",
    "logs_check",
    "metric_checks",
    "gpu_check",
    "watchdog_check",
    "await_hops",
]


WATCHDOG = "Watchdog"  # kube-prometheus-stack's always-firing alert (its general.rules)

POOL_LABEL_KSM = "label_aifactory_io_pool"  # kube-state-metrics' name of the nodes' aifactory.io/pool label

MODEL_LABEL = TRITON.L_POD_MODEL  # the pod's aifactory.io/model label on the model's scraped series

PROGRESS_SECONDS = 30.0  # how often the wait names the hops still broken and their last answer

@dataclass(frozen=True, slots=True)
class Check:
    """One signal hop, asked until it passes: its row's hop and model, the endpoint it asks (an Endpoints field),
    what it waits for (in words, for the progress lines) and the question itself."""

    hop: str
    model: str
    endpoint: str
    waits_for: str
    ask: Callable[[], Hop]

    def __call__(self) -> Hop:
        return self.ask()




def _prom_query(endpoints: Endpoints, expr: str, *, timeout: float) -> list[dict[str, Any]]:
    url = f"{endpoints.prometheus.rstrip('/')}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    ans = http_get(endpoints, url, timeout=timeout)
    doc = ans.json()
    if ans.status != 200 or not isinstance(doc, dict) or doc.get("status") != "success":
        raise Unreachable(f"Prometheus answered {ans.status}: {shorten(ans.body)}")
    result = doc["data"]["result"]
    return result if isinstance(result, list) else []


def trace_check(endpoints: Endpoints, sent: Sent, *, timeout: float) -> Check:
    model = sent.model

    def check() -> Hop:
        url = f"{endpoints.jaeger.rstrip('/')}/api/traces/{sent.trace_id}"
        try:
            ans = http_get(endpoints, url, timeout=timeout)
        except Unreachable as err:
            return Hop("trace", model.name, False, f"no answer from Jaeger at {endpoints.jaeger}: {err}",
                       "Jaeger's query service is down or --jaeger-url is wrong")
        doc = ans.json()
        traces = (doc or {}).get("data") or [] if isinstance(doc, dict) else []
        if ans.status == 404 or not traces:
            return Hop("trace", model.name, False, f"no trace {sent.trace_id} in Jaeger ({ans.status})",
                       "the gateway's spans do not reach Jaeger: the gateway's otel_collector cluster cannot reach "
                       "the Collector, or the Collector's otlp/jaeger exporter fails (TelemetryExportFailing); not "
                       "the Collector's probabilistic_sampler, which keeps verify's trace id at any ratio")
        trace = traces[0]
        services = {pid: p.get("serviceName", "") for pid, p in (trace.get("processes") or {}).items()}
        spans = trace.get("spans") or []
        gateway = {s["spanID"] for s in spans if services.get(s.get("processID")) == GATEWAY_SERVICE_NAME}
        engine = [s for s in spans if services.get(s.get("processID")) == model.name]
        parents = {s.get("spanID"): [r.get("spanID") for r in s.get("references") or []] for s in spans}
        under = [s for s in engine if _descends(s.get("spanID"), gateway, parents)]
        saw = f"{len(spans)} span(s) of {', '.join(sorted(set(services.values()))) or 'no service'}"
        if not gateway:
            return Hop("trace", model.name, False, saw, f"no span of service {GATEWAY_SERVICE_NAME}: the trace "
                       "holds other services' spans only; the gateway's tracer is not exporting")
        if not ENGINES[model.engine].exports_spans:
            return Hop("trace", model.name, True, saw + f"; {model.engine} exports no engine spans")
        if not under:
            return Hop("trace", model.name, False, saw,
                       f"no span of service {model.name} under the gateway's span: the engine does not export "
                       "traces (--otlp-traces-endpoint, its OTEL_* environment, the image's OpenTelemetry SDK) "
                       "or does not continue the gateway's traceparent")
        return Hop("trace", model.name, True, saw + f"; {model.name} under {GATEWAY_SERVICE_NAME}")
    return Check("trace", model.name, "jaeger", f"trace {sent.trace_id} in Jaeger ({endpoints.jaeger})", check)


def _descends(span_id: str | None, ancestors: set[str], parents: dict[str | None, list[str | None]]) -> bool:
    """Whether a span has one of `ancestors` above it in the trace: on a cluster the Istio sidecars' spans (the
    gateway pod's outbound, the model pod's inbound) sit between the gateway's span and the engine's."""
    seen: set[str | None] = set()
    todo = list(parents.get(span_id, []))
    while todo:
        up = todo.pop()
        if up in ancestors:
            return True
        if up not in seen:
            seen.add(up)
            todo += parents.get(up, [])
    return False


def _loki_lines(endpoints: Endpoints, query: str, *, since: float, timeout: float) -> list[tuple[dict[str, str], str]]:
    params = {"query": query, "start": str(int(since * 1e9)), "end": str(int((time.time() + 60) * 1e9)),
              "limit": "100", "direction": "backward"}
    ans = http_get(endpoints, f"{endpoints.loki.rstrip('/')}/loki/api/v1/query_range?" + urllib.parse.urlencode(params),
               timeout=timeout)
    doc = ans.json()
    if ans.status != 200 or not isinstance(doc, dict) or doc.get("status") != "success":
        raise Unreachable(f"Loki answered {ans.status}: {shorten(ans.body)}")
    return [(s.get("stream") or {}, v[1]) for s in doc["data"]["result"] for v in s.get("values") or []]


def logs_check(endpoints: Endpoints, cfg: PlatformConfig, sent: Sent, since: float, *, timeout: float) -> Check:
    model = sent.model
    gw_ns, model_ns = cfg.gateway.namespace, cfg.tenant_of(model).namespace

    def check() -> Hop:
        try:
            gateway = _loki_lines(endpoints, f'{{namespace="{gw_ns}"}} |= "{sent.trace_id}"', since=since,
                                  timeout=timeout)
            request_id = sent.request_id
            for _, line in gateway:
                try:
                    request_id = json.loads(line[line.index("{"):]).get("request_id") or request_id
                    break
                except ValueError:
                    continue
            lines = _loki_lines(endpoints, f'{{namespace=~"{gw_ns}|{model_ns}"}} |= "{request_id}"', since=since,
                                timeout=timeout) if gateway else []
        except Unreachable as err:
            return Hop("logs", model.name, False, f"no answer from Loki at {endpoints.loki}: {err}",
                       "Loki's gateway is down or --loki-url is wrong")
        if not gateway:
            return Hop("logs", model.name, False, f"no line of namespace {gw_ns} with trace id {sent.trace_id}",
                       "the gateway's access log does not reach Loki: Alloy is not running on the gateway's nodes "
                       "or cannot push (LogShippingDropping), or Loki refuses writes (LokiRequestsFailing)")
        by_ns: dict[str, int] = {}
        for labels, _ in lines:
            ns = labels.get("namespace", "?")
            by_ns[ns] = by_ns.get(ns, 0) + 1
        counts = ", ".join(f"{ns} {n}" for ns, n in sorted(by_ns.items())) or "none"
        return Hop("logs", model.name, True, f"request {request_id}: lines by namespace: {counts}")
    return Check("logs", model.name, "loki",
                 f"the gateway's log line with trace id {sent.trace_id} in Loki ({endpoints.loki})", check)


def metric_checks(endpoints: Endpoints, cfg: PlatformConfig, model: Model, *, timeout: float) -> list[Check]:
    from components.k8s.serving import scaling_query, workload_name

    ns = cfg.tenant_of(model).namespace
    sel = f'namespace="{ns}", {MODEL_LABEL}="{model.name}"'
    engine_names = f"{re.escape(ENGINES[model.engine].metric_prefix)}.+"
    probes = [
        ("gateway", f'sum({ENVOY.RQ_TOTAL}{{{ENVOY.L_CLUSTER}="{model.name}"}})',
         "Prometheus does not scrape the gateway's stats port (its ServiceMonitor, the stats listener)"),
        ("engine", f'count({{__name__=~"{engine_names}", {sel}}})',
         "Prometheus does not scrape the engine (the model's ServiceMonitor over mTLS, the engine's metrics port)"),
        ("sidecar", f'sum({ISTIO.REQUESTS}{{reporter="destination", destination_workload_namespace="{ns}", '
                    f'destination_workload="{workload_name(model)}"}})',
         "the model's Istio sidecar is not scraped (the istio-sidecars PodMonitor, port 15090) or has no sidecar"),
    ]

    def probe(what: str, expr: str, cause: str) -> Check:
        def check() -> Hop:
            try:
                result = _prom_query(endpoints, expr, timeout=timeout)
            except Unreachable as err:
                return Hop(f"metrics:{what}", model.name, False, f"no answer from Prometheus: {err}",
                           "Prometheus is down or --prometheus-url is wrong")
            if not result:
                return Hop(f"metrics:{what}", model.name, False, f"no data for {expr}", cause)
            return Hop(f"metrics:{what}", model.name, True, f"{expr} = {result[0]['value'][1]}")
        return Check(f"metrics:{what}", model.name, "prometheus",
                     f"data for {expr} in Prometheus ({endpoints.prometheus})", check)

    checks = [probe(*p) for p in probes]
    if model.replicas.autoscaled:
        query, _, threshold = scaling_query(cfg, model)
        checks.append(probe("autoscaling", query,
                            "KEDA's query has no data, so KEDA reads 0 (ignoreNullValues) and never scales the model "
                            f"up (threshold {threshold}): the engine's queue metric is missing or renamed"))
    return checks


def gpu_check(endpoints: Endpoints, cfg: PlatformConfig, *, timeout: float) -> Check | None:
    pools = sorted(p.name for p in cfg.gpu_pools)
    if not pools:
        return None
    expected = sum(p.min_size for p in cfg.gpu_pools)  # nodes that exist whatever the autoscaler does
    nodes_q = f'max by (node) ({KSM.NODE_LABELS}{{{POOL_LABEL_KSM}=~"{"|".join(pools)}"}})'
    dcgm_q = (f'count by (node) (label_replace(label_replace({DCGM.GPU_UTIL}, "node", "$1", "Hostname", "(.+)"), '
              f'"node", "$1", "hostname", "(.+)"))')

    def check() -> Hop:
        try:
            nodes = {r["metric"].get("node", "") for r in _prom_query(endpoints, nodes_q, timeout=timeout)}
            dcgm = {r["metric"].get("node", "") for r in _prom_query(endpoints, dcgm_q, timeout=timeout)}
        except Unreachable as err:
            return Hop("gpu-metrics", "", False, f"no answer from Prometheus: {err}",
                       "Prometheus is down or --prometheus-url is wrong")
        missing = sorted(nodes - dcgm)
        saw = f"{len(nodes)} GPU node(s) of pools {', '.join(pools)}; DCGM series on {len(nodes & dcgm)}"
        if len(nodes) < expected:
            return Hop("gpu-metrics", "", False, saw + f", fewer than the pools' minimum size ({expected})",
                       "kube-state-metrics is not scraped or does not export the nodes' aifactory.io/pool label "
                       "(metricLabelsAllowlist), or the GPU nodes have not joined")
        if missing:
            return Hop("gpu-metrics", "", False, saw + f"; none from {', '.join(missing)}",
                       "the DCGM exporter is not running or not scraped on those nodes (GPU operator "
                       "dcgmExporter, its ServiceMonitor, the node's GPU driver)")
        return Hop("gpu-metrics", "", True, saw)
    return Check("gpu-metrics", "", "prometheus", f"DCGM series from every node of pool(s) {', '.join(pools)} in "
                                                  f"Prometheus ({endpoints.prometheus})", check)


def watchdog_check(endpoints: Endpoints, *, timeout: float) -> Check:
    def check() -> Hop:
        url = (f"{endpoints.alertmanager.rstrip('/')}/api/v2/alerts?"
               + urllib.parse.urlencode({"filter": f'alertname="{WATCHDOG}"', "active": "true"}))
        try:
            ans = http_get(endpoints, url, timeout=timeout)
        except Unreachable as err:
            return Hop("alerting", "", False, f"no answer from Alertmanager at {endpoints.alertmanager}: {err}",
                       "Alertmanager is down or --alertmanager-url is wrong")
        alerts = ans.json()
        if ans.status != 200 or not isinstance(alerts, list):
            return Hop("alerting", "", False, f"Alertmanager answered {ans.status}: {shorten(ans.body)}",
                       "not Alertmanager's API v2 at --alertmanager-url")
        watchdogs = [a for a in alerts if (a.get("labels") or {}).get("alertname") == WATCHDOG]
        if not watchdogs:
            return Hop("alerting", "", False, f"no active {WATCHDOG} among {len(alerts)} alert(s)",
                       "Prometheus does not deliver alerts to Alertmanager (its alertmanagers config), or "
                       "kube-prometheus-stack's general rules are off: nothing would page")
        return Hop("alerting", "", True, f"{WATCHDOG} active since {watchdogs[0].get('startsAt', '?')}")
    return Check("alerting", "", "alertmanager",
                 f"the always-firing {WATCHDOG} in Alertmanager ({endpoints.alertmanager})", check)


def await_hops(checks: Sequence[Check], *, wait_seconds: float, poll_seconds: float,
               unresolved: Mapping[str, str] | None = None, progress: Progress | None = None,
               progress_seconds: float = PROGRESS_SECONDS) -> list[Hop]:
    """Each check until it passes or the wait is over; the last answer of each, in order. A check whose endpoint's
    name does not resolve (`unresolved`: endpoint -> why) is broken at once and never asked. `progress` hears each
    hop as it is first asked (what it waits for), each hop that passes, and every `progress_seconds` the hops
    still broken with their last answer."""
    say = progress or (lambda _msg: None)
    unresolved = unresolved or {}
    started = time.monotonic()
    deadline, next_note = started + wait_seconds, started + progress_seconds
    results: list[Hop | None] = [None] * len(checks)
    for i, check in enumerate(checks):
        if check.endpoint in unresolved:
            results[i] = Hop(check.hop, check.model, False, f"not asked: {unresolved[check.endpoint]}",
                             unresolved_cause(check.endpoint))
            say(progress_line(check.hop, check.model, f"not asked: {unresolved[check.endpoint]}"))
    asked = [i for i, c in enumerate(checks) if c.endpoint not in unresolved]
    while True:
        for i in asked:
            current, check = results[i], checks[i]
            if current is None:
                say(progress_line(check.hop, check.model, f"waiting for {check.waits_for}"))
            if current is None or not current.ok:
                answer = results[i] = check()
                if answer.ok:
                    say(progress_line(check.hop, check.model, f"ok after {time.monotonic() - started:.1f}s"))
        broken = [i for i in asked if not (r := results[i]) or not r.ok]
        now = time.monotonic()
        if not broken or now >= deadline:
            return [r for r in results if r is not None]
        if now >= next_note:
            next_note = now + progress_seconds
            for i in broken:
                last = results[i]
                say(progress_line(checks[i].hop, checks[i].model, f"still broken, {deadline - now:.0f}s left: "
                                                                  f"{shorten(last.saw if last else '', 100)}"))
        time.sleep(min(poll_seconds, max(0.0, deadline - now)))
