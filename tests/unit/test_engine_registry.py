"""The engine registry: every engine is one module behind one interface (components.k8s.engines for what it runs,
dashboards.engines for how it is watched), and nothing else in the kit branches on an engine's name, so a new engine
is its modules plus a registry line."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from components.k8s.engines import CAPABILITIES, ENGINES, Engine, engine_named
from components.k8s.engines.base import EngineSite, EngineTracing, Role
from components.k8s.gateway.envoy import config as ec
from components.k8s.gateway.envoy.base import retriable_status_codes
from components.k8s.serving import model_objects, pod_spec, scaling_query, serving_spec
from components.k8s.settings import MODEL_TASKS, Model
from dashboards.engines import ENGINE_RULES, rules_of

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("components", "dashboards", "infra")
REGISTRIES = ("components/k8s/engines", "dashboards/engines")
# Files that still name engines, each for its reason; a file that no longer does fails the test (the list only
# shrinks).
ALLOWED = {
    # Selector families: the exporters' metric-name prefixes and the `selectors.<family>` config keys, named like
    # the engines whose series they select; the engines' rules reach them through the metric names.
    "dashboards/config.py": "the selector families (observability.selectors.vllm / .triton / .sglang)",
    "dashboards/promql.py": "the metric-name prefix of each selector family",
}


def _engine_names_in(source: str) -> list[int]:
    """The lines where a module writes an engine's name as a string (docstrings and comments aside):
    `engine == "x"`, `Literal["x"]`, a dict keyed by engine, ..."""
    tree = ast.parse(source)
    docstrings = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)}
    return sorted(n.lineno for n in ast.walk(tree)
                  if isinstance(n, ast.Constant) and n.value in ENGINES and id(n) not in docstrings)


def test_only_the_registries_name_an_engine() -> None:
    found: dict[str, list[int]] = {}
    for pkg in SCANNED:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel.startswith(REGISTRIES) or "__pycache__" in path.parts:
                continue
            if lines := _engine_names_in(path.read_text()):
                found[rel] = lines
    assert {f: lines for f, lines in found.items() if f not in ALLOWED} == {}, "branch on the registry instead"
    assert sorted(set(ALLOWED) - set(found)) == [], "no engine name left there: remove it from ALLOWED"


def test_the_scan_sees_an_engine_branch_and_skips_prose() -> None:
    source = '"""Serves vllm."""\nif model.engine == "vllm":\n    pass\nx = {"triton": 1}\n'
    assert _engine_names_in(source) == [2, 4]


def test_both_registries_name_the_same_engines_in_the_same_order() -> None:
    assert list(ENGINES) == list(ENGINE_RULES) == ["vllm", "triton", "sglang"]
    assert [e.title for e in ENGINES.values()] == [r.title for r in ENGINE_RULES.values()] == \
        ["vLLM", "Triton", "SGLang"]
    assert all(ENGINES[n].name == n and ENGINE_RULES[n].name == n for n in ENGINES)


def test_an_unknown_engine_is_refused_with_the_known_ones() -> None:
    with pytest.raises(ValueError, match=r"^engine 'tgi' is not known; choose one of: vllm, triton, sglang$"):
        engine_named("tgi")
    with pytest.raises(ValueError, match=r"^engine 'tgi' is not known; choose one of: vllm, triton, sglang$"):
        rules_of("tgi")


def test_each_engines_facts() -> None:
    """vLLM v0.33.0 and Triton r26.07's OpenAI frontend: paths, tasks, quantization and capabilities (sources in
    each engine's module; docs/contracts.md, "Engines")."""
    vllm, triton = ENGINES["vllm"], ENGINES["triton"]
    assert (vllm.health_path, vllm.ready_path, triton.health_path, triton.ready_path) == \
        ("/health", "/v1/models", "/health/ready", "/health/ready")
    # Triton's frontend embeds only through Triton's vLLM backend, which the TensorRT-LLM image has not
    # (r26.07 engine/utils/triton.py _create_trtllm_embedding_request): task generate only
    assert (vllm.tasks, triton.tasks) == (("generate", "embed", "rerank"), ("generate",))
    assert all(set(e.tasks) <= set(MODEL_TASKS) for e in ENGINES.values())
    assert (vllm.metric_prefix, triton.metric_prefix) == ("vllm:", "nv_")
    assert vllm.capabilities == frozenset(CAPABILITIES)
    assert triton.capabilities == frozenset()
    assert dict(vllm.quantization_methods) == {"none": None, "fp8": "fp8", "awq": "awq_marlin",
                                               "gptq": "gptq_marlin", "int8": "compressed-tensors"}
    assert dict(triton.quantization_methods) == {"none": None, "fp8": "fp8", "awq": "int4_awq", "int8": "int8_sq"}
    assert [q for q in ("none", "fp8", "awq", "gptq", "int8") if not vllm.default_quantized_checkpoint(q)] == ["fp8"]
    assert all(triton.default_quantized_checkpoint(q) for q in ("none", "fp8", "awq", "int8"))


def test_the_gateway_tables_are_the_registrys() -> None:
    assert ec.HEALTH_PATHS == {"vllm": "/health", "triton": "/health/ready", "sglang": "/health"}
    assert ec.OPENAI_APIS == {n: dict(e.openai_apis) for n, e in ENGINES.items()}
    assert list(ec.OPENAI_APIS["triton"]) == ["generate"]


@dataclasses.dataclass(frozen=True, eq=False)
class _Toy(Engine):
    """A third engine, as a new module would write it."""

    def image(self, site: EngineSite, model: Model) -> str:
        return "example.com/toy:1"

    def command(self, model: Model, *, role: Role = "single", tracing: EngineTracing | None = None,
                fabric_name: str = "none") -> list[str]:
        return ["toy-serve", model.model]

    def scaling_query(self, selector: str, model: Model) -> tuple[str, str, str]:
        return (f"sum(toy_waiting{{{selector}}})", "AverageValue", "7")

    def env(self, model: Model) -> list[dict[str, str]]:
        return [{"name": "TOY", "value": "1"}]

    def pod_annotations(self, model: Model) -> dict[str, str]:
        return {"example.com/toy": "yes"}


TOY = _Toy(name="toy", title="Toy", health_path="/live", ready_path="/ready",
           openai_apis={"generate": ("v1/chat/completions",)}, metric_prefix="toy_",
           quantization_methods={"none": None}, load_time_quantization=frozenset(), multi_node=False,
           speculative=False, prefix_caching=False, expert_parallel=False, kv_offload=False, exports_spans=False,
           retriable_status_codes=(429,))


def test_a_third_engine_is_a_registry_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """Registered, an engine's own module decides the serving objects: container, image, command, environment,
    probes, annotations and scaling query; nothing in serving needs to know its name."""
    monkeypatch.setitem(ENGINES, "toy", TOY)
    spec = serving_spec("m", {"engine": "vllm", "model": "org/m", "tenant": "t", "storage_class": "x",
                              "tool_call_parser": "none", "pool": {"name": "p", "instance_type": "g6e.12xlarge"},
                              "replicas": {"min": 1, "max": 2}})
    model = dataclasses.replace(spec.model, engine="toy")  # type: ignore[arg-type]
    spec = dataclasses.replace(spec, model=model)
    pod = pod_spec(spec, model)
    (container,) = pod["containers"]
    assert (container["name"], container["image"], container["command"]) == \
        ("toy", "example.com/toy:1", ["toy-serve", "org/m"])
    assert {"name": "TOY", "value": "1"} in container["env"]
    assert [container[p]["httpGet"]["path"] for p in ("startupProbe", "livenessProbe", "readinessProbe")] == \
        ["/ready", "/live", "/ready"]
    assert scaling_query(spec, model) == ('sum(toy_waiting{namespace="t",aifactory_io_model="m"})', "AverageValue",
                                          "7")
    objs = {o["kind"]: o for o in model_objects(spec, model)}
    assert objs["StatefulSet"]["spec"]["template"]["metadata"]["annotations"]["example.com/toy"] == "yes"
    assert objs["ScaledObject"]["spec"]["triggers"][0]["metadata"]["query"] == \
        'sum(toy_waiting{namespace="t",aifactory_io_model="m"})'
    # the gateway retries what the engine says another replica may answer better, besides the way's 500 (a replica
    # answering 500 to everything is otherwise a black hole: issue 44), 502 and 503
    assert retriable_status_codes([model]) == [429, 500, 502, 503]
