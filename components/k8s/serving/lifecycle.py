"""A model pod's end, and what routine operations do to a model: the preStop wait, the engine's drain, the grace
period that covers both, the capacity block's scale to zero, and what a rolling update costs (docs/serving.md,
"Rollouts, scale-in and drains").

    pod deleted (rollout, KEDA scale-in, node drain)
      -> it leaves its Service's ready endpoints at once; the gateway sends it no new request within
         GATEWAY_DETECTION_SECONDS (components.k8s.defaults), while the pod's preStop sleeps a little longer
      -> SIGTERM: the engine drains its requests in flight, at most the model's route timeout (drain_seconds)
      -> the engine exits; the kubelet kills what is left at terminationGracePeriodSeconds

The serving pod's preStop is Kubernetes' own `sleep` action (no shell or binary needed in the engine image): beta
and on by default since 1.30, GA in 1.34 (kubernetes/kubernetes@v1.34.0 pkg/features/kube_features.go
PodLifecycleSleepAction), so every version the kit supports (1.31 and later) runs it.

A multi-node replica's worker must outlive its leader's drain, but no longer: its preStop is an `exec` of
leader_wait.py (`python3 -c`), which polls the leader's engine port (Engine.leader_engine_port) and ends when it
closes, at the latest after the leader's whole termination. `sleep` could only wait that whole time, whether the
leader had requests in flight or not. An exec needs python3 in the image, which every engine with multi-node
replicas runs on (vLLM's and SGLang's servers are Python; their leaders already run the NCCL guard with it). Its
time counts within the pod's grace period like a sleep's: the grace period's countdown begins before the preStop,
the kubelet sends SIGTERM when the hook ends and kills the container at the grace period whatever the hook does
(kubernetes/website content/en/docs/concepts/containers/container-lifecycle-hooks.md, "PreStop"; kubernetes/api
core/v1 Lifecycle.preStop). It runs in the container's namespaces with the container's environment (containerd
internal/cri/server/container_execsync.go execInternal: the container's process spec, its arguments replaced), so
it ends with the container if the worker's engine exits first; the kubelet passes its command as written, without
expanding `$(VAR)` (kubernetes/kubernetes@v1.34.0 pkg/kubelet/lifecycle/handlers.go Run).
"""

from __future__ import annotations

import datetime
import importlib.resources
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from components.k8s.defaults import GATEWAY_DETECTION_SECONDS
from components.k8s.engines import engine_named
from components.k8s.engines.base import Role, drain_seconds
from components.k8s.settings import Model, NodePool

__all__ = [
    "PRESTOP_MARGIN_SECONDS",
    "ENGINE_EXIT_SECONDS",
    "LEADER_POLL_SECONDS",
    "LEADER_WAIT_LOG",
    "leader_wait_script",
    "PROXY_CONFIG_ANNOTATION",
    "block_end",
    "proxy_drain_annotations",
    "CRON_TIMEZONE",
    "drain_seconds",
    "prestop_seconds",
    "termination_grace_seconds",
    "container_lifecycle",
    "sidecar_annotations",
    "block_window",
    "cron_window",
    "block_over",
    "next_cron_start",
    "Rollout",
    "rollout_of",
]

# The preStop waits this much longer than the gateway's detection (DNS refresh and checks land on a period, not at
# once), so no request the gateway sends after it reaches an engine that is draining.
PRESTOP_MARGIN_SECONDS = 5
# After the drain, the engine's own teardown before the kubelet's SIGKILL: SGLang polls its drain every 5 s, then
# waits up to 15 s for its schedulers (0.5.23 srt/managers/tokenizer_manager.py sigterm_watchdog,
# _SCHEDULER_EXIT_TIMEOUT_SECS); vLLM stops its HTTP server after the engine (entrypoints/launchers/launcher.py);
# Triton's frontend stops its in-process server after uvicorn's shutdown (r26.07 python/openai/openai_frontend/
# main.py signal_handler).
ENGINE_EXIT_SECONDS = 30
# Istio's per-pod ProxyConfig (istio/istio@1.28.3 pkg/kube/inject/inject.go reads annotation.ProxyConfig). A classic
# sidecar gets SIGTERM with the engine and aborts its Envoy after terminationDrainDuration (default 5 s:
# pkg/config/mesh/mesh.go; pkg/envoy/agent.go terminate), which would cut every stream the engine is still draining.
# A native sidecar (Istio's ENABLE_NATIVE_SIDECARS=auto when every node's kubelet is 1.33 or later:
# pkg/kube/inject/webhook.go DetectNativeSidecar) is stopped only after the engine has exited, and then exits at
# once (its preStop `pilot-agent request POST drain` disables the timed drain: pkg/envoy/agent.go DrainNow), so the
# setting only matters on older or mixed nodes.
PROXY_CONFIG_ANNOTATION = "proxy.istio.io/config"
# How often a multi-node replica's worker asks whether its leader's engine still runs (leader_wait.py): the group
# ends at most this long (plus a connect's timeout) after the leader's engine has exited.
LEADER_POLL_SECONDS = 2
# Where leader_wait.py writes why it ended: the standard output of the container's main process, i.e. the
# container's log. The kubelet keeps an exec hook's output only when the hook fails (kubernetes/kubernetes@v1.34.0
# pkg/kubelet/lifecycle/handlers.go Run: the output is used only in the error it returns).
LEADER_WAIT_LOG = "/proc/1/fd/1"
CRON_TIMEZONE = "Etc/UTC"  # a capacity block's window is UTC (nodePools.X.capacity.startTime, endTime)


def prestop_seconds(model: Model, role: Role = "single") -> int:
    """How long the pod's preStop may last before its engine gets SIGTERM. The serving pod (single, leader): it sleeps
    past the gateway's detection. A multi-node replica's worker: at most the leader's whole termination, so the ranks
    the leader's drain needs stay up (then the worker's container exits on SIGTERM, vLLM's and SGLang's alike:
    engines.vllm.EXIT_ON_SIGTERM); it ends as soon as the leader's engine has exited (container_lifecycle)."""
    if role == "worker":
        return termination_grace_seconds(model, "leader")
    return GATEWAY_DETECTION_SECONDS + PRESTOP_MARGIN_SECONDS


def termination_grace_seconds(model: Model, role: Role = "single") -> int:
    """terminationGracePeriodSeconds: the preStop, then the drain (the longest request the gateway allows the model,
    so every request it can still send completes), then the engine's exit. The rule holds by construction for every
    timeoutSeconds the stack accepts (at most 3600 s)."""
    if role == "worker":
        return prestop_seconds(model, role) + ENGINE_EXIT_SECONDS
    return prestop_seconds(model, role) + drain_seconds(model) + ENGINE_EXIT_SECONDS


def leader_wait_script() -> str:
    """The text of leader_wait.py, run by a worker's python3 as its preStop."""
    return importlib.resources.files("components.k8s.serving").joinpath("leader_wait.py").read_text()


def container_lifecycle(model: Model, role: Role = "single") -> dict[str, Any]:
    """The engine container's preStop: the serving pod sleeps prestop_seconds; a worker polls its leader's engine port
    every LEADER_POLL_SECONDS until it closes, for at most prestop_seconds, and says why it ended in the container's
    log, LEADER_WAIT_LOG (leader_wait.py)."""
    if role != "worker":
        return {"preStop": {"sleep": {"seconds": prestop_seconds(model, role)}}}
    port = engine_named(model.engine).leader_engine_port
    if port is None:
        raise ValueError(f"engine {model.engine!r} of model {model.name!r} has no leader_engine_port: it cannot run "
                         "multi-node replicas")
    return {"preStop": {"exec": {"command": ["python3", "-c", leader_wait_script(), str(port),
                                             str(prestop_seconds(model, role)), str(LEADER_POLL_SECONDS),
                                             LEADER_WAIT_LOG]}}}


def proxy_drain_annotations(grace_seconds: int) -> dict[str, str]:
    """A pod's Istio sidecar drains as long as the pod may live, its terminationGracePeriodSeconds (see
    PROXY_CONFIG_ANNOTATION). Model pods and the gateway's carry it."""
    return {PROXY_CONFIG_ANNOTATION: f'{{"terminationDrainDuration": "{grace_seconds}s"}}'}


def sidecar_annotations(model: Model, role: Role = "single") -> dict[str, str]:
    return proxy_drain_annotations(termination_grace_seconds(model, role))


def _utc(value: str) -> datetime.datetime:
    return datetime.datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.UTC)


def block_window(pool: NodePool) -> tuple[datetime.datetime, datetime.datetime] | None:
    """When a capacity-block pool has nodes: from the block's start until the pool scales to zero, drainMinutes
    before its end (components/aws/nodes.py scheduled actions). None for other pools, or a block without times."""
    cap = pool.capacity
    if cap.type != "capacity-block" or cap.start_time is None or cap.end_time is None:
        return None
    return _utc(cap.start_time), _utc(cap.end_time) - datetime.timedelta(minutes=cap.drain_minutes)


def _cron(when: datetime.datetime) -> str:
    return f"{when.minute} {when.hour} {when.day} {when.month} *"


def cron_window(model: Model, pool: NodePool, *, scale_in_seconds: int) -> tuple[str, str] | None:
    """KEDA cron `start` and `end` (minute hour day month weekday, UTC) of a block model: from the block's start
    until block_end. KEDA's cron has no year field (keda.sh/docs/2.18/scalers/cron: Minute Hour Dom Month Dow), so
    the window comes back every year; once the block is over, `aifactory preflight` says so (block_over,
    next_cron_start) until the stack removes the block or gives it a renewed block's times."""
    window = block_window(pool)
    end = block_end(pool, scale_in_seconds=scale_in_seconds)
    if window is None or end is None:
        return None
    return _cron(window[0]), _cron(end)


def block_over(pool: NodePool) -> datetime.datetime | None:
    """When a capacity block is over (its endTime), or None: not a block with times. A date to compare with the clock
    (`aifactory preflight`), never with anything synth writes."""
    cap = pool.capacity
    return None if block_window(pool) is None or cap.end_time is None else _utc(cap.end_time)


def next_cron_start(pool: NodePool, after: datetime.datetime) -> datetime.datetime | None:
    """When the block model's cron trigger (cron_window: minute hour day month, every year) next starts after
    `after`: the block's start date in a later year (a 29 February start fires only in leap years). None: not a
    block."""
    window = block_window(pool)
    if window is None:
        return None
    start = window[0]
    for year in range(after.year, after.year + 9):  # a leap year comes within 8
        try:
            when = start.replace(year=year)
        except ValueError:  # 29 February of a common year
            continue
        if when > after:
            return when
    raise AssertionError(f"no year after {after} has {start:%d %B}")  # pragma: no cover - a leap year always comes


def block_end(pool: NodePool, *, scale_in_seconds: int) -> datetime.datetime | None:
    """When a block model's scaling must go inactive: before the block's nodes go, the time KEDA takes to scale the
    model in and the pods to terminate (`scale_in_seconds`), rounded to the earlier minute. None: not a block."""
    window = block_window(pool)
    if window is None:
        return None
    return (window[1] - datetime.timedelta(seconds=scale_in_seconds)).replace(second=0, microsecond=0)


@dataclass(frozen=True)
class Rollout:
    """What a rolling update of a model does to its service (`aifactory preflight` prints it per model)."""

    kind: Literal["rolling", "outage", "scaled-to-zero"]
    detail: str


def rollout_of(model: Model, *, others: Iterable[Model] = (), block: bool = False, start_seconds: int = 0
               ) -> Rollout:
    """A StatefulSet has no surge (apps/v1 StatefulSetUpdateStrategy: maxUnavailable only, and only behind a feature
    gate) and the kit's LeaderWorkerSets replace a group before starting its successor (maxSurge 0: the tenants'
    GPU quotas are sized for replicas.max, which a surge group at max would exceed): a rolling update deletes one
    replica, waits for its successor to be ready, then the next (one Pod at a time, podManagementPolicy does not
    apply to updates: kubernetes/website content/en/docs/concepts/workloads/controllers/statefulset.md, "Rolling
    Updates"). So at
    replicas.min >= 2 the others serve while one is replaced; at 1 the model is down until its new pod is ready
    (`start_seconds` at most), unless it is a variant and another variant of its workload among `others` (the
    models that always have replicas: not those on a capacity block) takes its requests; at 0 (idle) there is nothing
    to replace. `block`: the model's pool is a capacity block."""
    window = " inside its capacity block's window (0 replicas outside it)" if block else ""
    if model.replicas.min >= 2:
        return Rollout("rolling", f"one replica at a time{window}: {model.replicas.min - 1} of its at least "
                                  f"{model.replicas.min} replicas keep serving while one is replaced")
    if model.replicas.min == 0:
        return Rollout("scaled-to-zero", f"idle at 0 replicas{window}: a rollout then replaces nothing; at 1 replica "
                                         f"the model is down until its new pod is ready (at most {start_seconds} s)")
    covered = sorted(m.name for m in others if m.workload == model.workload and m.name != model.name
                     and model.variant is not None and m.variant is not None and m.replicas.min >= 1)
    fallback = (f"; the gateway overflows its requests to the other variant(s) of workload {model.workload!r} "
                f"meanwhile ({', '.join(covered)}; not one the fidelity gate holds back)") if covered else \
        "; nothing else serves its requests meanwhile (replicas.min: 2 keeps one serving)"
    return Rollout("outage", f"one replica at its minimum{window}: a rollout takes it down until the new pod is "
                             f"ready (at most {start_seconds} s){fallback}")
