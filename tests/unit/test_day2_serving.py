"""Day 2 on the model pods' side (issue 44 items 1-4, 10): a pod stops getting new work before its engine gets
SIGTERM (preStop past the gateway's detection), its engine drains for the longest request the gateway allows the
model, the grace period covers both, each model's rollout trade-off is stated, and a capacity-block model has no
replica outside its window.

Upstream facts (docs/contracts.md, "Day 2: model pods"):
- vLLM 0.33.0 and 0.27.1 `--shutdown-timeout` (default 0: abort every request in flight on SIGTERM; N: drain up to N
  s): vllm/engine/arg_utils.py, vllm/entrypoints/launchers/launcher.py serve_http, vllm/v1/engine/core.py
  EngineCore._handle_shutdown.
- SGLang 0.5.23 drains on SIGTERM with no limit of its own (srt/managers/tokenizer_manager.py SignalHandler,
  sigterm_watchdog); Triton r26.07's OpenAI frontend runs uvicorn, whose shutdown lets responses in flight finish
  (python/openai/openai_frontend/frontend/fastapi_frontend.py start: uvicorn.Server.run, no
  timeout_graceful_shutdown).
- Kubernetes' preStop `sleep` action: PodLifecycleSleepAction beta (on) in 1.30, GA in 1.34
  (kubernetes/kubernetes@v1.34.0 pkg/features/kube_features.go).
- KEDA's cron scaler: timezone, start, end, desiredReplicas (keda.sh/docs/2.18/scalers/cron).
- A worker's preStop is an exec hook: its time counts within the grace period, SIGTERM follows its end
  (kubernetes/website content/en/docs/concepts/containers/container-lifecycle-hooks.md); the command is passed as
  written (kubernetes/kubernetes@v1.34.0 pkg/kubelet/lifecycle/handlers.go), with the container's environment, where
  LWS puts LWS_LEADER_ADDRESS (kubernetes-sigs/lws@v0.9.0 pkg/utils/pod/pod_utils.go AddLWSVariables).
- The leader's engine port: Ray's GCS (vLLM: multi-node-serving.sh `ray start --head`, then the engine as the
  container's main process), rank 0's torch.distributed store (sglang 0.5.23 srt/distributed/bootstrap.py
  _resolve_dist_init_method; srt/entrypoints/engine.py, node_rank >= 1: stopped by rank 0's ShutdownReq).
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import math
import shlex
from pathlib import Path
from typing import Any

import pulumi
import pytest

from components.k8s.defaults import GATEWAY_DETECTION_SECONDS
from components.k8s.engines import ENGINES, engine_named
from components.k8s.engines.sglang import SGLANG_LAUNCH, multi_node_args, sglang_args
from components.k8s.engines.vllm import MULTI_NODE_SCRIPT
from components.k8s.serving import model_objects, scaled_object, serving_spec, workload
from components.k8s.serving.lifecycle import (
    ENGINE_EXIT_SECONDS,
    LEADER_POLL_SECONDS,
    LEADER_WAIT_LOG,
    PRESTOP_MARGIN_SECONDS,
    block_window,
    container_lifecycle,
    leader_wait_script,
    next_cron_start,
    rollout_of,
)
from components.k8s.serving.objects import scale_in_seconds
from infra.config import parse
from infra.preflight import ended_block_findings, preflight_command, rollouts
from tests.support.stacks import SHIPPED_STACKS, stack_config, stack_raw

PRESTOP = GATEWAY_DETECTION_SECONDS + PRESTOP_MARGIN_SECONDS


def _templates(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """A workload's pod templates by role."""
    if obj["kind"] == "StatefulSet":
        return {"single": obj["spec"]["template"]}
    lwt = obj["spec"]["leaderWorkerTemplate"]
    return {"leader": lwt["leaderTemplate"], "worker": lwt["workerTemplate"]}


def _pods(stack: str) -> list[tuple[str, str, dict[str, Any]]]:
    cfg = stack_config(stack)
    out = []
    for model in cfg.models.values():
        for role, template in _templates(workload(cfg, model)).items():
            out.append((model.name, role, template))
    return out


@pytest.mark.parametrize("stack", SHIPPED_STACKS)
def test_every_model_pod_stops_getting_work_before_sigterm(stack: str) -> None:
    """Every serving pod (a StatefulSet's, an LWS leader) sleeps in preStop past the gateway's detection: 15 s >
    GATEWAY_DETECTION_SECONDS (10). The sleep action needs nothing in the engine image. A worker waits for its
    leader's engine port to close, at most the leader's whole termination."""
    cfg = stack_config(stack)
    for name, role, template in _pods(stack):
        prestop = template["spec"]["containers"][0]["lifecycle"]["preStop"]
        if role == "worker":
            leader = _templates(workload(cfg, cfg.models[name]))["leader"]
            port = ENGINES[cfg.models[name].engine].leader_engine_port
            assert prestop == {"exec": {"command": [
                "python3", "-c", leader_wait_script(), str(port),
                str(leader["spec"]["terminationGracePeriodSeconds"]), str(LEADER_POLL_SECONDS),
                LEADER_WAIT_LOG]}}, name
        else:
            sleep = prestop["sleep"]["seconds"]
            assert sleep == PRESTOP == 15 and sleep > GATEWAY_DETECTION_SECONDS, (name, role)


@pytest.mark.parametrize("stack", SHIPPED_STACKS)
def test_grace_period_covers_the_prestop_the_route_timeout_and_the_exit(stack: str) -> None:
    """terminationGracePeriodSeconds = preStop + the model's route timeout (models.X.timeoutSeconds, whole seconds)
    + the engine's exit; a worker's = its preStop (the leader's grace) + the exit."""
    cfg = stack_config(stack)
    for name, role, template in _pods(stack):
        timeout = math.ceil(cfg.models[name].timeout_seconds)
        grace = template["spec"]["terminationGracePeriodSeconds"]
        if role == "worker":
            assert grace == PRESTOP + timeout + 2 * ENGINE_EXIT_SECONDS, name
        else:
            assert grace == PRESTOP + timeout + ENGINE_EXIT_SECONDS, (name, role)


def test_prod_grace_periods_exactly() -> None:
    """prod: deep-research's 900 s requests (an LWS of 2 nodes): leader 15 + 900 + 30 = 945 s, worker preStop 945 s
    and grace 975 s; assistant-batch's 600 s: 645 s; the 30 s chat models: 75 s."""
    graces = {(name, role): t["spec"]["terminationGracePeriodSeconds"] for name, role, t in _pods("prod")}
    assert graces[("deep-research", "leader")] == 945 and graces[("deep-research", "worker")] == 975
    assert graces[("assistant-batch", "single")] == 645
    assert graces[("assistant-steady", "single")] == graces[("assistant-fast", "single")] == 75


def test_a_workers_prestop_ends_when_its_leaders_engine_has_exited() -> None:
    """prod's deep-research worker (vLLM over Ray, an LWS of 2 nodes): its preStop polls Ray's GCS on the leader
    (6379, one of the ports outside the sidecar's capture) every 2 s and ends when it closes, at the latest after the
    leader's 945 s; its grace stays 975 s. Before, it slept the whole 945 s whether or not a request was in flight,
    so every scale-down, rollout or drain of the group held both nodes for ~16 minutes; and the worker's container,
    whose init ignored SIGTERM, then lived to its grace period's SIGKILL."""
    cfg = stack_config("prod")
    worker = _templates(workload(cfg, cfg.models["deep-research"]))["worker"]
    assert worker["spec"]["containers"][0]["lifecycle"] == {"preStop": {"exec": {"command": [
        "python3", "-c", leader_wait_script(), "6379", "945", "2", "/proc/1/fd/1"]}}}
    assert worker["spec"]["terminationGracePeriodSeconds"] == 975
    # and the SIGTERM that follows ends it (its bash, the container's init, handles it: tests/artifacts/
    # test_leader_wait_live.py runs it as a namespace's init)
    assert worker["spec"]["containers"][0]["command"][2].endswith(" & trap 'exit 0' TERM; wait $!")
    excluded = worker["metadata"]["annotations"]["traffic.sidecar.istio.io/excludeOutboundPorts"].split(",")
    assert "6379" in excluded


def test_an_sglang_worker_waits_for_rank_0s_store() -> None:
    """The same group on SGLang: its worker polls rank 0's torch.distributed store (--dist-init-addr :20000)."""
    cfg = stack_config("prod")
    model = dataclasses.replace(cfg.models["deep-research"], engine="sglang")
    assert container_lifecycle(model, "worker") == {"preStop": {"exec": {"command": [
        "python3", "-c", leader_wait_script(), "20000", "945", "2", "/proc/1/fd/1"]}}}
    assert container_lifecycle(model, "leader") == {"preStop": {"sleep": {"seconds": 15}}}


def test_an_sglang_worker_exits_on_the_sigterm_that_follows_its_prestop() -> None:
    """A non-zero SGLang rank waits for rank 0 to stop it and does not end on SIGTERM: as its container's init it
    lived to the grace period's SIGKILL (975 s on prod) whenever rank 0 had died abruptly. It now runs under a shell
    that exits on SIGTERM (tests/artifacts/test_leader_wait_live.py runs that shell as a namespace's init); the
    leader's rank 0 stays the container's main process."""
    cfg = stack_config("prod")
    model = dataclasses.replace(cfg.models["deep-research"], engine="sglang")
    objects = _templates(workload(cfg, model))
    worker = objects["worker"]["spec"]["containers"][0]["command"]
    assert worker == ["/bin/bash", "-c", shlex.join([*SGLANG_LAUNCH, *sglang_args(model), *multi_node_args(model)])
                      + " & trap 'exit 0' TERM; wait $!"]
    assert "--node-rank '$(LWS_WORKER_INDEX)'" in worker[2]  # the kubelet expands $(VAR) in a command's strings
    leader = objects["leader"]["spec"]["containers"][0]["command"]
    assert leader[:2] == ["python3", "-c"] and leader[4:6] == ["--", *SGLANG_LAUNCH[:1]]


def test_a_forming_vllm_leader_exits_on_sigterm_then_execs_its_engine() -> None:
    """prod's deep-research leader: multi-node-serving.sh (`ray start --head`, then polling for its workers up to
    ray_init_timeout, 900 s) runs in the background under a shell that exits on SIGTERM, so a group deleted while it
    forms frees its GPUs at once; only once the script succeeded does the shell exec the NCCL guard around `vllm
    serve`, which then handles SIGTERM as the container's main process. Before, `script && exec ...` kept bash, with
    no SIGTERM handler, as the init for the whole formation (up to the 945 s grace)."""
    cfg = stack_config("prod")
    leader = _templates(workload(cfg, cfg.models["deep-research"]))["leader"]["spec"]["containers"][0]["command"]
    assert leader[:2] == ["/bin/bash", "-c"]
    start, serve = leader[2].split(" && exec ")
    assert start.startswith(f"{MULTI_NODE_SCRIPT} leader '--ray_cluster_size=$(LWS_GROUP_SIZE)' "
                            "--ray_init_timeout=900 --ray_port=6379 ")
    assert start.endswith(" --include-dashboard=false & trap 'exit 0' TERM; wait $!")
    assert shlex.split(serve)[:2] == ["python3", "-c"] and shlex.split(serve)[3:7] == ["efa", "--", "vllm", "serve"]


def test_every_multi_node_engine_names_a_leader_port_its_workers_reach_directly() -> None:
    """The port a worker polls is one the pods keep out of the sidecar's outbound capture (under Istio a connection
    to any captured port is accepted by the worker's own sidecar, and would prove nothing); engines without
    multi-node replicas have none."""
    for engine in ENGINES.values():
        if engine.multi_node:
            assert engine.leader_engine_port in engine.multi_node_ports(), engine.name
        else:
            assert engine.leader_engine_port is None, engine.name
    assert {n: e.leader_engine_port for n, e in ENGINES.items()} == {"vllm": 6379, "triton": None, "sglang": 20000}


def _command(stack: str, name: str, role: str = "single") -> list[str]:
    cfg = stack_config(stack)
    return _templates(workload(cfg, cfg.models[name]))[role]["spec"]["containers"][0]["command"]


def test_vllm_drains_its_requests_for_the_route_timeout_on_sigterm() -> None:
    """vLLM's default --shutdown-timeout 0 aborts every request in flight on SIGTERM: each vLLM model gets its route
    timeout, which the grace period covers after the preStop."""
    cfg = stack_config("prod")
    for name in ("assistant-steady", "assistant-batch", "embed-rerank", "finance-8b"):
        cmd = _command("prod", name)
        timeout = math.ceil(cfg.models[name].timeout_seconds)
        assert cmd[cmd.index("--shutdown-timeout") + 1] == str(timeout), name
    leader = _command("prod", "deep-research", "leader")[-1]  # bash -c '... && exec <guard> vllm serve ...'
    assert leader.endswith("--shutdown-timeout 900")


def test_the_drain_is_not_part_of_the_fidelity_fingerprint() -> None:
    """--shutdown-timeout decides no answer: the recorded evaluations stay valid (Engine.evaluated_args)."""
    cfg = stack_config("prod")
    assert "--shutdown-timeout" not in engine_named("vllm").evaluated_args(cfg.models["finance-8b"])


def test_sglang_and_triton_drain_on_their_own() -> None:
    """SGLang and Triton's frontend drain on SIGTERM without a flag (and have none to bound it): their command lines
    carry no shutdown option; the kubelet's SIGKILL at the grace period bounds them."""
    for name in ("assistant-tools", "assistant-fast"):
        assert not any("shutdown" in part for part in _command("prod", name)), name


def test_a_classic_istio_sidecar_outlives_the_drain() -> None:
    """Istio's ProxyConfig per pod: the sidecar's termination drain lasts the pod's grace period (default 5 s would
    cut the streams the engine is draining when the sidecar is not a native one)."""
    cfg = stack_config("prod")
    templates = _templates(workload(cfg, cfg.models["deep-research"]))
    for role, grace in (("leader", 945), ("worker", 975)):
        assert templates[role]["metadata"]["annotations"]["proxy.istio.io/config"] == \
            f'{{"terminationDrainDuration": "{grace}s"}}'


def test_block_model_scaled_object_exactly() -> None:
    """prod's assistant-fast (h100-block, 2026-12-01T11:30Z to 2026-12-15T11:30Z, nodes gone 60 min before the end):
    KEDA keeps 2 replicas from the block's start until 10:23 on the 15th (10:30 less its cooldown 300 s, a 15 s
    poll and the pods' 75 s grace, to the earlier minute) and 0 outside; no wake trigger. Its queue trigger has no
    sample from 10:23 on the 15th (1797330180): before, a busy model's queue kept KEDA at >= 1 replica past the
    cron's end, and the pods were evicted with the nodes and waited Pending."""
    cfg = stack_config("prod")
    so = scaled_object(cfg, cfg.models["assistant-fast"])
    query = ('(max(sum by (model) (rate(nv_inference_queue_duration_us{namespace="assistant",'
             'aifactory_io_model="assistant-fast"}[1m])) / 1000 / clamp_min(sum by (model) '
             '(rate(nv_inference_request_success{namespace="assistant",aifactory_io_model="assistant-fast"}[1m])), '
             '1e-9))) and on() (vector(time()) < 1797330180)')
    assert datetime.datetime.fromtimestamp(1797330180, datetime.UTC) == datetime.datetime(
        2026, 12, 15, 10, 23, tzinfo=datetime.UTC)
    assert so["spec"] == {
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "assistant-fast"},
        "minReplicaCount": 0,
        "maxReplicaCount": 4,
        "pollingInterval": 15,
        "cooldownPeriod": 300,
        "advanced": {"horizontalPodAutoscalerConfig": {"behavior": {"scaleDown": {
            "stabilizationWindowSeconds": 300, "policies": [{"type": "Pods", "value": 1, "periodSeconds": 120}]}}}},
        "triggers": [
            {"type": "prometheus", "metricType": "Value", "metadata": {
                "serverAddress": "http://kps-prometheus.monitoring.svc.cluster.local:9090", "query": query,
                "threshold": "30", "activationThreshold": "0", "ignoreNullValues": "true"}},
            {"type": "cron", "metadata": {"timezone": "Etc/UTC", "start": "30 11 1 12 *", "end": "23 10 15 12 *",
                                          "desiredReplicas": "2"}},
        ],
    }


def _cron_time(expr: str, year: int) -> datetime.datetime:
    minute, hour, day, month, weekday = expr.split()
    assert weekday == "*"
    return datetime.datetime(year, int(month), int(day), int(hour), int(minute), tzinfo=datetime.UTC)


def test_block_cron_lies_inside_the_nodes_window() -> None:
    """The cron starts with the block and ends early enough for KEDA to scale in and the pods to terminate before
    the pool's nodes go (drainMinutes before the block's end), and not a minute earlier than that needs."""
    cfg = stack_config("prod")
    model = cfg.models["assistant-fast"]
    window = block_window(cfg.pool_of(model))
    assert window is not None
    start, nodes_gone = window
    cron = scaled_object(cfg, model)["spec"]["triggers"][-1]["metadata"]
    begin, end = _cron_time(cron["start"], start.year), _cron_time(cron["end"], nodes_gone.year)
    assert begin == start
    slack = nodes_gone - end - datetime.timedelta(seconds=scale_in_seconds(model))
    assert datetime.timedelta(0) <= slack < datetime.timedelta(minutes=1)


def test_a_block_model_with_a_fixed_count_is_left_to_keda() -> None:
    """A block model whose min equals its max (not autoscaled) gets a ScaledObject all the same, and its StatefulSet
    no `replicas` (KEDA owns it): 2 inside the window, 0 outside."""
    raw = stack_raw("prod")
    raw["models"]["assistant-fast"]["replicas"] = {"min": 2, "max": 2}
    cfg = parse(raw, stack="prod")
    model = cfg.models["assistant-fast"]
    kinds = [o["kind"] for o in model_objects(cfg, model)]
    assert "ScaledObject" in kinds and "replicas" not in workload(cfg, model)["spec"]
    assert scaled_object(cfg, model)["spec"]["minReplicaCount"] == 0


def test_preflight_states_each_prod_models_rollout() -> None:
    """prod's rollout trade-offs: assistant-steady (min 2) is no longer a single point outside the block's window;
    the one-replica models say what a rollout costs them."""
    got = {name: (r.kind, r.detail) for name, r in rollouts(stack_config("prod")).items()}
    assert got["assistant-steady"] == ("rolling", "one replica at a time: 1 of its at least 2 replicas keep serving "
                                                  "while one is replaced")
    assert got["assistant-fast"] == ("rolling", "one replica at a time inside its capacity block's window (0 "
                                                "replicas outside it): 1 of its at least 2 replicas keep serving "
                                                "while one is replaced")
    assert got["deep-research"] == ("outage", "one replica at its minimum: a rollout takes it down until the new pod "
                                              "is ready (at most 3300 s); nothing else serves its requests meanwhile "
                                              "(replicas.min: 2 keeps one serving)")
    assert got["finance-8b"] == ("outage", "one replica at its minimum: a rollout takes it down until the new pod is "
                                           "ready (at most 2400 s); the gateway overflows its requests to the other "
                                           "variant(s) of workload 'finance-8b' meanwhile (finance-8b-bf16; not one "
                                           "the fidelity gate holds back)")
    assert sorted(name for name, (kind, _) in got.items() if kind == "outage") == [
        "assistant-batch", "assistant-tools", "deep-research", "finance-8b", "finance-8b-bf16"]


def test_a_scale_to_zero_model_says_so() -> None:
    model = stack_config("prod").models["assistant-tools"]
    scaled = dataclasses.replace(model.replicas, min=0)
    rollout = rollout_of(dataclasses.replace(model, replicas=scaled), start_seconds=2400)
    assert (rollout.kind, rollout.detail) == ("scaled-to-zero", "idle at 0 replicas: a rollout then replaces "
                                                                "nothing; at 1 replica the model is down until its "
                                                                "new pod is ready (at most 2400 s)")


def test_prod_assistant_steady_still_fits_its_quota_and_pool() -> None:
    """min 2 changes no maximum: the assistant tenant's quota (80 GPUs) holds every model at replicas.max, and the
    h200 pool (9 nodes of 8) every h200 model at its maximum."""
    cfg = stack_config("prod")
    assert cfg.models["assistant-steady"].replicas.min == 2
    tenant = [m for m in cfg.models.values() if m.tenant == "assistant"]
    assert sum(m.replicas.max * m.gpus_per_replica for m in tenant) == 76 <= cfg.tenants["assistant"].gpu_quota
    h200 = [m for m in cfg.models.values() if m.pool == "h200"]
    assert sum(m.replicas.max * m.gpus_per_replica for m in h200) == 72 <= \
        cfg.node_pools["h200"].max_size * cfg.node_pools["h200"].instance.gpu_count
    assert sum(m.replicas.min * m.gpus_per_replica for m in h200) == 28


def _component_args(**pool: Any) -> dict[str, Any]:
    return {"engine": "vllm", "model": "meta-llama/Llama-3.1-8B-Instruct", "tenant": "chat", "model_name": "llama",
            "pool": {"name": "block", "instance_type": "p5.48xlarge", "capacity_type": "capacity-block", **pool},
            "storage_class": "fast", "replicas": {"min": 1, "max": 1}}


def test_a_component_user_gets_the_block_window_and_the_drain() -> None:
    """ModelDeployment's own args carry the block's window (pool.capacityStartTime, capacityEndTime,
    capacityDrainMinutes) and the route timeout (timeoutSeconds): the same cron and grace as a stack's."""
    spec = serving_spec("llama", _component_args(capacity_start_time="2026-12-01T11:30:00Z",
                                                 capacity_end_time="2026-12-15T11:30:00Z",
                                                 capacity_drain_minutes=45) | {"timeout_seconds": 120.0})
    cron = scaled_object(spec, spec.model)["spec"]["triggers"][-1]
    # nodes gone at 10:45; less 300 + 15 + (15 + 120 + 30) s = 480 s: 10:37
    assert cron == {"type": "cron", "metadata": {"timezone": "Etc/UTC", "start": "30 11 1 12 *",
                                                 "end": "37 10 15 12 *", "desiredReplicas": "1"}}
    pod = workload(spec, spec.model)["spec"]["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] == 165
    assert "replicas" not in workload(spec, spec.model)["spec"]


def test_a_bad_window_or_timeout_is_refused_with_its_key() -> None:
    with pytest.raises(pulumi.InputPropertiesError) as err:
        serving_spec("llama", _component_args(capacity_start_time="2026-13-01T11:30:00Z") | {"timeout_seconds": 0.0})
    assert [(e["property_path"], e["reason"]) for e in err.value.errors] == [
        ("timeoutSeconds", "0.0 must be between 0.1 and 3600 (seconds)"),
        ("pool.capacityStartTime", "'2026-13-01T11:30:00Z' is not a UTC time such as 2026-12-01T11:30:00Z"),
        ("pool.capacityStartTime", "capacityStartTime and capacityEndTime go together, on a pool of capacityType "
                                   "capacity-block")]


@pytest.mark.parametrize("stack", ["dev", "staging", "prod", "onprem"])
def test_no_trigger_of_a_block_model_outlives_its_window(stack: str) -> None:
    """Every non-cron trigger of every block model of every shipped stack ends with the cron (until_block_end); a
    trigger without the gate could keep KEDA at >= 1 replica past the window (the review's item 5)."""
    cfg = stack_config(stack)
    for model in cfg.models.values():
        so = scaled_object(cfg, model)
        [cron] = [t for t in so["spec"]["triggers"] if t["type"] == "cron"] or [None]
        if cron is None:
            assert all("vector(time())" not in t["metadata"].get("query", "") for t in so["spec"]["triggers"])
            continue
        window = block_window(cfg.pool_of(model))
        assert window is not None
        end = _cron_time(cron["metadata"]["end"], window[1].year)
        for t in so["spec"]["triggers"]:
            if t["type"] != "cron":
                assert t["metadata"]["query"].endswith(f" and on() (vector(time()) < {int(end.timestamp())})"), t


def _utc(*when: int) -> datetime.datetime:
    return datetime.datetime(*when, tzinfo=datetime.UTC)


BLOCK_OVER = ("the capacity block of pool h100-block ended at 2026-12-15T11:30:00Z, but KEDA's cron trigger has no "
              "year (start '30 11 1 12 *', end '23 10 15 12 *', Etc/UTC): {when} it asks for 2 replica(s) of "
              "assistant-fast on a pool with no nodes, whose pods wait Pending and hold the tenant's GPU quota")
BLOCK_FIX = ("Remove the block from the stack (nodePools.h100-block, and move or remove its models), or give "
             "nodePools.h100-block.capacity a renewed block's reservationId, startTime and endTime; then `pulumi up`.")


def test_preflight_says_when_a_capacity_block_is_over_before_its_cron_comes_back() -> None:
    """KEDA's cron has no year, so prod's h100-block window (1-15 December 2026) comes back every December while the
    queue trigger's gate and the pool's schedule hold 2026's times: from the block's end on, preflight names the
    block model's ScaledObject, when KEDA asks for its replicas again (or since when, inside a later year's window),
    and the fix. Judged at a given time: synth's output never depends on the date."""
    cfg = stack_config("prod")

    def found(now: datetime.datetime) -> list[tuple[str, str, str, str]]:
        return [(f.rule, f.resource, f.message, f.fix) for f in ended_block_findings(cfg, now=now)]

    assert found(_utc(2026, 12, 2)) == found(_utc(2026, 12, 15, 11, 29, 59)) == []
    flagged = ("capacity-block-over", "ScaledObject/assistant/assistant-fast")
    assert found(_utc(2026, 12, 15, 11, 30)) == found(_utc(2027, 12, 1, 11, 29)) == [
        (*flagged, BLOCK_OVER.format(when="on 2027-12-01T11:30:00Z"), BLOCK_FIX)]
    assert found(_utc(2027, 12, 5)) == [(*flagged, BLOCK_OVER.format(when="since 2027-12-01T11:30:00Z"), BLOCK_FIX)]
    assert found(_utc(2027, 12, 15, 10, 23)) == [(*flagged, BLOCK_OVER.format(when="on 2028-12-01T11:30:00Z"),
                                                  BLOCK_FIX)]
    for stack in ("dev", "staging", "onprem"):  # no capacity block: nothing, whenever
        assert ended_block_findings(stack_config(stack), now=_utc(2030, 1, 1)) == [], stack


def test_a_block_starting_on_29_february_comes_back_in_leap_years_only() -> None:
    pool = stack_config("prod").node_pools["h100-block"]
    leap = dataclasses.replace(pool, capacity=dataclasses.replace(pool.capacity, start_time="2028-02-29T00:00:00Z",
                                                                  end_time="2028-03-02T00:00:00Z"))
    assert next_cron_start(leap, _utc(2028, 3, 2)) == _utc(2032, 2, 29)
    assert next_cron_start(pool, _utc(2026, 12, 1, 11, 30)) == _utc(2027, 12, 1, 11, 30)


def test_the_preflight_command_reports_a_block_that_is_over(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                                            ) -> None:
    """`aifactory preflight prod` judged on 2026-12-20: exit 1, the finding in the text (as docs/serving.md shows it)
    and in the JSON report's `capacity-block-over` rule; on 2026-12-02 (the block under way) the rule has nothing to
    say."""
    state = tmp_path / "state.json"
    state.write_text(json.dumps({"version": 3, "deployment": {"resources": [
        {"urn": "urn:pulumi:prod::aifactory::pulumi:pulumi:Stack::s", "type": "pulumi:pulumi:Stack"}]}}))
    report = tmp_path / "pf.json"
    assert preflight_command("prod", state=state, json_out=report, now=_utc(2026, 12, 20)) == 1
    text = capsys.readouterr().out
    doc_block = (Path(__file__).parents[2] / "docs" / "serving.md").read_text().split(
        "\n```\ncapacity-block-over (1)\n", 1)[1].split("```", 1)[0]
    assert f"capacity-block-over (1)\n{doc_block}" in text  # docs/serving.md shows it as it is
    assert text.startswith("preflight prod: 14 rules over 0 resources: 1 finding(s)\n\ncapacity-block-over (1)\n"
                           "  ScaledObject/assistant/assistant-fast\n")
    doc = json.loads(report.read_text())
    assert doc["rules"][-1] == "capacity-block-over" and doc["summary"]["capacity-block-over"] == 1
    assert [f["message"] for f in doc["findings"]] == [BLOCK_OVER.format(when="on 2027-12-01T11:30:00Z")]
    assert preflight_command("prod", state=state, json_out=report, now=_utc(2026, 12, 2)) == 0
    assert json.loads(report.read_text())["summary"]["capacity-block-over"] == 0
