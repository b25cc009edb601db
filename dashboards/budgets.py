"""Token budgets (docs/gateway.md, "Token budgets"): the cost dashboard's row and the alerts, from the gauges and
counters the gateway's budget service exports (telemetry.names.BUDGET).

The gauges are read from the shared store at scrape time by every replica of the service, so each replica reports
the same value: panels and alerts take the max over replicas, never the sum.

- TokenBudgetNearlySpent (warning): an hour's or a day's window has been at least NEARLY_SPENT of its limit at some
  point in every minute for NEARLY_SPENT_FOR: time is left to act before its callers get 429. A minute's window is
  left out: it starts afresh within the minute, so a tenant that runs at its per-minute cap would hold the warning
  open all day; its callers being refused is TokenBudgetExhausted's to say.
- TokenBudgetExhausted (warning): for EXHAUSTED_FOR, more than EXHAUSTED_RATIO of the requests counted against the
  budget were refused (429) by one of its windows (over RATE): its callers are being refused a meaningful share,
  not a request now and then. 1%: the ratio the store and stream alerts page at, and a tenant that touches its cap
  now and then (a burst refused, then a window's room again) stays under it once averaged over RATE; EXHAUSTED_FOR
  (twice RATE): one refused burst raises the ratio for RATE at most, so it never holds that long.
- TokenBudgetUsageUnreported (warning): for USAGE_UNREPORTED_FOR, a workload's 2xx answers ended without `usage`
  in every RATE (BUDGET.SETTLED_WITHOUT_USAGE): each is settled at its reservation (its max_tokens, over-counted),
  so its callers reach 429 early. Triton's OpenAI frontend reports usage only when the model outputs
  num_input_tokens and num_output_tokens (triton-inference-server/server@r26.07
  python/openai/openai_frontend/engine/utils/triton.py). A single one (an answer past the parsed size) does not fire.
- TokenBudgetStoreFailing: for STORE_FOR, more than STORE_FAILURE_RATIO of the service's reservations could not reach
  the store in time: critical where a fail-closed budget refused requests (503), warning where fail-open budgets
  admitted them uncounted. A ratio, so one slow answer in a busy hour does not page.
- TokenBudgetServiceUnreachable (critical): for STORE_FOR, more than STORE_FAILURE_RATIO of the gateway's admission
  streams to the service failed or timed out (Envoy's own ext_proc stats: the service's counters cannot count what
  never reached it): fail-closed tenants get 500, fail-open ones are served uncounted.
- TokenBudgetServiceOverflowing (critical): the gateway's breakers on the service's cluster (aifactory_budgets)
  refused streams in the last RATE: Envoy counts a stream refused by max_requests in upstream_rq_active_overflow
  (since 1.38 not in upstream_rq_pending_overflow any more; the live test saw it on 1.40), one refused by
  max_pending_requests in upstream_rq_pending_overflow (envoyproxy/envoy@v1.40.0
  docs/root/configuration/upstream/cluster_manager/cluster_stats.rst), which its Prometheus endpoint names
  envoy_cluster_upstream_rq_{active,pending}_overflow{envoy_cluster_name}: the alert sums both. Each refused stream
  is an admission failed (open: uncounted; closed: 500) or a meter stream lost (its reservation never settled), and
  counts in TokenBudgetServiceUnreachable or TokenBudgetMeteringFailing too: this one says the service is not to
  blame.
- TokenBudgetMeteringFailing (warning): the same for the metering streams: responses go on, but their reservations
  stay at the worst case until their deadline, when the sweep gives them back (callers are refused early).
- TokenBudgetSettlementsFailing (warning): settlements the service never wrote to the store in the last RATE (every
  try failed, or dropped unwritten: too many pending while the store was down, or pending at shutdown): their
  reservations stay counted until the sweep gives them back (callers refused early), a fail-open request's usage is
  lost. The service exports both reasons from 0, so the first failure is an increase.
- TokenBudgetStorePrimaryDown (critical): for STORE_FOR the store's primary has not been ready (kube-state-metrics'
  kube_pod_status_ready): with storeReplicas the Valkey StatefulSet's pod 0, without them the pod of the Deployment
  the chart renders instead (BUDGET.STORE_PRIMARY_PODS matches either, never a replica; during a Deployment's rollout
  one ready pod of the two is enough). The pinned chart has no Sentinel: nothing promotes a replica, every budget fails
  as its onStoreFailure says until the primary is back, and when its volume is lost a person fails over
  (docs/gateway.md, "Token budgets", Failure; dashboards/RUNBOOKS.md).
- TokenBudgetReservationsSwept (warning): the service's sweep released reservations in the last RATE
  (BUDGET.SWEPT, summed over replicas: each counts what it released), per budget: their deadline passed and nobody
  settled them, so the gateway's metering streams are being lost (a service pod killed hard, or metering failing).
  No `for`: a pod lost once sweeps its reservations within a minute or so, and that is worth a look.
- TokenBudgetDrainCutsStreams (warning): a terminating service pod (a rollout, a scale-in, a node drain) still holds
  metering streams (BUDGET.STREAMS_IN_FLIGHT, stream="metering", the pod's own gauge) less than
  DRAIN_CUT_LEAD_SECONDS before its deletion deadline, joined to KSM.POD_DELETED on (namespace, pod) as
  GatewayDrainCutsRequests is (dashboards.gateway_alerts.near_deletion). Its SIGTERM comes after the preStop; it
  then lets its streams run for --shutdown-grace-seconds and cancels those left, about SETTLE_MARGIN_SECONDS before
  the deadline: each is settled at what it metered so far (the prompt's estimate and the chunks seen), the rest of
  its answer, which Envoy goes on streaming to the client, goes uncounted; a pod killed before it writes them (a
  shortened grace) loses them, and the sweep gives those reservations back at their deadline. The service's metrics
  Service publishes not-ready addresses, so the pod is scraped until it is gone. A sibling of
  GatewayDrainCutsRequests rather than a part of it: another pod, another consequence (the client is not cut, its
  budget is under-counted), another runbook.
- TokenBudgetStoreMemoryHigh (warning): for STORE_MEMORY_FOR a store pod's dataset has been above STORE_MEMORY_HIGH of
  its maxmemory (the chart's redis_exporter sidecar, STORE_METRICS_JOB: redis_memory_used_bytes, Valkey's INFO
  used_memory, over redis_memory_max_bytes, its maxmemory; oliver006/redis_exporter@v1.79.0 exporter/exporter.go).
  Past maxmemory the store refuses writes (noeviction) and TokenBudgetStoreFailing follows; a pod that reports no
  maxmemory (0: unbounded) is left out rather than divided by.
- TokenBudgetStoreWritesFailing (critical): for STORE_FOR a store pod's last write to its append-only file failed
  (redis_aof_last_write_status, Valkey's INFO aof_last_write_status, which the exporter reads ok as 1 and err as 0:
  exporter/metrics.go): Valkey then refuses writes until one succeeds, and says why where the service's breaker
  cannot (a full or failing volume).

Envoy's stats (each budget filter's ExternalProcessor.stat_prefix, components/k8s/gateway/envoy/budgets.py):
http.<listener prefix>.ext_proc.<stat_prefix>.streams_started / streams_failed / message_timeouts
(envoyproxy/envoy@v1.40.0 source/extensions/filters/http/ext_proc/ext_proc.h, ALL_EXT_PROC_FILTER_STATS), which
Envoy's Prometheus endpoint names envoy_http_ext_proc_<stat_prefix>_<stat>{envoy_http_conn_manager_prefix}.
"""

from __future__ import annotations

from dashboards.config import ObservabilityConfig
from dashboards.gateway_alerts import DRAIN_CUT_LEAD_SECONDS, near_deletion
from dashboards.panels import Q, timeseries
from dashboards.rule_parts import RATE, Alert, runbook
from telemetry.names import BUDGET, KSM

__all__ = ["NEARLY_SPENT", "NEARLY_SPENT_FOR", "EXHAUSTED_RATIO", "EXHAUSTED_FOR", "USAGE_UNREPORTED_FOR",
           "NEARLY_SPENT_WINDOWS", "STORE_FOR", "STORE_FAILURE_RATIO", "ROW", "panels", "alerts",
           "ext_proc_metric", "STORE_MEMORY_HIGH", "STORE_MEMORY_FOR", "STORE_METRICS_JOB"]

NEARLY_SPENT = 0.8
NEARLY_SPENT_FOR = "5m"
NEARLY_SPENT_WINDOWS = ("perHour", "perDay")  # a minute's window starts afresh before anyone could act on it
EXHAUSTED_RATIO = 0.01
EXHAUSTED_FOR = "10m"
USAGE_UNREPORTED_FOR = "10m"
STORE_FOR = "2m"
STORE_FAILURE_RATIO = 0.01
STORE_MEMORY_HIGH = 0.8
STORE_MEMORY_FOR = "10m"
# Prometheus Operator names a ServiceMonitor's job after the Service: the chart's metrics Service
# (components.k8s.gateway.budget_objects.STORE_METRICS_SERVICE)
STORE_METRICS_JOB = f"{BUDGET.STORE_RELEASE}-metrics"
ROW = "Token budgets"
CLUSTER_OVERFLOWS = ("envoy_cluster_upstream_rq_active_overflow", "envoy_cluster_upstream_rq_pending_overflow")
BUDGETS_CLUSTER = "aifactory_budgets"  # components.k8s.gateway.envoy.budgets.BUDGETS_CLUSTER
BY = f"{BUDGET.L_SCOPE}, {BUDGET.L_NAME}, {BUDGET.L_WINDOW}"
LEGEND = "{{scope}} {{name}} {{window}}"


def _used() -> str:
    return f"max by ({BY}) ({BUDGET.SPENT}) / max by ({BY}) ({BUDGET.LIMIT})"


def panels() -> list:
    """The cost dashboard's token budget row."""
    return [
        timeseries("Token budget used", "Per tenant (or workload) and window: weighted tokens reserved or spent in "
                                        "the current window over its limit (the store's counters; a request "
                                        "reserves its worst case, then settles what it used).", "percentunit",
                   Q(_used(), LEGEND)),
        timeseries("Token budget remaining", "Weighted tokens left in the current window.", "short",
                   Q(f"max by ({BY}) ({BUDGET.REMAINING})", LEGEND)),
        timeseries("Requests refused by token budgets", "Requests per second answered 429 because their "
                                                        "reservation did not fit a budget's window.", "reqps",
                   Q(f"sum by ({BY}) (rate({BUDGET.REFUSED}[{RATE}]))", LEGEND)),
    ]


def ext_proc_metric(stat_prefix: str, stat: str) -> str:
    """An ext_proc filter's stat as Envoy's Prometheus endpoint names it."""
    return f"envoy_http_ext_proc_{stat_prefix}_{stat}"


def _stream_failures(*prefixes: str) -> str:
    """The share of the filters' ext_proc streams that failed or timed out (a filter that is not deployed, e.g. no
    tenant fails closed, adds nothing)."""
    def total(stats: tuple[str, ...]) -> str:
        return " + ".join(f"(sum(rate({ext_proc_metric(p, s)}[{RATE}])) or vector(0))" for p in prefixes for s in stats)
    failed, started = total(("streams_failed", "message_timeouts")), total(("streams_started",))
    return f"({failed}) / ({started}) > {STORE_FAILURE_RATIO}"


def alerts(cfg: ObservabilityConfig) -> list[Alert]:
    who = "{{ $labels.scope }} {{ $labels.name }}"
    windows = f'{BUDGET.L_WINDOW}=~"{"|".join(NEARLY_SPENT_WINDOWS)}"'
    store = f'job="{STORE_METRICS_JOB}"'
    failures = f"sum by ({BUDGET.L_SCOPE}, {BUDGET.L_NAME}) (rate({BUDGET.STORE_FAILURES}{{outcome=\"%s\"}}" \
               f"[{RATE}])) / on() group_left() sum(rate({BUDGET.CHECK_SECONDS}_count[{RATE}])) " \
               f"> {STORE_FAILURE_RATIO}"
    return [
        Alert("TokenBudgetNearlySpent",
              f"max by ({BY}) (max_over_time({BUDGET.SPENT}{{{windows}}}[1m])) / max by ({BY}) ({BUDGET.LIMIT}) "
              f">= {NEARLY_SPENT}",
              "warning", summary=f"Token budget of {who} is {{{{ $value | humanizePercentage }}}} used "
                                 "({{ $labels.window }})",
              description=f"For {NEARLY_SPENT_FOR} the {{{{ $labels.window }}}} window of {who}'s token budget has "
                          f"reached at least {NEARLY_SPENT:.0%} of its limit: past it, its callers get 429 until the "
                          "window ends.",
              runbook_url=runbook(cfg, "TokenBudgetNearlySpent"), for_=NEARLY_SPENT_FOR),
        Alert("TokenBudgetExhausted",
              f"sum by ({BY}) (rate({BUDGET.REFUSED}[{RATE}])) / on ({BUDGET.L_SCOPE}, {BUDGET.L_NAME}) group_left() "
              f"sum by ({BUDGET.L_SCOPE}, {BUDGET.L_NAME}) (rate({BUDGET.REQUESTS}[{RATE}])) > {EXHAUSTED_RATIO}",
              "warning", summary=f"Token budget of {who} refuses {{{{ $value | humanizePercentage }}}} of its "
                                 "requests ({{ $labels.window }})",
              description=f"For {EXHAUSTED_FOR} more than {EXHAUSTED_RATIO:.0%} of {who}'s requests got 429 "
                          f"({{{{ $value | humanizePercentage }}}} over the last {RATE}): their reservations do not "
                          "fit the {{ $labels.window }} window's budget.",
              runbook_url=runbook(cfg, "TokenBudgetExhausted"), for_=EXHAUSTED_FOR),
        Alert("TokenBudgetUsageUnreported",
              f"sum by ({BUDGET.L_WORKLOAD}) (increase({BUDGET.SETTLED_WITHOUT_USAGE}[{RATE}])) > 0", "warning",
              summary="Workload {{ $labels.workload }} answers without usage: budgets charge its max_tokens",
              description=f"For {USAGE_UNREPORTED_FOR} workload {{{{ $labels.workload }}}} has answered requests "
                          f"that count against a token budget without `usage` ({{{{ $value }}}} in the last {RATE}): "
                          "each is charged its whole reservation (max_tokens x outputWeight), so its callers reach "
                          "429 early.",
              runbook_url=runbook(cfg, "TokenBudgetUsageUnreported"), for_=USAGE_UNREPORTED_FOR),
        Alert("TokenBudgetStoreFailing", failures % "refused", "critical",
              summary=f"Token budget store unreachable: {who}'s requests are refused (fail-closed)",
              description=f"For {STORE_FOR} the budget service could not reserve in the store in time for "
                          f"{{{{ $value | humanizePercentage }}}} of its requests, and {who}'s budget fails closed: "
                          "they got 503.",
              runbook_url=runbook(cfg, "TokenBudgetStoreFailing"), for_=STORE_FOR),
        Alert("TokenBudgetStoreFailing", failures % "admitted", "warning",
              summary=f"Token budget store unreachable: {who}'s requests are served uncounted (fail-open)",
              description=f"For {STORE_FOR} the budget service could not reserve in the store in time for "
                          f"{{{{ $value | humanizePercentage }}}} of its requests: {who}'s were admitted without "
                          "counting them (onStoreFailure: open); its budget is not enforced.",
              runbook_url=runbook(cfg, "TokenBudgetStoreFailing"), for_=STORE_FOR),
        Alert("TokenBudgetSettlementsFailing",
              f"sum by ({BUDGET.L_REASON}) (increase({BUDGET.SETTLEMENTS_FAILED}[{RATE}])) > 0", "warning",
              summary="Token budget settlements are not written to the store ({{ $labels.reason }})",
              description=f"{{{{ $value }}}} settlements were never written to the budget store in the last {RATE} "
                          "(reason {{ $labels.reason }}: retries, every try failed; dropped, too many pending while "
                          "the store was down, or still pending at shutdown): their reservations stay counted until "
                          "their deadline, when the sweep gives them back, so callers are refused early, and "
                          "fail-open requests' usage is not counted.",
              runbook_url=runbook(cfg, "TokenBudgetSettlementsFailing")),
        Alert("TokenBudgetServiceUnreachable",
              _stream_failures(BUDGET.ENVOY_ADMISSION, BUDGET.ENVOY_ADMISSION_CLOSED), "critical",
              summary="The gateway cannot reach the token budget service",
              description=f"For {STORE_FOR} {{{{ $value | humanizePercentage }}}} of the gateway's admission "
                          "streams to the budget service failed or timed out: fail-closed tenants' requests get "
                          "500, fail-open tenants' are served without counting them.",
              runbook_url=runbook(cfg, "TokenBudgetServiceUnreachable"), for_=STORE_FOR),
        Alert("TokenBudgetStorePrimaryDown",
              f"max by (namespace) ({KSM.POD_READY}{{pod=~\"{BUDGET.STORE_PRIMARY_PODS}\", condition=\"true\"}}) "
              "== 0",
              "critical", summary="The token budget store's primary in {{ $labels.namespace }} is not ready",
              description=f"For {STORE_FOR} the budget store's primary (Valkey pod {BUDGET.STORE_PRIMARY_POD}, or "
                          f"without store replicas the pod of the Deployment {BUDGET.STORE_RELEASE}) has not been "
                          "ready: no reservation can be made, so fail-open budgets serve requests uncounted and "
                          "fail-closed ones answer 503. Nothing promotes a replica (the Valkey chart has no "
                          "Sentinel): Kubernetes brings the primary back on its volume; if the volume is lost, fail "
                          "over by hand (runbook).",
              runbook_url=runbook(cfg, "TokenBudgetStorePrimaryDown"), for_=STORE_FOR),
        Alert("TokenBudgetReservationsSwept",
              f"sum by ({BUDGET.L_SCOPE}, {BUDGET.L_NAME}) (increase({BUDGET.SWEPT}[{RATE}])) > 0", "warning",
              summary=f"Reservations of {who} were released unsettled: metering streams are being lost",
              description=f"{{{{ $value }}}} reservations of {who}'s token budget were released by the budget "
                          f"service's sweep in the last {RATE}: their deadline (the longest request of their route "
                          "and a margin) passed and nobody settled them, so their metering streams were lost (a "
                          "service pod killed hard, or the gateway's metering failing). Their whole reservation was "
                          "given back; what those requests used is not counted.",
              runbook_url=runbook(cfg, "TokenBudgetReservationsSwept")),
        Alert("TokenBudgetDrainCutsStreams",
              near_deletion(cfg, f'{BUDGET.STREAMS_IN_FLIGHT}{{{BUDGET.L_STREAM}="{BUDGET.METERING}"}}'), "warning",
              summary="Terminating token budget service pod {{ $labels.pod }} will cut {{ $value }} metering "
                      "streams",
              description="Token budget service pod {{ $labels.pod }} is terminating and still meters {{ $value }} "
                          f"answers less than {DRAIN_CUT_LEAD_SECONDS} s before the kubelet kills it (its "
                          "deletionTimestamp): past its --shutdown-grace-seconds it cuts them and settles what it "
                          "metered so far, so the rest of those answers (still streamed to their clients) is not "
                          "counted against their budgets; killed before that, their reservations are released "
                          "unsettled by the sweep. Requests run longer than the service's drain allows.",
              runbook_url=runbook(cfg, "TokenBudgetDrainCutsStreams")),
        Alert("TokenBudgetStoreMemoryHigh",
              f"max by (namespace, pod) (redis_memory_used_bytes{{{store}}}) / max by (namespace, pod) "
              f"(redis_memory_max_bytes{{{store}}} > 0) > {STORE_MEMORY_HIGH}", "warning",
              summary="Token budget store {{ $labels.namespace }}/{{ $labels.pod }} is "
                      "{{ $value | humanizePercentage }} full",
              description=f"For {STORE_MEMORY_FOR} the budget store's pod {{{{ $labels.pod }}}} has used more than "
                          f"{STORE_MEMORY_HIGH:.0%} of its maxmemory ({{{{ $value | humanizePercentage }}}}): past "
                          "it, Valkey refuses writes (noeviction), reservations fail and every budget fails as its "
                          "onStoreFailure says.",
              runbook_url=runbook(cfg, "TokenBudgetStoreMemoryHigh"), for_=STORE_MEMORY_FOR),
        Alert("TokenBudgetStoreWritesFailing",
              f"min by (namespace, pod) (redis_aof_last_write_status{{{store}}}) == 0", "critical",
              summary="Token budget store {{ $labels.namespace }}/{{ $labels.pod }} cannot write its append-only "
                      "file",
              description=f"For {STORE_FOR} the budget store's pod {{{{ $labels.pod }}}} has reported its last "
                          "append-only file write failed: Valkey refuses writes until one succeeds, so reservations "
                          "fail and every budget fails as its onStoreFailure says.",
              runbook_url=runbook(cfg, "TokenBudgetStoreWritesFailing"), for_=STORE_FOR),
        Alert("TokenBudgetServiceOverflowing",
              " + ".join(f"(sum(increase({m}{{envoy_cluster_name=\"{BUDGETS_CLUSTER}\"}}[{RATE}])) or vector(0))"
                         for m in CLUSTER_OVERFLOWS) + " > 0",
              "critical", summary="The gateway's breakers refuse streams to the token budget service",
              description=f"{{{{ $value }}}} streams to the budget service were refused by the gateway's own circuit "
                          f"breakers (cluster {BUDGETS_CLUSTER}) in the last {RATE}: admissions failed (fail-closed "
                          "tenants got 500, fail-open ones were served uncounted) or metering streams were lost "
                          "(their reservations stay charged their worst case until the sweep gives them back). The "
                          "service "
                          "is not at fault: more requests are in flight than the breakers were sized for.",
              runbook_url=runbook(cfg, "TokenBudgetServiceOverflowing")),
        Alert("TokenBudgetMeteringFailing", _stream_failures(BUDGET.ENVOY_METER), "warning",
              summary="The gateway cannot meter responses to the token budget service",
              description=f"For {STORE_FOR} {{{{ $value | humanizePercentage }}}} of the gateway's metering streams "
                          "to the budget service failed: those requests keep their worst-case reservation until "
                          "their deadline (the sweep then gives it back), so their callers are refused early.",
              runbook_url=runbook(cfg, "TokenBudgetMeteringFailing"), for_=STORE_FOR),
    ]
