"""What the kit relies on at the engines' pinned images, each checked against the upstream fact it rests on.

The facts come from the engines' sources at the pins (tests/fixtures/engines/cli.yaml names the wheels and files;
`make contracts` runs vLLM's own parser over the same command lines, outside CI); docs/contracts.md, "Engines
(vLLM, Triton)", lists each with its test.
"""

from __future__ import annotations

import copy
import getpass
import os
import re
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from components.k8s import naming, serving
from components.k8s.gateway.envoy import config as ec
from components.k8s.security import DEFAULT_UID
from infra.config import ConfigError, parse
from policies import preflight as pf
from tests.contracts.engine_commands import vllm_commands
from tests.support.stacks import SHIPPED_STACKS, stack_config, stack_raw

CLI = yaml.safe_load((Path(__file__).resolve().parents[1] / "fixtures" / "engines" / "cli.yaml").read_text())


def _options(args: list[str]) -> list[str]:
    return [a.split("=", 1)[0] for a in args if a.startswith("--")]


# --------------------------------------------------------------------------------------------
# vLLM: versions, flags, OpenTelemetry


def test_engine_images_are_the_current_releases() -> None:
    """vLLM 0.33.0 is PyPI's newest release; AWS's newest vLLM DLC with EFA is vllm:0.27-gpu-py312-ec2 (vLLM
    0.27.1: aws/deep-learning-containers .github/config/image/vllm/ec2-ubuntu.yml); Triton 26.07 is
    triton-inference-server/server's newest release (v2.71.0, README "r26.07")."""
    assert serving.DEFAULT_VLLM_IMAGE == "vllm/vllm-openai:v0.33.0"
    assert serving.DEFAULT_EFA_VLLM_IMAGE.format(region="us-east-1") == \
        "763104351884.dkr.ecr.us-east-1.amazonaws.com/vllm:0.27-gpu-py312-ec2"
    assert serving.DEFAULT_TRITON_IMAGE == "nvcr.io/nvidia/tritonserver:26.07-trtllm-python-py3"


def test_every_vllm_option_the_kit_passes_exists_at_its_images_version() -> None:
    """Every shipped stack's `vllm serve` line, and one-model stacks reaching every flag vllm_args emits, use only
    options (and choice values) the parser of the vLLM release in their image defines (cli.yaml, from the
    v0.33.0 and v0.27.1 wheels' vllm/engine/arg_utils.py)."""
    commands = vllm_commands()
    assert {c["version"] for c in commands} == {"0.33.0", "0.27.1"}  # the EFA multi-node variant runs the DLC
    seen: set[str] = set()
    for c in commands:
        known = CLI["vllm"][c["version"]]
        assert set(_options(c["args"])) <= set(known), (c["where"], c["model"], set(_options(c["args"])) - set(known))
        for opt, choices in CLI["vllm_choices"].items():
            values = [c["args"][i + 1] for i, a in enumerate(c["args"]) if a == opt]
            assert set(values) <= set(choices), (c["where"], c["model"], opt, values)
        seen |= set(_options(c["args"]))
    # every flag vllm_args can emit is exercised (so a new flag cannot skip this check)
    assert seen == set(CLI["vllm"]["0.33.0"])


def test_tracing_is_only_passed_to_vllm_releases_that_ship_the_otel_sdk() -> None:
    """`--otlp-traces-endpoint` raises "OpenTelemetry is not available" at start-up when the SDK is missing
    (v0.33.0 vllm/tracing/otel.py init_otel_tracer); vllm/vllm-openai:v0.11.0 did not install it
    (vllm-project/vllm#7679, #9340). The 0.27.1 and 0.33.0 wheels' METADATA require opentelemetry-sdk,
    -api and -exporter-otlp unconditionally (no extra), so every image built from them has the SDK."""
    traced = [c for c in vllm_commands() if "--otlp-traces-endpoint" in c["args"]]
    assert traced
    for c in traced:
        assert set(CLI["vllm_requires"][c["version"]]) >= {"opentelemetry-sdk", "opentelemetry-api",
                                                          "opentelemetry-exporter-otlp"}, c["version"]


def test_rerank_and_embed_models_run_on_the_pooling_runner() -> None:
    """A cross-encoder is a *ForSequenceClassification checkpoint: vLLM serves it on its pooling runner
    (`--runner pooling`, v0.33.0 vllm/config/model.py RunnerOption), which serves /score and /rerank."""
    prod = stack_config("prod")
    args = serving.vllm_args(prod.models["embed-rerank"])
    assert args[args.index("--runner") + 1] == "pooling"
    assert "--runner" not in serving.vllm_args(prod.models["assistant-batch"])


# --------------------------------------------------------------------------------------------
# the engine's user (item 3)


def _engine_containers(obj: dict[str, Any]) -> list[dict[str, Any]]:
    spec = obj["spec"]
    templates = [spec["template"]] if obj["kind"] == "StatefulSet" else \
        [spec["leaderWorkerTemplate"]["leaderTemplate"], spec["leaderWorkerTemplate"]["workerTemplate"]]
    return [c for t in templates for c in (*t["spec"].get("initContainers", []), *t["spec"]["containers"])]


# an interpreter another UID may run: the venv's may live under root's private home (pyenv)
SYSTEM_PYTHON = next((p for p in ("/usr/bin/python3", "/usr/local/bin/python3") if os.access(p, os.X_OK)), None)


def _getuser_as(uid: int, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """getpass.getuser() in a process running as `uid` with exactly `env` (PATH aside)."""
    assert SYSTEM_PYTHON is not None
    return subprocess.run([SYSTEM_PYTHON, "-I", "-c", "import getpass; print(getpass.getuser())"],
                          env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **env}, user=uid,
                          capture_output=True, text=True, timeout=60, check=False)


@pytest.mark.skipif(os.geteuid() != 0 or SYSTEM_PYTHON is None,
                    reason="running a process as another UID needs root and a system python3 (CI has both)")
def test_the_engine_user_resolves_without_a_passwd_entry() -> None:
    """torch's compile/inductor path calls getpass.getuser(), which raises when LOGNAME/USER/LNAME/USERNAME are
    unset and the UID has no passwd entry (pytorch/pytorch#140765; vllm-project/vllm#44548, #46734). The engines
    run as DEFAULT_UID, which neither image defines: run getuser() as that UID with each engine container's env."""
    import pwd

    with pytest.raises(KeyError):
        pwd.getpwuid(DEFAULT_UID)  # the premise: no entry for the UID here either
    assert _getuser_as(DEFAULT_UID, {"HOME": "/tmp"}).returncode != 0  # the env before the fix: HOME only
    for name in SHIPPED_STACKS:
        cfg = stack_config(name)
        for model in cfg.models.values():
            for c in _engine_containers(serving.workload(cfg, model)):
                env = {e["name"]: e["value"] for e in c["env"] if "value" in e}
                done = _getuser_as(DEFAULT_UID, env)
                assert (done.returncode, done.stdout.strip()) == (0, serving.ENGINE_USER), (name, model.name, c["name"])
                assert env["HOME"] == "/tmp"  # writable: the pod's /tmp emptyDir
    assert getpass.getuser()  # this process is unaffected


# --------------------------------------------------------------------------------------------
# Triton's OpenAI frontend; one contract for both engines (item 4)


@pytest.mark.parametrize("name", SHIPPED_STACKS)
def test_api_health_and_metrics_are_one_contract_for_both_engines(name: str) -> None:
    """For every model: the gateway's cluster port is the container port the engine's OpenAI API listens on; the
    pod's liveness path is the engine's health path (one table: envoy_config.HEALTH_PATHS; the gateway's check is a
    progress check: tests/unit/test_progress_checks.py); the
    ServiceMonitor scrapes the port that serves /metrics. Triton's frontend: --openai-port, /health/ready and
    /metrics on that port (r26.07 main.py, routers/observability.py); its options exist in main.py."""
    cfg = stack_config(name)
    for model in cfg.models.values():
        c = next(c for c in _engine_containers(serving.workload(cfg, model)) if c["name"] == model.engine)
        ports = {p["name"]: p["containerPort"] for p in c["ports"]}
        cluster = ec.model_cluster(cfg, model)
        port = cluster["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"][
            "socket_address"]["port_value"]
        assert ports == {"http": port} and port == naming.MODEL_HTTP_PORT, model.name
        health = ec.HEALTH_PATHS[model.engine]
        assert c["livenessProbe"]["httpGet"] == {"path": health, "port": "http"}, model.name
        monitor = serving.service_monitor(cfg, model)["spec"]["endpoints"][0]
        assert (monitor["port"], monitor["path"]) == ("http", "/metrics"), model.name
        command = c["command"] if model.engine == "triton" else shlex.split(c["command"][-1]) \
            if c["command"][0] == "/bin/bash" else c["command"]
        if model.engine == "triton":
            assert command[5] == serving.TRITON_OPENAI_MAIN  # after triton_names.py and its arguments
            assert set(_options(command[6:])) <= set(CLI["triton_openai_frontend"]["26.07"])
            assert f"--openai-port={port}" in command and health == "/health/ready"
        else:
            assert command[command.index("--port") + 1] == str(port) and health == "/health"


# --------------------------------------------------------------------------------------------
# task paths (item 6)


def _path_regex(cfg: Any, model: str) -> re.Pattern[str]:
    route = next(r for r in ec.routes(cfg) if r["name"] == f"{model}/path")
    return re.compile(route["match"]["safe_regex"]["regex"])


def test_a_reranker_is_routed_the_paths_vllm_serves_for_it() -> None:
    """vLLM v0.33.0 vllm/entrypoints/pooling/scoring/api_router.py: /score, /v1/score, /rerank, /v1/rerank,
    /v2/rerank. prod's embed-rerank (task rerank) gets exactly those (and /v1/models); a chat model none."""
    prod = stack_config("prod")
    rerank, chat = _path_regex(prod, "embed-rerank"), _path_regex(prod, "assistant.assistant-fast.default")
    for path in ("/rerank", "/v1/rerank", "/v2/rerank", "/score", "/v1/score", "/v1/models"):
        assert rerank.match(f"/models/embed-rerank{path}"), path
        assert not chat.match(f"/models/assistant{path}") or path == "/v1/models", path
    for path in ("/v1/chat/completions", "/v1/completions", "/v1/embeddings"):
        assert not rerank.match(f"/models/embed-rerank{path}"), path
        assert chat.match(f"/models/assistant{path}"), path


def test_triton_refuses_the_rerank_task() -> None:
    raw = stack_raw("prod")
    raw["models"]["assistant-fast"]["task"] = "rerank"
    with pytest.raises(ConfigError, match=r"models\.assistant-fast\.task: 'rerank' is not served by engine 'triton'"):
        parse(raw, stack="prod")


# --------------------------------------------------------------------------------------------
# rollouts against the quota (item 5)

# What each named stack's quota falls short by when a model's pods, as a Deployment, surge one pod at its maximum scale
# (issue 28: staging search 8 vs 12, prod finance 4 vs 5 (now 6 vs 7), onprem ml-platform 32 vs 40,
# analytics-ai MIG 7 vs 8).
SURGE_SHORT = {
    "staging": ("Deployment/search/llama-70b", "requests.nvidia.com/gpu 12 > 8"),
    # prod's finance tenant now holds the AWQ variant and its bf16 baseline: 6 GPUs of quota, 7 with a surge pod
    "prod": ("Deployment/finance/finance-8b", "requests.nvidia.com/gpu 7 > 6"),
    "onprem": ("Deployment/ml-platform/llama-70b", "requests.nvidia.com/gpu 40 > 32"),
    "onprem-mig": ("Deployment/analytics-ai/classifier", "requests.nvidia.com/mig-1g.10gb 8 > 7"),
}


def _synth(stack: str) -> list[dict[str, Any]]:
    from infra.synth import read_stack_config, run_program, stack_file, state_export

    return state_export(run_program(stack, read_stack_config(stack_file(stack))))["deployment"]["resources"]


def _surge_messages(entries: list[dict[str, Any]]) -> dict[str, str]:
    return {f.resource: f.message for f in pf.quota_findings(pf.from_entries(entries)) if "surge" in f.message}


@pytest.mark.parametrize("stack", ["staging", "prod", "onprem"])
def test_a_surge_the_quota_cannot_admit_is_caught_and_gpu_rollouts_do_not_surge(stack: str) -> None:
    """ResourceQuota admission refuses a pod past the namespace's hard limit, so a rolling update with maxSurge 1
    at maximum scale never gets its new pod (kubernetes.io/docs/concepts/policy/resource-quotas; apps/v1
    RollingUpdateDeployment maxSurge). The shipped model StatefulSets never surge (a StatefulSet deletes a pod
    before it creates its successor); the same pods as Deployments with the strategy before issue 28's fix are
    flagged, on the tenants issue 28 names."""
    entries = _synth(stack)
    sts = "kubernetes:apps/v1:StatefulSet"
    models = [e for e in entries if e["type"] == sts and "aifactory.io/model" in e["inputs"]["metadata"].get(
        "labels", {})]
    assert models and all(e["inputs"]["spec"]["updateStrategy"] == {"type": "RollingUpdate"} for e in models)
    assert _surge_messages(entries) == {}
    before = copy.deepcopy(entries)
    for e in before:
        if e["type"] == sts and "aifactory.io/model" in e["inputs"]["metadata"].get("labels", {}):
            e["type"], e["urn"] = "kubernetes:apps/v1:Deployment", e["urn"].replace(f"::{sts}::",
                                                                                     "::kubernetes:apps/v1:Deployment::")
            e["inputs"]["spec"]["strategy"] = {"type": "RollingUpdate",
                                               "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
        elif ((e.get("inputs") or {}).get("spec") or {}).get("scaleTargetRef", {}).get("kind") == "StatefulSet":
            e["inputs"]["spec"]["scaleTargetRef"]["kind"] = "Deployment"
    found = _surge_messages(before)
    for key, (resource, short) in SURGE_SHORT.items():
        if key.split("-")[0] == stack:
            assert short in found[resource], (resource, found.get(resource))
    assert "maxSurge 0, maxUnavailable 1" in next(
        f.fix for f in pf.quota_findings(pf.from_entries(before)) if "surge" in f.message)


def test_surge_defaults_to_a_quarter_rounded_up() -> None:
    """apps/v1: maxSurge defaults to 25%, rounded up; Recreate surges nothing."""
    def template(strategy: dict[str, Any] | None, pods: int) -> pf.PodTemplate:
        spec: dict[str, Any] = {} if strategy is None else {"strategy": strategy}
        res = pf.from_entries([{"urn": "urn:pulumi:t::p::kubernetes:apps/v1:Deployment::d",
                                "type": "kubernetes:apps/v1:Deployment",
                                "inputs": {"metadata": {"name": "d", "namespace": "n"}, "spec": spec}}])[0]
        return pf.PodTemplate(res, "spec.template", {}, {}, pods, "spec.replicas")
    assert [pf.rollout_surge(template(None, n)) for n in (1, 4, 5)] == [1, 1, 2]
    assert pf.rollout_surge(template({"type": "Recreate"}, 8)) == 0
    assert pf.rollout_surge(template({"rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}, 8)) == 0


# --------------------------------------------------------------------------------------------
# start-up: load and group formation budgeted apart (item 7)


def test_multi_node_replicas_budget_group_formation_apart_and_pass_rays_timeout() -> None:
    """multi-node-serving.sh (vllm-project/vllm examples/online_serving) waits `--ray_init_timeout` seconds
    (default 300) for the workers (leader) or to join (worker), then exits 1. The kit passes the model's
    groupFormationSeconds to both, and the leader's startup probe allows it on top of the start-up budget
    (download + load + warm-up): onprem's 405B, 1,620 s of loading in an 1,800 s budget, no longer shares
    those 180 s with Ray."""
    cfg = stack_config("onprem")
    model = cfg.models["llama-405b"]
    lws = serving.workload(cfg, model)["spec"]["leaderWorkerTemplate"]
    leader, worker = (lws[t]["spec"]["containers"][0] for t in ("leaderTemplate", "workerTemplate"))
    for c in (leader, worker):
        assert f"--ray_init_timeout={model.group_formation_seconds}" in shlex.split(c["command"][-1])
    assert model.group_formation_seconds == 900
    assert leader["startupProbe"]["failureThreshold"] * leader["startupProbe"]["periodSeconds"] == \
        model.startup_budget_seconds + 900
    single = cfg.models["llama-70b"]  # one node: no group to form
    c = serving.workload(cfg, single)["spec"]["template"]["spec"]["containers"][0]
    assert c["startupProbe"]["failureThreshold"] * 10 == single.startup_budget_seconds
    raw = stack_raw("onprem")
    raw["models"]["llama-405b"]["groupFormationSeconds"] = 1200
    assert parse(raw, stack="onprem").models["llama-405b"].group_formation_seconds == 1200


# --------------------------------------------------------------------------------------------
# minors (item 8)


def test_a_drain_never_takes_a_single_replica_models_only_pod() -> None:
    """policy/v1 PodDisruptionBudget: with maxUnavailable 1 the eviction API lets a drain evict the only pod of
    a one-replica model; minAvailable 1 refuses it. Models with more replicas keep one-at-a-time."""
    onprem = stack_config("onprem")
    assert serving.disruption_budget(onprem, onprem.models["llama-405b"])["spec"]["minAvailable"] == 1  # 1..1
    prod = stack_config("prod")
    spec = serving.disruption_budget(prod, prod.models["embed-rerank"])["spec"]  # 2..16
    assert spec["maxUnavailable"] == 1 and "minAvailable" not in spec


def test_model_pods_have_a_priority_class_per_priority_and_the_stack_creates_them() -> None:
    """scheduling.k8s.io/v1 PriorityClass: an interactive model pod that finds no GPU preempts batch ones
    (PreemptLowerPriority); a batch pod never preempts (preemptionPolicy Never). Pods name a class only if it
    exists: the kit's ServingControllers creates the ones its models use; a standalone ModelDeployment names one
    only when given priority_class_name."""
    prod = stack_config("prod")
    names = {m.name: serving.pod_spec(prod, m).get("priorityClassName") for m in prod.models.values()}
    assert names == {"assistant-fast": "aifactory-serving-interactive", "assistant-batch": "aifactory-serving-batch",
                     "assistant-steady": "aifactory-serving-interactive",
                     "assistant-tools": "aifactory-serving-interactive",
                     "deep-research": "aifactory-serving-interactive", "embed-rerank": "aifactory-serving-interactive",
                     "finance-8b": "aifactory-serving-interactive", "finance-8b-bf16": "aifactory-serving-interactive"}
    classes = {pc["metadata"]["name"]: (pc["value"], pc["preemptionPolicy"], pc["globalDefault"])
               for pc in serving.priority_classes(prod)}
    assert classes == {"aifactory-serving-interactive": (100000, "PreemptLowerPriority", False),
                       "aifactory-serving-batch": (10000, "Never", False)}
    dev = stack_config("dev")  # interactive models only
    assert [pc["metadata"]["name"] for pc in serving.priority_classes(dev)] == ["aifactory-serving-interactive"]
    standalone = serving.serving_spec("m", {"engine": "vllm", "model": "org/m", "tool_call_parser": "none",
                                            "tenant": "t", "storage_class": "x",
                                            "pool": {"name": "gpu", "instance_type": "dgx-h100"}})
    assert "priorityClassName" not in serving.pod_spec(standalone, standalone.model)
