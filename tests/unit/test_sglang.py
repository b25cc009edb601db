"""SGLang, the third engine: its serving objects, flags, probes, scaling and gateway paths from its module alone
(components.k8s.engines.sglang), every option it is given checked against SGLang 0.5.23's own fields
(tests/fixtures/engines/cli.yaml), and its recording rules with known answers under promtool."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import yaml

from components.k8s import envoy_config as ec
from components.k8s.engines import ENGINES
from components.k8s.engines.sglang import DEFAULT_SGLANG_IMAGE, sglang_args
from components.k8s.serving import ModelDeploymentArgs, model_objects, serving_spec
from components.k8s.values import Speculative
from dashboards.config import ObservabilityConfig
from dashboards.engines.sglang import RULES, S
from dashboards.rules import R, groups
from infra.monitoring import from_platform
from infra.synth import load_stack
from tests.support.prometheus import promtool

CLI = yaml.safe_load((Path(__file__).resolve().parents[1] / "fixtures" / "engines" / "cli.yaml").read_text())


def _args(**extra: Any) -> ModelDeploymentArgs:
    a: ModelDeploymentArgs = {"engine": "sglang", "model": "Qwen/Qwen3-8B", "tenant": "agents",
                              "model_name": "planner", "pool": {"name": "l40s", "instance_type": "g6e.12xlarge"},
                              "tensor_parallel": 2, "storage_class": "fast-nvme", "replicas": {"min": 1, "max": 3}}
    a.update(extra)  # type: ignore[typeddict-item]
    return a


def test_an_sglang_model_runs_its_launch_server_with_its_probes_and_metrics() -> None:
    spec = serving_spec("planner", _args())
    objs = {o["kind"]: o for o in model_objects(spec, spec.model)}
    pod = objs["Deployment"]["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    assert (c["name"], c["image"]) == ("sglang", "lmsysorg/sglang:v0.5.23") and DEFAULT_SGLANG_IMAGE == c["image"]
    assert c["command"] == ["python3", "-m", "sglang.launch_server", "--model-path", "Qwen/Qwen3-8B",
                            "--host", "0.0.0.0", "--port", "8000", "--served-model-name", "planner",
                            "--tp-size", "2", "--pp-size", "1", "--enable-metrics"]
    assert c["ports"] == [{"name": "http", "containerPort": 8000, "protocol": "TCP"}]
    assert [c[p]["httpGet"]["path"] for p in ("startupProbe", "livenessProbe", "readinessProbe")] == \
        ["/health_generate", "/health", "/health_generate"]
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
                                   "--disable-radix-cache"]
    # a pre-quantized AWQ checkpoint declares its method itself: no flag
    assert "--quantization" not in sglang_args(serving_spec("planner", _args(quantization="awq")).model)
    eagle = dataclasses.replace(m, speculative=Speculative("org/eagle3-head", 3, "eagle3"), quantization="none",
                                expert_parallel=False, max_model_length=None, prefix_caching=True)
    assert sglang_args(eagle)[13:] == ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path",
                                       "org/eagle3-head", "--speculative-num-steps", "3",
                                       "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"]
    ngram = dataclasses.replace(eagle, speculative=Speculative(None, 5, "ngram"))
    assert sglang_args(ngram)[13:] == ["--speculative-algorithm", "NGRAM", "--speculative-num-draft-tokens", "5"]
    embed = serving_spec("e", _args(task="embed")).model
    assert "--is-embedding" in sglang_args(embed)
    assert ec.OPENAI_APIS["sglang"] == {"generate": ("v1/chat/completions", "v1/completions", "v1/models",
                                                     "v1/models/[^/]+"),
                                        "embed": ("v1/embeddings", "v1/models", "v1/models/[^/]+")}
    assert ec.HEALTH_PATHS["sglang"] == "/health"


def test_every_sglang_option_the_kit_passes_exists_at_its_images_version() -> None:
    """Every option (and choice value) any model setting reaches is a field of SGLang 0.5.23's server args."""
    base = serving_spec("planner", _args()).model
    models = [base, serving_spec("e", _args(task="embed")).model,
              *(dataclasses.replace(base, quantization=q, quantized_checkpoint=False)
                for q in ("fp8", "awq", "gptq", "int8")),
              dataclasses.replace(base, expert_parallel=True, max_model_length=4096, prefix_caching=False),
              *(dataclasses.replace(base, speculative=Speculative("org/d" if m != "ngram" else None, 4, m))  # type: ignore[arg-type]
                for m in ("eagle3", "eagle", "ngram"))]
    seen: set[str] = set()
    for m in models:
        args = sglang_args(m)
        options = [a for a in args if a.startswith("--")]
        assert set(options) <= set(CLI["sglang"]["0.5.23"]), set(options) - set(CLI["sglang"]["0.5.23"])
        for opt, choices in CLI["sglang_choices"].items():
            if opt in args:
                assert args[args.index(opt) + 1] in choices
        seen |= set(options)
    assert seen == set(CLI["sglang"]["0.5.23"])
    assert ENGINES["sglang"].capabilities == frozenset({"speculative", "prefix_caching", "expert_parallel",
                                                        "quantizes_on_load"})


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
    engine includes SGLang's."""
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
        ]}]}
    (tmp_path / "test.yaml").write_text(yaml.safe_dump(test, sort_keys=False))
    out = promtool("test", "rules", str(tmp_path / "test.yaml"), timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
