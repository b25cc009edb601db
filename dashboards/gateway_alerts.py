"""The gateway's alerts, per Envoy cluster (one per model; a workload with variants routes through its aggregate
clusters `<workload>__<variant>`, a variant named by its key through `<variant>__direct`), from the cluster and route
stats the gateway's stats listener exports to Prometheus (telemetry.names.ENVOY, label envoy_cluster_name; the model
clusters' stats are all kept).

- GatewayModelUnavailable: no replica of a model is healthy at the gateway. A model's cluster has one host per
  ready replica, each healthy while its replica passes its health checks and is not ejected. When none passes, a
  model's cluster is in panic (healthy_panic_threshold 1%: components/k8s/gateway/envoy/replicas.py) and still sends
  each request to its replicas (a saturated model keeps serving); Envoy answers a request itself, 503 "no healthy
  upstream" (flag UH), no try made, when the model has no ready replica at all (its Service publishes none), or for
  a variant (no panic) when none passes. Two Envoy v1.40.0 stats say it: the gauge `membership_healthy` ("Current
  cluster healthy total (inclusive of both health checking and outlier detection)",
  envoyproxy/envoy@v1.40.0:docs/root/configuration/upstream/cluster_manager/cluster_stats.rst) is 0, and the counter
  `upstream_cx_none_healthy` counts each request that found no host (source/common/upstream/cluster_manager_impl.cc,
  the cluster entry's connection pool when its load balancer chooses none; the router then answers 503,
  source/common/router/router.cc `sendNoHealthyUpstreamResponse`). Neither retry nor ejection stats move then,
  which is why GatewayReplicasEjected and GatewayRetryRatioHigh stay silent. tests/artifacts/test_envoy_live.py
  scrapes both moving on the real Envoy. A model whose replicas pass their checks but fail every request is not
  unavailable in this sense (its last replica is never ejected, so a host stays healthy): its answers are 5xx (and
  452: below) and GatewayServerErrorRatioHigh pages for it.
  * critical (pages): a gateway pod that sees no healthy replica of a model refuses its requests, for
    UNAVAILABLE_FOR: a rolling restart of the gateway or of a model with more than one replica keeps a replica
    healthy in every pod, and a gateway pod that has just started sees its replicas at its first checks (seconds).
  * warning (tickets): no gateway pod sees a healthy replica for NO_REPLICA_FOR and no request is being refused
    (nobody has asked yet), or the model is a variant: a variant's refusals are not the client's, the gateway
    retries them on the workload's next variant (components/k8s/gateway/envoy/variants.py), so the client gets an answer
    from a pricier or slower variant; when every variant fails the try, the variants' last resorts serve it
    (GatewayWorkloadOnLastResorts), and if they fail too the client gets 5xx and GatewayServerErrorRatioHigh pages.
  * Models that scale to zero (replicas.min 0) have no replica by design while idle: no warning; a request wakes
    them through the gateway's refusals (components/k8s/serving/objects.py `wake_query`) and they refuse until a
    replica has loaded, so they page only after SCALE_FROM_ZERO_FOR.
  * Models on a capacity-block pool have no node by design outside the block's window (dashboards.config
    Pool.window: its start to its scale-down, drainMinutes before its end), and for CAPACITY_BLOCK_WARMUP_MINUTES
    after its start (nodes join, the model loads): their clusters are recorded as expected down then
    (R.CLUSTER_EXPECTED_DOWN, from the stack config) and no gateway alert fires for them. An aggregate cluster is
    expected down when every variant behind it is.
- GatewayServerErrorRatioHigh (critical): the 5xx the gateway answers clients, per cluster a route sends to (a model
  without variants, a workload's aggregate cluster, a variant's direct one), above ERROR_RATIO of its answers over 5
  minutes for ERROR_FOR, with at least MIN_REQUESTS_PER_SECOND answered (one failure among a few requests at night is
  not a page). For a model without variants it reads `upstream_rq_xx` of the model's cluster, which only its own
  routes send to and which counts the answer each request ended with, once per request: the final upstream status,
  or the router's own (503 "no healthy upstream" is charged there too: `chargeUpstreamCode` in
  `sendNoHealthyUpstreamResponse`; as are its 503 overflow and 504 timeout). A try that was retried is not counted
  there (the real Envoy: tests/artifacts/test_envoy_live.py). It also reads `upstream_rq_452`
  (ENVOY.FAILED_TWICE_CODE): a request whose second try's replica also answered 500 ends there, the router sees 452
  (neither retried nor counted against that replica) and counts it as a 4xx, while the client gets 500
  (components/k8s/gateway/envoy/failures.py; live: tests/artifacts/test_envoy_failures_live.py). A model whose every
  replica fails, and a burst of poison requests, both count as server errors: the access log's `fault` tells them
  apart. Every route to a variant (a workload's decisions, `<workload>__<variant>__<reason>`; a variant named by its
  key, `<variant>__direct`) has a stat_prefix, and the router charges the same answers to the route's stats
  (`vhost.models.route.<prefix>.upstream_rq_*`: ENVOY.ROUTE_RQ_XX, ROUTE_RQ_CODE): those are read, each route by
  the cluster it sends to (`client_route_clusters`), whatever decisions a stack renders. A variant's own cluster is
  never read: it also counts the 503s its gate answers for a try the aggregate then retries on the next variant
  (and its last resort's tries), which are not the client's.
- GatewayModelInPanic (warning): for PANIC_FOR the gateway has balanced a model's requests over replicas that do not
  pass their progress checks (all saturated past the check's timeout, or hung): a model's cluster counts each such
  request in `lb_healthy_panic` (its panic mode below 1% passing: components/k8s/gateway/envoy/replicas.py). Its
  requests still queue and are served (no 503), slower; a hung replica takes its share until its try idle or route
  timeout. Models without variants only: a variant's own cluster never panics, and its last resort
  (`<variant>__last`) has no checks, so its hosts are unhealthy only when ejected, at most maxEjectionPercent of
  them (67%: it never panics then; its panic with maxEjectionPercent 100 is ejections, GatewayReplicasEjected's).
- GatewayWorkloadOnLastResorts (warning): for LAST_RESORT_FOR more than LAST_RESORT_SHARE of a workload's tries (its
  variants' and their last resorts' `upstream_rq_total`: R.VARIANT_REQUESTS) went to its variants' last resorts,
  with at least MIN_REQUESTS_PER_SECOND tries/s there; labelled `workload`. A try reaches a last resort only after
  every variant's own try failed (components/k8s/gateway/envoy/variants.py): every variant saturated (no replica
  passing, or its breaker full) or failing. A trickle also gets there (a poison request that every variant answered
  500): a small share beside the workload's other tries, or under the minimum rate alone, so it does not fire.
- GatewayReplicasEjected: outlier detection has ejected a replica of a model (consecutive gateway failures) in
  every 10-minute window for 10 minutes, in at least one gateway pod (each pod ejects on its own). An ejection lasts
  its time (30 s, then longer) whatever the replica's checks say (components/k8s/gateway/envoy/replicas.py), and a
  replica that keeps failing is ejected again each time it is back; repeated ejections are the signal. With session
  affinity, the ejected replica's sessions go elsewhere and prefill their context again.
- GatewayRetryRatioHigh: retries over the requests answered (upstream_rq_xx counts a request once, after its
  retries, as above), per model cluster, above RETRY_RATIO for 10 minutes:
  replicas fail tries that other replicas then serve (the client sees success, the fleet pays twice, and affinity's
  sessions leave their replica on every retry). A workload's aggregate clusters are not read: their retries are
  overflow to the next variant, by design (every request of a variant with no replica, such as one on a capacity
  block outside its window, overflows); a variant's replicas failing show on its own model cluster, where its gate
  retries them, and overflow on the variant panels.
- GatewayOverloaded: a gateway pod's Envoy sheds load before any breaker trips: its overload manager
  (components/k8s/gateway/envoy/config.py `overload_manager`) watches the heap against a budget of 75% of the
  container's memory limit. Stats from envoyproxy/envoy@v1.40.0 source/server/overload_manager_impl.cc (ENVOY
  RESET_STREAMS_SCALE, HEAP_PRESSURE), no tags: one series per gateway pod, labelled by Prometheus with its namespace
  and pod.
  * warning (tickets): for OVERLOAD_FOR the reset action has been scaled (its scale_percent above 0: the heap above
    RESET_STREAMS_FROM of the budget): Envoy resets the streams that buffer the most, each a failed request.
  * critical (pages): the pod refuses every request. From STOP_ACCEPTING_AT of the budget every listener but the admin
    interface's answers each new request 503 "envoy overloaded", the stats listener's /stats/prometheus and /ready
    included (source/common/http/conn_manager_impl.cc, `decodeHeaders`; live: tests/artifacts/
    test_gateway_overload.py), so the action's own gauge is never scraped while it acts. What Prometheus sees is the
    pod's stats going stale after its heap pressure was last seen in the reset band (at least RESET_STREAMS_FROM
    within OVERLOAD_LOOKBACK), while the pod exists and is not ready (kube-state-metrics; the kubelet's /ready
    probe is refused): for OVERLOAD_REFUSING_FOR. A pod deleted, or restarted and scraped again, does not fire.
- GatewayDrainCutsRequests (warning): a terminating gateway pod still has requests in flight on the gateway listener
  when less than DRAIN_CUT_LEAD_SECONDS are left before the kubelet kills it: its preStop
  (components/k8s/gateway/drain.py) is waiting on them and reaches its bound first, then Envoy gets SIGTERM and
  exits, cutting them (the hook exits 0: the kubelet records no FailedPreStopHook). The deadline is the pod's
  `metadata.deletionTimestamp`, which kube-state-metrics v2.18.0 exports as KSM.POD_DELETED (Unix seconds, only
  once set: internal/store/pod.go `kube_pod_deletion_timestamp`): on a graceful delete the API server sets it to the
  time of the request plus the grace period (staging/src/k8s.io/apiserver/pkg/registry/rest/delete.go
  `BeforeDelete`), the pod's terminationGracePeriodSeconds unless the delete or eviction asks for less
  (pkg/registry/core/pod/strategy.go `CheckGracefulDelete`; kubernetes/kubernetes@v1.34.0). The kubelet runs the
  preStop from about then, for at most its bound (drain_seconds, DRAIN_MARGIN_SECONDS less than the grace), so
  Envoy gets SIGTERM about that margin before the deadline. The requests are ENVOY.DOWNSTREAM_RQ_ACTIVE of the
  gateway listener's connection manager (ENVOY.L_HCM_PREFIX = ENVOY.GATEWAY_HCM_PREFIX), the gauge the hook reads,
  one series per gateway pod as Prometheus labels its scrape (namespace, pod); a stack with variants renders a stats
  matcher, which keeps it (only the gates' stats are left out). Joined on (namespace, pod), so only a pod whose own
  stats say so fires, whatever other pods of the cluster are terminating. Its value: the requests in flight. It
  stops when they end, or when the pod is killed (its stats go stale). Not covered: a pod whose admin or stats do
  not answer (the hook's "admin unreachable"; dashboards/RUNBOOKS.md says how to see it). The budget service's
  pods are its sibling's, TokenBudgetDrainCutsStreams (dashboards/budgets.py), which shares near_deletion.
- CapacityBlockOver (warning): one per model on a capacity block, once the block's endTime has passed
  (`time() > endTime`, no data needed): its ScaledObject's KEDA cron trigger has no year, so the block's window comes
  back on its start date of every later year and asks for replicas on a pool with no nodes. The same finding and
  fix as `aifactory preflight`'s capacity-block-over (infra/preflight.py), for a stack nobody runs preflight on.
"""

from __future__ import annotations

from collections.abc import Sequence

from dashboards.config import ObservabilityConfig, ServedModel
from dashboards.promql import regex_any, series
from dashboards.rule_parts import RATE, Alert, R, Record, runbook
from telemetry.names import ENVOY, KSM

__all__ = [
    "RETRY_RATIO",
    "FOR",
    "UNAVAILABLE_FOR",
    "NO_REPLICA_FOR",
    "SCALE_FROM_ZERO_FOR",
    "CAPACITY_BLOCK_WARMUP_MINUTES",
    "ERROR_RATIO",
    "MIN_REQUESTS_PER_SECOND",
    "ERROR_FOR",
    "PANIC_FOR",
    "LAST_RESORT_SHARE",
    "LAST_RESORT_FOR",
    "OVERLOAD_FOR",
    "OVERLOAD_REFUSING_FOR",
    "OVERLOAD_LOOKBACK",
    "DRAIN_CUT_LEAD_SECONDS",
    "client_clusters",
    "client_route_clusters",
    "failed_answers",
    "expected_down_records",
    "block_over_fix",
    "block_over_alerts",
    "alerts",
]

RETRY_RATIO = 0.05  # retries per answered try: above it, failing replicas cost more than noise
FOR = "10m"
UNAVAILABLE_FOR = "5m"  # refusing every request this long pages: longer than a gateway pod's start or a rollout step
NO_REPLICA_FOR = "15m"  # no healthy replica and nobody refused: a ticket, after longer than a model's usual load
SCALE_FROM_ZERO_FOR = "20m"  # a model waking from zero refuses until its first replica has a node and has loaded
CAPACITY_BLOCK_WARMUP_MINUTES = 30  # after a block starts: its nodes join and its models load before anything pages
ERROR_RATIO = 0.05  # share of a cluster's answers that are 5xx
MIN_REQUESTS_PER_SECOND = 0.1  # 30 answers in 5 minutes: below it, a cluster's 5xx ratio is too noisy to page on
ERROR_FOR = "5m"
PANIC_FOR = "10m"  # longer than a burst that saturates every replica for a few checks
# A workload's tries on its variants' last resorts, share of all its variants' tries: each got there after every
# variant failed it. Sporadic failures (poison requests every variant answered 500, a replica failing until its
# ejection) stay far below it beside the workload's other requests; every variant saturated sends nearly all of the
# workload's tries there. The same share as ERROR_RATIO: above it, failing on every variant is not noise.
LAST_RESORT_SHARE = 0.05
LAST_RESORT_FOR = PANIC_FOR
OVERLOAD_FOR = "5m"  # streams reset this long: more than a burst of large uploads
OVERLOAD_REFUSING_FOR = "2m"  # a pod refusing everything: its readiness fails within 10 s, a restart takes seconds
OVERLOAD_LOOKBACK = "1h"  # how far back the heap pressure of a pod whose stats went silent is looked for
# A terminating gateway pod's requests in flight are reported this long before its deadline: SIGTERM comes
# DRAIN_MARGIN_SECONDS (10 s) before it, the gauge is scraped every 15 s (the gateway's ServiceMonitor), the rules run
# every 30 s (kube-prometheus-stack leaves the Prometheus evaluationInterval to prometheus-operator's default:
# pkg/apis/monitoring/v1/prometheus_types.go) and Alertmanager waits 30 s (group_wait: components/k8s/observability/
# alerting.py) before it notifies: 85 s, and the receiver's delivery. Longer would also report requests that end on
# their own (each ends within its route's timeout, which the drain covers).
DRAIN_CUT_LEAD_SECONDS = 120
GATEWAY_POD = ("namespace", "pod")  # the labels Prometheus gives a gateway pod's series (its scrape target's)
WORKLOAD = "workload"  # the label of a workload's series (as dashboards.rules' variant records)
CLUSTER = ENVOY.L_CLUSTER


def client_clusters(cfg: ObservabilityConfig) -> list[str]:
    """The clusters whose own answers are the clients': each model without variants, which only its own routes send
    to (components/k8s/gateway/envoy/config.py `_route`), sorted. The routes to variants are read from their route
    stats (`client_route_clusters`)."""
    variants = {v.model for v in cfg.variants}
    return sorted(m.name for m in cfg.models if m.name not in variants)


# A variant route's stat_prefix (components/k8s/gateway/envoy/variants.py): a decision `<workload>__<variant>__<reason>`
# sends to the aggregate `<workload>__<variant>`, a route naming a variant by its key `<variant>__direct` to the
# aggregate of that name. Names are DNS labels (no "_"), so two "__" say which.
_ROUTE_CLUSTER = "(.+__.+)__.+|(.+)"
VHOST = "models"  # the gateway's virtual host (components/k8s/gateway/envoy/config.py `gateway_listener`)
# a variant's last resort cluster (components/k8s/gateway/envoy/variants.py): `<variant>__last`
LAST_RESORT_SUFFIX = "__last"
DIRECT_SUFFIX = "__direct"  # a variant named by its key: its direct aggregate, and its routes' stat_prefix


def client_route_clusters(cfg: ObservabilityConfig, metric: str, *matchers: str) -> str:
    """Requests/s of a route stat (ENVOY.ROUTE_RQ_XX or ROUTE_RQ_CODE) of the gateway's routes, each labelled with
    the cluster its route sends to (envoy_cluster_name). Only the routes to variants have a stat_prefix, so every
    series is one of theirs."""
    vhost = f'{ENVOY.L_VHOST}="{VHOST}"'
    rate = f"rate({series(cfg, metric, vhost, *matchers)}[{RATE}])"
    return f'label_replace({rate}, "{CLUSTER}", "$1$2", "{ENVOY.L_ROUTE}", "{_ROUTE_CLUSTER}")'


def _window_open(window: tuple[int, int]) -> str:
    """1 (label-less) while a pool with this window has nodes by design and its models have had time to load."""
    start, stop = window
    return f"(vector(time()) >= {start + CAPACITY_BLOCK_WARMUP_MINUTES * 60} and vector(time()) < {stop})"


def expected_down_records(cfg: ObservabilityConfig) -> list[Record]:
    """R.CLUSTER_EXPECTED_DOWN for each client cluster (a workload's aggregates, a variant's direct one) and model
    cluster whose every model is on a capacity-block pool: 1 outside each block's window (and its warm-up), no sample
    inside one."""
    variants_of: dict[str, list[str]] = {}
    for v in cfg.variants:
        variants_of.setdefault(v.workload, []).append(v.model)
    models = {m.name: m for m in cfg.models}
    behind = {m.name: [m.name] for m in cfg.models}
    behind.update({f"{v.workload}__{v.model}": variants_of[v.workload] for v in cfg.variants})
    behind.update({f"{v.model}{DIRECT_SUFFIX}": [v.model] for v in cfg.variants if v.model != v.workload})
    out = []
    for cluster, names in sorted(behind.items()):
        windows = [cfg.pool(models[n].pool).window for n in names]
        if all(w is not None for w in windows):
            open_ = " or ".join(_window_open(w) for w in sorted({w for w in windows if w is not None}))
            out.append(Record(R.CLUSTER_EXPECTED_DOWN, f"vector(1) unless on () ({open_})", {CLUSTER: cluster}))
    return out


def block_over_fix(pool: str) -> str:
    """What to do once a capacity block is over (preflight's capacity-block-over and the CapacityBlockOver alert)."""
    return (f"Remove the block from the stack (nodePools.{pool}, and move or remove its models), or give "
            f"nodePools.{pool}.capacity a renewed block's reservationId, startTime and endTime; then `pulumi up`.")


def block_over_alerts(cfg: ObservabilityConfig) -> list[Alert]:
    """CapacityBlockOver for each model on a capacity block: fires from the block's endTime on, for good."""
    pools = {p.name: p for p in cfg.pools}
    out = []
    for m in cfg.models:
        end = pools[m.pool].block_end
        if end is None:
            continue
        scaled_object = f"ScaledObject/{m.namespace}/{m.name}"
        out.append(Alert(
            "CapacityBlockOver", f"vector(time()) > {end}", "warning",
            summary=f"The capacity block of pool {m.pool} is over; {scaled_object} still scales on its cron",
            description=f"The capacity block of pool {m.pool} ended (endTime, {end} in UTC epoch seconds), but "
                        f"KEDA's cron trigger of {scaled_object} has no year: on the block's start date of every "
                        f"later year it asks for replicas of {m.name} on a pool with no nodes, whose pods wait "
                        f"Pending and hold the tenant's GPU quota. {block_over_fix(m.pool)}",
            runbook_url=runbook(cfg, "CapacityBlockOver"), labels={"model": m.name, "pool": m.pool}))
    return out


def _in(names: Sequence[str]) -> str:
    return f'{CLUSTER}=~"{regex_any(names)}"'


def _refusing(cfg: ObservabilityConfig, names: Sequence[str]) -> str:
    """Requests/s refused by the gateway pods that see no healthy replica of the model, per model's cluster."""
    refused = f"rate({series(cfg, ENVOY.NO_HEALTHY, _in(names))}[{RATE}])"
    return f"sum by ({CLUSTER}) ({refused} and {series(cfg, ENVOY.MEMBERSHIP_HEALTHY, _in(names))} == 0) > 0"


def _unless_expected(expr: str) -> str:
    return f"{expr}\nunless on ({CLUSTER}) {R.CLUSTER_EXPECTED_DOWN}"


def _unavailable_alerts(cfg: ObservabilityConfig) -> list[Alert]:
    variants = {v.model for v in cfg.variants}

    def names(models: Sequence[ServedModel]) -> list[str]:
        return [m.name for m in models]

    serving = [m for m in cfg.models if m.name not in variants]
    always = names([m for m in serving if m.min_replicas >= 1])
    from_zero = names([m for m in serving if m.min_replicas == 0])
    summary = "Gateway refuses requests to model {{ $labels.envoy_cluster_name }}: no healthy replica"
    out = []
    for group, for_, why in ((always, UNAVAILABLE_FOR, ""),
                             (from_zero, SCALE_FROM_ZERO_FOR, " The model scales to zero (replicas.min 0): its first "
                                                             "replica has had that long to get a node and load.")):
        if group:
            out.append(Alert(
                "GatewayModelUnavailable", _unless_expected(_refusing(cfg, group)), "critical", summary=summary,
                description=f"For {for_} the gateway has answered {{{{ $value }}}} requests/s to model "
                            "{{ $labels.envoy_cluster_name }} with 503 no healthy upstream (flag UH), from gateway "
                            "pods that see no ready replica of it (a variant: none passing its health checks): clients "
                            f"are refused.{why}",
                runbook_url=runbook(cfg, "GatewayModelUnavailable"), for_=for_))
    quiet = names([m for m in cfg.models if m.min_replicas >= 1])
    if quiet:
        healthy = f"max by ({CLUSTER}) ({series(cfg, ENVOY.MEMBERSHIP_HEALTHY, _in(quiet))}) == 0"
        if always:
            healthy = f"{healthy}\nunless on ({CLUSTER}) ({_refusing(cfg, always)})"
        out.append(Alert(
            "GatewayModelUnavailable", _unless_expected(healthy), "warning",
            summary="Model {{ $labels.envoy_cluster_name }} has no healthy replica at the gateway",
            description=f"For {NO_REPLICA_FOR} no gateway pod has seen a replica of model "
                        "{{ $labels.envoy_cluster_name }} pass its health checks (or one not ejected), and none has "
                        "refused a request to it: a model's requests still go to its replicas (panic: saturated, or "
                        "hung and answered by timeouts, which GatewayServerErrorRatioHigh counts); a variant's "
                        "requests go to its workload's next variant instead.",
            runbook_url=runbook(cfg, "GatewayModelUnavailable"), for_=NO_REPLICA_FOR))
    return out


def failed_answers(cfg: ObservabilityConfig, *matchers: str) -> str:
    """Requests/s per cluster (of those `matchers` select) the gateway answered clients with a server error: the
    route cluster's 5xx, and its FAILED_TWICE_CODE, which the router counts as a 4xx and the client gets as 500
    (module docstring); `or` keeps either side where the other has no series (their labels differ)."""
    twice = series(cfg, ENVOY.RQ_CODE, f'{ENVOY.L_CODE}="{ENVOY.FAILED_TWICE_CODE}"', *matchers)
    fivexx = ", ".join([f'{ENVOY.L_CODE_CLASS}="5"', *matchers])
    return f"sum by ({CLUSTER}) ({R.ENVOY_REQUESTS}{{{fivexx}}}\n  or rate({twice}[{RATE}]))"


def _routes_failed(cfg: ObservabilityConfig) -> str:
    """As `failed_answers`, from the variant routes' stats, by the cluster each route sends to."""
    fivexx = client_route_clusters(cfg, ENVOY.ROUTE_RQ_XX, f'{ENVOY.L_CODE_CLASS}="5"')
    twice = client_route_clusters(cfg, ENVOY.ROUTE_RQ_CODE, f'{ENVOY.L_CODE}="{ENVOY.FAILED_TWICE_CODE}"')
    return f"sum by ({CLUSTER}) ({fivexx}\n  or {twice})"


def _error_ratio_alert(cfg: ObservabilityConfig) -> Alert:
    clusters = _in(client_clusters(cfg))
    # the models' clusters and the variant routes' clusters: disjoint names, so `or` is their union
    answered = (f"(sum by ({CLUSTER}) ({R.ENVOY_REQUESTS}{{{clusters}}})\n"
                f" or sum by ({CLUSTER}) ({client_route_clusters(cfg, ENVOY.ROUTE_RQ_XX)}))")
    failed = f"({failed_answers(cfg, clusters)}\n or {_routes_failed(cfg)})"
    return Alert(
        "GatewayServerErrorRatioHigh",
        _unless_expected(f"{failed} / {answered} > {ERROR_RATIO!r}\n"
                         f"and on ({CLUSTER}) {answered} >= {MIN_REQUESTS_PER_SECOND!r}"), "critical",
        summary="Gateway answers {{ $value | humanizePercentage }} of requests to {{ $labels.envoy_cluster_name }} "
                "with 5xx",
        description=f"For {ERROR_FOR} more than {ERROR_RATIO:.0%} of the gateway's answers to clients of cluster "
                    "{{ $labels.envoy_cluster_name }} (a model; <workload>__<variant>: a workload's requests that "
                    "chose that variant first; <variant>__direct: requests that named the variant) were "
                    "5xx ({{ $value | humanizePercentage }} over 5 minutes, at least "
                    f"{MIN_REQUESTS_PER_SECOND:g} requests/s): the replicas' own errors after retries, requests "
                    "that failed on two replicas (500 to the client, x-aifactory-fault: failed-on-two-replicas in "
                    "the access log), or the gateway's 503 (no healthy upstream, circuit breaker) and 504 "
                    "(timeout).",
        runbook_url=runbook(cfg, "GatewayServerErrorRatioHigh"), for_=ERROR_FOR)


def _panic_alert(cfg: ObservabilityConfig) -> Alert:
    """GatewayModelInPanic (module docstring): the models' panic counter."""
    panic = f"sum by ({CLUSTER}) (rate({series(cfg, ENVOY.LB_HEALTHY_PANIC, _in(client_clusters(cfg)))}[{RATE}]))"
    return Alert(
        "GatewayModelInPanic", _unless_expected(f"{panic} > 0"), "warning",
        summary="Gateway sends requests of model {{ $labels.envoy_cluster_name }} to replicas failing their checks "
                "(panic)",
        description=f"For {PANIC_FOR} the gateway has sent {{{{ $value }}}} requests/s of model "
                    "{{ $labels.envoy_cluster_name }} to replicas none of which passes its progress check (its "
                    "cluster's panic mode): every replica is saturated past the check's timeout, or hung. Requests "
                    "queue and are served late (none refused); a hung replica's share waits for its try idle or "
                    "route timeout.",
        runbook_url=runbook(cfg, "GatewayModelInPanic"), for_=PANIC_FOR)


def _overload_alerts(cfg: ObservabilityConfig) -> list[Alert]:
    """GatewayOverloaded (module docstring): the reset action scaled (warning), the pod refusing (critical)."""
    pod = ", ".join(GATEWAY_POD)
    pressure = series(cfg, ENVOY.HEAP_PRESSURE)
    band = ENVOY.RESET_STREAMS_FROM * 100
    not_ready = series(cfg, KSM.POD_READY, 'condition="true"')
    refusing = (f"max by ({pod}) (last_over_time({pressure}[{OVERLOAD_LOOKBACK}])) >= {band:g}\n"
                f"unless on ({pod}) {pressure}\n"
                f"and on ({pod}) {not_ready} == 0")
    budget = "its overload manager's heap budget"
    return [
        Alert("GatewayOverloaded", f"max by ({pod}) ({series(cfg, ENVOY.RESET_STREAMS_SCALE)}) > 0", "warning",
              summary="Gateway pod {{ $labels.pod }} resets streams: its heap is past "
                      f"{ENVOY.RESET_STREAMS_FROM:.0%} of its budget",
              description=f"For {OVERLOAD_FOR} the heap of gateway pod {{{{ $labels.pod }}}} has been above "
                          f"{ENVOY.RESET_STREAMS_FROM:.0%} of {budget}: Envoy's overload manager resets the streams "
                          "that buffer the most (each a failed request), its reset action scaled at "
                          f"{{{{ $value }}}}% (100% at {ENVOY.STOP_ACCEPTING_AT:.0%} of the budget, where the pod "
                          "stops accepting requests).",
              runbook_url=runbook(cfg, "GatewayOverloaded"), for_=OVERLOAD_FOR),
        Alert("GatewayOverloaded", refusing, "critical",
              summary="Gateway pod {{ $labels.pod }} refuses every request: Envoy is overloaded",
              description=f"For {OVERLOAD_REFUSING_FOR} gateway pod {{{{ $labels.pod }}}} has not been ready and its "
                          "stats have not answered, after its heap was last seen at {{ $value }}% of "
                          f"{budget}: past {ENVOY.STOP_ACCEPTING_AT:.0%} Envoy answers every new request 503 "
                          "\"envoy overloaded\", the scrape and the readiness probe included. Clients on its "
                          "connections get 503s; new connections go to the other gateway pods.",
              runbook_url=runbook(cfg, "GatewayOverloaded"), for_=OVERLOAD_REFUSING_FOR),
    ]


def near_deletion(cfg: ObservabilityConfig, in_flight: str) -> str:
    """The pods whose `in_flight` series (labelled as Prometheus labels a pod's scrape, GATEWAY_POD) are above 0 less
    than DRAIN_CUT_LEAD_SECONDS before their deletion deadline (KSM.POD_DELETED), the value: the most in flight."""
    pod = ", ".join(GATEWAY_POD)
    deadline = f"max by ({pod}) ({series(cfg, KSM.POD_DELETED)})"
    return (f"max by ({pod}) ({in_flight}) > 0\n"
            f"and on ({pod}) ({deadline} - time() < {DRAIN_CUT_LEAD_SECONDS})")


def _drain_cut_alert(cfg: ObservabilityConfig) -> Alert:
    """GatewayDrainCutsRequests (module docstring): a terminating gateway pod with requests in flight near its
    deadline."""
    gateway = f'{ENVOY.L_HCM_PREFIX}="{ENVOY.GATEWAY_HCM_PREFIX}"'
    return Alert(
        "GatewayDrainCutsRequests", near_deletion(cfg, series(cfg, ENVOY.DOWNSTREAM_RQ_ACTIVE, gateway)), "warning",
        summary="Terminating gateway pod {{ $labels.pod }} will cut {{ $value }} requests in flight",
        description="Gateway pod {{ $labels.pod }} is terminating and still has {{ $value }} requests in flight on "
                    f"the gateway listener less than {DRAIN_CUT_LEAD_SECONDS} s before the kubelet kills it (its "
                    "deletionTimestamp): its drain waits on them until its bound, then Envoy gets SIGTERM and "
                    "exits, and those clients' streams are cut. A rollout, scale-in or node drain ends requests "
                    "that run longer than the drain allows.",
        runbook_url=runbook(cfg, "GatewayDrainCutsRequests"))


def _last_resort_tries(cfg: ObservabilityConfig) -> str:
    """Tries/s on each workload's variants' last resorts, labelled with the workload."""
    by_workload: dict[str, list[str]] = {}
    for v in cfg.variants:
        by_workload.setdefault(v.workload, []).append(f"{v.model}{LAST_RESORT_SUFFIX}")
    return "\n or ".join(
        f'label_replace(sum(rate({series(cfg, ENVOY.RQ_TOTAL, _in(sorted(names)))}[{RATE}])), '
        f'"{WORKLOAD}", "{w}", "", "")' for w, names in sorted(by_workload.items()))


def _last_resort_alerts(cfg: ObservabilityConfig) -> list[Alert]:
    """GatewayWorkloadOnLastResorts (module docstring); none without variants."""
    if not cfg.variants:
        return []
    last = _last_resort_tries(cfg)
    tries = f"sum by ({WORKLOAD}) ({R.VARIANT_REQUESTS})"
    return [Alert(
        "GatewayWorkloadOnLastResorts",
        f"({last})\n/ on ({WORKLOAD}) {tries} > {LAST_RESORT_SHARE!r}\n"
        f"and on ({WORKLOAD}) ({last}) >= {MIN_REQUESTS_PER_SECOND!r}", "warning",
        summary="Workload {{ $labels.workload }} is served from its variants' last resorts "
                "({{ $value | humanizePercentage }} of its tries)",
        description=f"For {LAST_RESORT_FOR} more than {LAST_RESORT_SHARE:.0%} of the tries of workload "
                    "{{ $labels.workload }} (its variants' and their last resorts', at least "
                    f"{MIN_REQUESTS_PER_SECOND:g} tries/s on the last resorts) went to its variants' last resorts "
                    "({{ $value | humanizePercentage }} over 5 minutes): a try gets there only after every variant "
                    "failed it, so every variant is saturated (no replica passing its progress check, or its "
                    "breaker full) or failing. Requests queue at the replicas and are served late, hung replicas "
                    "included.",
        runbook_url=runbook(cfg, "GatewayWorkloadOnLastResorts"), for_=LAST_RESORT_FOR)]


def alerts(cfg: ObservabilityConfig) -> list[Alert]:
    models = _in([m.name for m in cfg.models])
    tries = f"sum by ({CLUSTER}) ({R.ENVOY_REQUESTS}{{{models}}})"
    return [
        *_unavailable_alerts(cfg),
        _error_ratio_alert(cfg),
        _panic_alert(cfg),
        *_last_resort_alerts(cfg),
        *_overload_alerts(cfg),
        _drain_cut_alert(cfg),
        *block_over_alerts(cfg),
        Alert("GatewayReplicasEjected",
              f"max by ({CLUSTER}) (increase({series(cfg, ENVOY.EJECTIONS_ENFORCED)}[{FOR}])) > 0", "warning",
              summary="Gateway cluster {{ $labels.envoy_cluster_name }} keeps ejecting replicas",
              description="Outlier detection has ejected replicas of gateway cluster "
                          "{{ $labels.envoy_cluster_name }} in every 10 minutes for 10 minutes ({{ $value }} in "
                          "the last 10 minutes in one gateway pod; consecutive gateway failures, "
                          "gateway.outlierDetection): a replica fails tries while passing its health checks, and "
                          "with session affinity its sessions prefill their context again elsewhere.",
              runbook_url=runbook(cfg, "GatewayReplicasEjected"), for_=FOR),
        Alert("GatewayRetryRatioHigh", f"{R.ENVOY_RETRIES}{{{models}}} / {tries} > {RETRY_RATIO!r}", "warning",
              summary="Gateway cluster {{ $labels.envoy_cluster_name }} retries "
                      "{{ $value | humanizePercentage }} of its tries",
              description=f"The gateway has retried more than {RETRY_RATIO:.0%} of the tries to gateway cluster "
                          "{{ $labels.envoy_cluster_name }} for 10 minutes (connect failures, resets, 5xx, idle "
                          "tries): replicas are failing requests that others then serve.",
              runbook_url=runbook(cfg, "GatewayRetryRatioHigh"), for_=FOR),
    ]
