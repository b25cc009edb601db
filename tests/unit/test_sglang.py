"""SGLang, the third engine: its serving objects, flags, probes, scaling and gateway paths from its module alone
(components.k8s.engines.sglang), every option it is given checked against SGLang 0.5.23's own fields
(tests/fixtures/engines/cli.yaml), and its recording rules with known answers under promtool."""

from __future__ import annotations

import dataclasses
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

from components.k8s.engines import ENGINES, EngineTracing
from components.k8s.engines.sglang import DEFAULT_SGLANG_IMAGE, sglang_args
from components.k8s.gateway.envoy import config as ec
from components.k8s.mesh import EXCLUDE_OUTBOUND_PORTS_ANNOTATION, INCLUDE_INBOUND_PORTS_ANNOTATION
from components.k8s.serving import ModelDeploymentArgs, model_objects, serving_spec, workload
from components.k8s.settings import Speculative
from dashboards.config import ObservabilityConfig
from dashboards.engines.sglang import RULES, S
from dashboards.rules import R, groups
from infra import fidelity
from infra.config import parse
from infra.monitoring import from_platform
from infra.preflight import run_rules
from infra.synth import load_stack, read_stack_config, run_program, stack_file, state_export
from policies import preflight as pf
from policies.runner import run_policies
from tests.support.prometheus import promtool
from tests.support.stacks import stack_config, stack_raw
from tests.unit.test_verify import REPORT, _jaeger_trace, _trace_hop

CLI = yaml.safe_load((Path(__file__).resolve().parents[1] / "fixtures" / "engines" / "cli.yaml").read_text())


# a generate model's tool calls and reasoning come back as the OpenAI API's fields (tool_calls, reasoning_content)
PARSERS = ["--tool-call-parser", "auto", "--reasoning-parser", "auto"]

def _args(**extra: Any) -> ModelDeploymentArgs:
    a: ModelDeploymentArgs = {"engine": "sglang", "model": "Qwen/Qwen3-8B", "tenant": "agents",
                              "model_name": "planner", "pool": {"name": "l40s", "instance_type": "g6e.12xlarge"},
                              "tensor_parallel": 2, "storage_class": "fast-nvme", "replicas": {"min": 1, "max": 3}}
    a.update(extra)  # type: ignore[typeddict-item]
    return a


def test_an_sglang_model_runs_its_launch_server_with_its_probes_and_metrics() -> None:
    spec = serving_spec("planner", _args())
    objs = {o["kind"]: o for o in model_objects(spec, spec.model)}
    pod = objs["StatefulSet"]["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    assert (c["name"], c["image"]) == ("sglang", "lmsysorg/sglang:v0.5.23") and DEFAULT_SGLANG_IMAGE == c["image"]
    assert c["command"] == ["python3", "-m", "sglang.launch_server", "--model-path", "Qwen/Qwen3-8B",
                            "--host", "0.0.0.0", "--port", "8000", "--served-model-name", "planner",
                            "--tp-size", "2", "--pp-size", "1", "--enable-metrics",
                            "--tool-call-parser", "auto", "--reasoning-parser", "auto"]
    assert c["ports"] == [{"name": "http", "containerPort": 8000, "protocol": "TCP"}]
    assert [c[p]["httpGet"]["path"] for p in ("startupProbe", "livenessProbe", "readinessProbe")] == \
        ["/health_generate", "/health", "/health_generate"]
    # /health_generate may wait 1 s + SGLANG_HEALTH_CHECK_TIMEOUT (20 s) for the scheduler before its 503; /health
    # answers at once with its generation turned off (sglang 0.5.23 srt/entrypoints/http_server.py, srt/environ.py)
    assert [c[p]["timeoutSeconds"] for p in ("startupProbe", "livenessProbe", "readinessProbe")] == [25, 5, 25]
    assert {"name": "SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION", "value": "false"} in c["env"]
    assert not [e for e in c["env"] if e["name"].startswith("OTEL_")]  # no engine spans (see the module)
    assert {e["name"]: e.get("value") for e in c["env"]}["USER"] == "aifactory"  # the non-root user resolves
    trigger = objs["ScaledObject"]["spec"]["triggers"][0]
    assert (trigger["metricType"], trigger["metadata"]["threshold"]) == ("AverageValue", "5")
    assert trigger["metadata"]["query"] == \
        'sum(max by (pod) (sglang:num_queue_reqs{namespace="agents",aifactory_io_model="planner"}))'
    assert objs["ServiceMonitor"]["spec"]["endpoints"][0]["path"] == "/metrics"


def test_sglang_flags_for_the_models_features() -> None:
    m = serving_spec("planner", _args(quantization="fp8", expert_parallel=True, max_model_length=32768,
                                      prefix_caching=False)).model
    assert sglang_args(m)[13:] == ["--quantization", "fp8", "--ep-size", "2", "--context-length", "32768",
                                   "--disable-radix-cache", *PARSERS]
    # a pre-quantized AWQ checkpoint declares its method itself: no flag
    assert "--quantization" not in sglang_args(serving_spec("planner", _args(quantization="awq")).model)
    eagle = dataclasses.replace(m, speculative=Speculative("org/eagle3-head", 3, "eagle3"), quantization="none",
                                expert_parallel=False, max_model_length=None, prefix_caching=True)
    assert sglang_args(eagle)[13:] == ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path",
                                       "org/eagle3-head", "--speculative-num-steps", "3",
                                       "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4", *PARSERS]
    ngram = dataclasses.replace(eagle, speculative=Speculative(None, 5, "ngram"))
    assert sglang_args(ngram)[13:] == ["--speculative-algorithm", "NGRAM", "--speculative-num-draft-tokens", "5",
                                       *PARSERS]
    embed = serving_spec("e", _args(task="embed")).model
    assert "--is-embedding" in sglang_args(embed) and "--tool-call-parser" not in sglang_args(embed)
    assert ec.OPENAI_APIS["sglang"] == {"generate": ("v1/chat/completions", "v1/completions", "v1/models",
                                                     "v1/models/[^/]+"),
                                        "embed": ("v1/embeddings", "v1/models", "v1/models/[^/]+")}
    assert ec.HEALTH_PATHS["sglang"] == "/health"


def _multi_node(fabric: str, **extra: Any) -> dict[str, Any]:
    pool = {"name": "h100", "instance_type": "p5.48xlarge", "fabric": fabric}
    spec = serving_spec("planner", _args(pool=pool, model="Qwen/Qwen3-235B-A22B", tensor_parallel=16,
                                         aws_region="us-east-1", **extra))
    return {o["kind"]: o for o in model_objects(spec, spec.model)}


def test_an_sglang_replica_larger_than_a_node_is_a_leaderworkerset_of_launch_servers_on_the_fabric() -> None:
    """TP 16 on 8-GPU p5 nodes: a LeaderWorkerSet of 2 pods, each running launch_server for its node rank from
    LWS's environment, rendezvous at the leader's store port (excluded from the sidecar's capture), EFA and NCCL
    settings on both, the leader behind the NCCL guard, the workers with no HTTP port or probe."""
    objs = _multi_node("efa", group_formation_seconds=1200)
    assert "StatefulSet" not in objs
    lws = objs["LeaderWorkerSet"]
    assert (lws["metadata"]["name"], lws["spec"]["leaderWorkerTemplate"]["size"]) == ("planner-lws", 2)
    placement = ["--nnodes", "$(LWS_GROUP_SIZE)", "--node-rank", "$(LWS_WORKER_INDEX)",
                 "--dist-init-addr", "$(LWS_LEADER_ADDRESS):20000", "--dist-timeout", "1200"]
    serve = ["python3", "-m", "sglang.launch_server", "--model-path", "Qwen/Qwen3-235B-A22B", "--host", "0.0.0.0",
             "--port", "8000", "--served-model-name", "planner", "--tp-size", "16", "--pp-size", "1",
             "--enable-metrics", *PARSERS, *placement]
    templates = lws["spec"]["leaderWorkerTemplate"]
    leader, worker = (templates[t]["spec"]["containers"][0] for t in ("leaderTemplate", "workerTemplate"))
    assert leader["command"][:2] == ["python3", "-c"] and leader["command"][3:] == ["efa", "--", *serve]
    assert "NCCL INFO Using network" in leader["command"][2]  # the guard's text
    assert worker["command"] == ["/bin/bash", "-c", f"{shlex.join(serve)} & trap 'exit 0' TERM; wait $!"]  # exits on
    # SIGTERM (tests/unit/test_day2_serving.py::test_an_sglang_worker_exits_on_the_sigterm_that_follows_its_prestop)
    assert "ports" not in worker and "readinessProbe" not in worker and leader["ports"][0]["containerPort"] == 8000
    for t in ("leaderTemplate", "workerTemplate"):
        c = templates[t]["spec"]["containers"][0]
        assert c["resources"]["limits"]["nvidia.com/gpu"] == "8" and c["resources"]["limits"][
            "vpc.amazonaws.com/efa"] == "32"
        env = {e["name"]: e.get("value") for e in c["env"]}
        assert (env["FI_PROVIDER"], env["NCCL_SOCKET_IFNAME"], env["GLOO_SOCKET_IFNAME"]) == ("efa", "eth0", "eth0")
        assert templates[t]["metadata"]["annotations"][EXCLUDE_OUTBOUND_PORTS_ANNOTATION] == "20000"
        assert templates[t]["metadata"]["annotations"][INCLUDE_INBOUND_PORTS_ANNOTATION] == "8000"
    # the Service (and so the gateway and the scrape) selects leaders only
    assert objs["Service"]["spec"]["selector"]["leaderworkerset.sigs.k8s.io/worker-index"] == "0"


def test_an_sglang_replica_without_a_fabric_has_no_nccl_guard() -> None:
    lws = _multi_node("none")["LeaderWorkerSet"]
    leader = lws["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]["containers"][0]
    assert leader["command"][:3] == ["python3", "-m", "sglang.launch_server"]


def test_kv_offload_is_sglangs_hierarchical_cache_sized_per_rank() -> None:
    """kvOffloadGiB is the replica's host memory (vLLM's sense); --hicache-size is whole 10^9-byte GB per rank."""
    m = serving_spec("planner", _args(kv_offload_gib=64.0)).model  # TP 2: 32 GiB = 34.36 GB a rank
    assert sglang_args(m)[13:] == ["--enable-hierarchical-cache", "--hicache-size", "34", *PARSERS]
    tiny = dataclasses.replace(m, kv_offload_gib=0.5)  # 0.27 GB a rank: at least 1 (0 would mean a ratio)
    assert sglang_args(tiny)[15] == "1"
    pp = dataclasses.replace(m, pipeline_parallel=2)  # 4 ranks: 17.18 GB each
    assert sglang_args(pp)[15] == "17"


def test_every_sglang_option_the_kit_passes_exists_at_its_images_version() -> None:
    """Every option (and choice value) any model setting reaches is a field of SGLang 0.5.23's server args."""
    base = serving_spec("planner", _args()).model
    models = [base, serving_spec("e", _args(task="embed")).model,
              *(dataclasses.replace(base, quantization=q, quantized_checkpoint=False)
                for q in ("fp8", "awq", "gptq", "int8")),
              dataclasses.replace(base, expert_parallel=True, max_model_length=4096, prefix_caching=False),
              dataclasses.replace(base, kv_offload_gib=8.0), dataclasses.replace(base, tokenizer="org/tokenizer"),
              *(dataclasses.replace(base, speculative=Speculative("org/d" if m != "ngram" else None, 4, m))  # type: ignore[arg-type]
                for m in ("eagle3", "eagle", "ngram"))]
    seen: set[str] = set()
    engine = ENGINES["sglang"]
    for m in models:
        args = sglang_args(m)
        if m is base:  # a multi-node pod's placement flags too
            args = engine.command(dataclasses.replace(base, gpus_per_replica=16), role="leader")[3:]
        options = [a for a in args if a.startswith("--")]
        assert set(options) <= set(CLI["sglang"]["0.5.23"]), set(options) - set(CLI["sglang"]["0.5.23"])
        for opt, choices in CLI["sglang_choices"].items():
            if opt in args:
                assert args[args.index(opt) + 1] in choices
        seen |= set(options)
    assert seen == set(CLI["sglang"]["0.5.23"])
    assert engine.capabilities == frozenset({"multi_node", "speculative", "prefix_caching", "expert_parallel",
                                             "kv_offload", "quantizes_on_load"})


def test_an_sglang_model_is_scaled_on_its_queue_depth_target() -> None:
    cfg = from_platform(load_stack("prod"))
    model = dataclasses.replace(cfg.models[0], name="planner", engine="sglang", target_queue_depth=4)
    assert RULES.queue_target(model).to_dict() == {"record": R.QUEUE_DEPTH_TARGET, "expr": "vector(4)",
                                                   "labels": {"model": "planner"}}


@pytest.fixture(scope="module")
def prod() -> ObservabilityConfig:
    return from_platform(load_stack("prod"))


def test_sglang_recording_rules_give_known_answers(prod: ObservabilityConfig, tmp_path: Path) -> None:
    """Two replicas of `planner`, each with two scheduler processes (TP ranks) reporting the same queue, in SGLang's
    exposition format: the queue counts each pod once; tokens/s are rates; the generated-tokens series of every
    engine includes SGLang's; with no prompt token cached yet (sglang:cached_tokens_total has no series before the
    first hit, sglang 0.5.23 srt/observability/metrics_collector.py) the prefix cache hit rate is 0, not missing,
    and the last prefill batch's sglang:cache_hit_rate gauge (0.9 here) is not what it reads."""
    serving = next(g for g in groups(prod) if g.name == "aifactory-serving")
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": [serving.to_dict()]}, sort_keys=False))
    sel = 'model_name="planner", engine_type="unified", namespace="agents"'
    series = []
    for pod, queue in (("planner-a", 3), ("planner-b", 5)):
        for rank in ("0", "1"):
            series.append({"series": f'sglang:num_queue_reqs{{{sel}, pod="{pod}", tp_rank="{rank}", pp_rank="0", '
                                     f'moe_ep_rank="0"}}', "values": f"{queue}x20"})
        series.append({"series": f'sglang:generation_tokens_total{{{sel}, pod="{pod}", is_streaming="true"}}',
                       "values": "0+600x20"})  # 600 tokens a minute: 10/s per pod
        series.append({"series": f'sglang:prompt_tokens_total{{{sel}, pod="{pod}", is_streaming="true"}}',
                       "values": "0+2400x20"})
        series.append({"series": f'sglang:cache_hit_rate{{{sel}, pod="{pod}", tp_rank="0", pp_rank="0", '
                                 'moe_ep_rank="0"}', "values": "0.9x20"})
    test = {"rule_files": ["rules.yaml"], "evaluation_interval": "1m", "tests": [{
        "interval": "1m", "input_series": series,
        "promql_expr_test": [
            {"expr": S.QUEUE, "eval_time": "10m", "exp_samples": [{"labels": f'{S.QUEUE}{{model="planner", '
                                                                            'model_name="planner"}', "value": 8}]},
            {"expr": S.QUEUE_PER_REPLICA, "eval_time": "10m",
             "exp_samples": [{"labels": f'{S.QUEUE_PER_REPLICA}{{model="planner", model_name="planner"}}',
                              "value": 4}]},
            {"expr": R.GENERATED_TOKENS, "eval_time": "10m",
             "exp_samples": [{"labels": f'{R.GENERATED_TOKENS}{{model="planner", model_name="planner"}}',
                              "value": 20}]},
            {"expr": S.CACHE_HIT, "eval_time": "10m",
             "exp_samples": [{"labels": f'{S.CACHE_HIT}{{model="planner", model_name="planner"}}', "value": 0}]},
        ]}]}
    (tmp_path / "test.yaml").write_text(yaml.safe_dump(test, sort_keys=False))
    out = promtool("test", "rules", str(tmp_path / "test.yaml"), timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr


def test_a_stack_may_give_an_sglang_model_several_nodes_and_kv_offload_on_infiniband() -> None:
    """The stack model asks the registry: SGLang declares multi-node and KV offload, so gpusPerReplica beyond a
    node and kvOffloadGiB are accepted for it; on InfiniBand the leader runs behind the NCCL guard for `IB`."""
    cfg = parse({
        "target": {"provider": "existing", "kubeconfig": "/dev/null", "storageClass": "fast"},
        "nodePools": {"gpu": {"instanceType": "dgx-h100", "fabric": "infiniband", "minSize": 2, "maxSize": 2}},
        "tenants": {"t": {"gpuQuota": 64}},
        "models": {"m": {"engine": "sglang", "model": "org/m", "tenant": "t", "pool": "gpu", "tensorParallel": 8,
                         "pipelineParallel": 2, "kvOffloadGiB": 256}},
        "observability": {"prices": {"dgx-h100": 30.0}},
    }, stack="unit")
    m = cfg.models["m"]
    assert (m.multi_node, m.nodes_per_replica, m.kv_offload_gib) == (True, 2, 256.0)
    lws = workload(cfg, m)
    leader = lws["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]["containers"][0]
    assert leader["command"][3:5] == ["infiniband", "--"]
    serve = leader["command"][5:]
    # 256 GiB over 16 ranks: 17.18 GB each
    assert serve[serve.index("--hicache-size") + 1] == "17" and "--enable-hierarchical-cache" in serve
    assert serve[serve.index("--pp-size") + 1] == "2" and "--nnodes" in serve


def test_prod_serves_its_tool_calling_specialist_on_sglang_and_synth_policy_and_preflight_pass() -> None:
    """stacks/Pulumi.prod.yaml's assistant-tools: synthesized with the rest of prod, its Deployment runs SGLang's
    launch_server, KEDA scales it on SGLang's queue, Prometheus scrapes its /metrics, the stack gives it session
    affinity (on by default: the engine reuses KV blocks), and neither the policy pack nor preflight has
    anything to say about the stack."""
    result = run_program("prod", read_stack_config(stack_file("prod")))
    entries = state_export(result)["deployment"]["resources"]
    mine = {e["type"].rsplit(":", 1)[-1]: e["inputs"] for e in entries
            if (e.get("inputs", {}).get("metadata") or {}).get("name") == "assistant-tools"}
    assert {"StatefulSet", "Service", "ServiceMonitor", "ScaledObject", "ServiceAccount"} <= set(mine)
    (c,) = mine["StatefulSet"]["spec"]["template"]["spec"]["containers"]
    assert (c["name"], c["image"]) == ("sglang", "lmsysorg/sglang:v0.5.23")
    assert c["command"] == ["python3", "-m", "sglang.launch_server", "--model-path", "Qwen/Qwen3-8B", "--host",
                            "0.0.0.0", "--port", "8000", "--served-model-name", "assistant-tools", "--tp-size", "1",
                            "--pp-size", "1", "--enable-metrics", "--context-length", "32768", *PARSERS]
    assert c["resources"]["limits"]["nvidia.com/gpu"] == "1"
    (trigger,) = mine["ScaledObject"]["spec"]["triggers"]
    assert trigger["metadata"]["query"].startswith("sum(max by (pod) (sglang:num_queue_reqs{")
    assert trigger["metadata"]["threshold"] == "8"
    assert mine["ServiceMonitor"]["spec"]["endpoints"][0]["path"] == "/metrics"
    assert result.config.models["assistant-tools"].session_affinity_balance_factor == 125
    assert run_policies(entries) == []
    assert run_rules(pf.from_entries(entries), result.config) == []


def test_a_fidelity_gated_variant_on_sglang_is_fingerprinted_by_what_sglang_runs() -> None:
    """prod's finance-8b AWQ variant moved to SGLang: the stack still validates with its gate, the variant is held
    back until evaluated (no recorded result), and what its evaluation is current for is SGLang's image and
    launch_server command, not another engine's."""
    raw = stack_raw("prod")
    raw["models"]["finance-8b"]["engine"] = "sglang"
    cfg = parse(raw, stack="prod")
    (verdict,) = [v for v in fidelity.verdicts(cfg, {}) if v.variant == "finance-8b"]
    assert not verdict.routable
    facts = fidelity.evaluated_facts(cfg, cfg.models["finance-8b"])
    assert (facts["engine"], facts["image"]) == ("sglang", "lmsysorg/sglang:v0.5.23")
    assert facts["args"][:5] == ["python3", "-m", "sglang.launch_server", "--model-path",
                                 "hugging-quants/Meta-Llama-3.1-8B-Instruct-AWQ-INT4"]
    assert "--speculative-algorithm" in facts["args"] and "--quantization" not in facts["args"]  # AWQ checkpoint
    on_vllm = fidelity.evaluated_facts(stack_config("prod"), stack_config("prod").models["finance-8b"])
    assert fidelity.fingerprint(facts) != fidelity.fingerprint(on_vllm)


def test_sglang_exports_no_engine_spans_because_its_opentelemetry_is_an_optional_extra(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """SGLang 0.5.23 can export OTLP spans (--enable-trace, --otlp-traces-endpoint), but raises at start-up when the
    OpenTelemetry SDK is missing (srt/observability/trace.py process_tracing_init), and its wheel lists the SDK
    only under the optional `tracing` extra (tests/fixtures/engines/cli.yaml, from its METADATA). Until the image's
    packages are pinned the kit asks for no engine spans: no flag, no OTEL_* environment, and `aifactory verify`
    takes the gateway's span alone for the model's trace."""
    otel = {"opentelemetry-sdk", "opentelemetry-exporter-otlp-proto-grpc"}
    assert not otel & set(CLI["sglang_requires"]["0.5.23"]) and otel <= set(CLI["sglang_tracing_extra"]["0.5.23"])
    engine = ENGINES["sglang"]
    assert engine.exports_spans is False
    model = stack_config("prod").models["assistant-tools"]
    tracing = EngineTracing(grpc_endpoint="http://collector:4317", sample_ratio=0.2)
    assert not {"--enable-trace", "--otlp-traces-endpoint"} & set(engine.command(model, tracing=tracing))
    assert engine.trace_env(model, tracing) == []
    hop = _trace_hop(monkeypatch, "assistant-tools", _jaeger_trace(("aifactory-gateway", "g", None)))
    assert (hop.ok, hop.saw) == (True, "1 span(s) of aifactory-gateway; sglang exports no engine spans")


def test_verify_looks_for_sglangs_series_and_its_queue_query(monkeypatch: pytest.MonkeyPatch) -> None:
    """`aifactory verify`'s metric hops for an SGLang model: any sglang:* series of the model's pods, and the very
    query KEDA scales it on."""
    from infra.verify import signals

    asked: list[str] = []
    monkeypatch.setattr(signals, "_prom_query", lambda endpoints, expr, *, timeout: asked.append(expr) or [
        {"value": [0, "1"]}])
    cfg = stack_config("prod")
    checks = signals.metric_checks(REPORT.endpoints, cfg, cfg.models["assistant-tools"], timeout=1)
    hops = [c() for c in checks]
    assert [h.hop for h in hops] == ["metrics:gateway", "metrics:engine", "metrics:sidecar", "metrics:autoscaling"]
    assert asked[1] == 'count({__name__=~"sglang:.+", namespace="assistant", aifactory_io_model="assistant-tools"})'
    assert asked[3] == ('sum(max by (pod) (sglang:num_queue_reqs{namespace="assistant",'
                        'aifactory_io_model="assistant-tools"}))')
