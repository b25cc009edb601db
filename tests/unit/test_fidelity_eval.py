"""`aifactory eval` and the fidelity gate with the real lm-evaluation-harness against fake OpenAI-compatible
models that are right a known share of the time (tests/support/graded_backend.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra import cli, fidelity
from infra.synth import load_stack
from tests.support.graded_backend import GradedBackend, draw

N_ITEMS = 200
ACCURACY = {"chat-bf16": 0.95, "chat-good": 0.94, "chat-bad": 0.80}
TOKEN = "test-token"

_VARIANT = {"engine": "vllm", "tenant": "t1", "pool": "gpu-a", "workload": "chat"}
STACK: dict[str, Any] = {
    "aifactory:target": {"provider": "aws", "region": "us-east-1", "availabilityZones": ["us-east-1a", "us-east-1b"]},
    "aifactory:cluster": {"apiAccess": "public-and-private", "publicAccessCidrs": ["203.0.113.0/24"]},
    "aifactory:nodePools": {"gpu-a": {"instanceType": "p5.48xlarge", "fabric": "efa", "minSize": 1, "maxSize": 2}},
    "aifactory:tenants": {"t1": {"gpuQuota": 16}},
    "aifactory:models": {
        "chat-bf16": {**_VARIANT, "model": "org/chat", "tensorParallel": 2, "slo": {"e2eSeconds": 1},
                      "variant": {"costPerRequest": 0.004}},
        "chat-good": {**_VARIANT, "model": "org/chat", "quantization": "fp8", "slo": {"e2eSeconds": 2},
                      "variant": {"costPerRequest": 0.002}},
        "chat-bad": {**_VARIANT, "model": "org/chat-awq", "quantization": "awq", "slo": {"e2eSeconds": 4},
                     "variant": {"costPerRequest": 0.001}},
    },
    "aifactory:gateway": {"routing": {"chat": {"fidelity": {"suite": "chat-arith", "baseline": "chat-bf16",
                                                            "maxDrop": 0.05}}}},
}


def items() -> list[dict[str, Any]]:
    """Every fourth item of each scorer kind; answers the fake's right answers satisfy."""
    out: list[dict[str, Any]] = []
    for i in range(N_ITEMS):
        kind = i % 4
        if kind == 0:
            out.append({"id": f"q{i}", "prompt": f"Spell {i} in digits.", "scorer": "exact", "reference": str(i)})
        elif kind == 1:
            out.append({"id": f"q{i}", "prompt": f"Name ticket {i}.", "scorer": "regex",
                        "reference": rf"^TICKET-{i}\b"})
        elif kind == 2:
            out.append({"id": f"q{i}", "prompt": f"What is {i} / 8?", "scorer": "numeric", "reference": i / 8,
                        "tolerance": 0.01})
        else:
            out.append({"id": f"q{i}", "prompt": f"Give item {i} as JSON.", "scorer": "json-schema",
                        "reference": {"type": "object", "required": ["item"],
                                      "properties": {"item": {"const": i}}}})
    return out


def right_answer(item: dict[str, Any]) -> str:
    i = int(item["id"][1:])
    return {"exact": str(i), "regex": f"TICKET-{i} (open)", "numeric": f"About {i / 8:.3f}.",
            "json-schema": f'```json\n{{"item": {i}}}\n```'}[item["scorer"]]


@pytest.fixture
def stacks(tmp_path: Path) -> Path:
    d = tmp_path / "stacks"
    (d / "evals" / "chat-arith").mkdir(parents=True)
    (d / "Pulumi.t.yaml").write_text(yaml.safe_dump({"config": STACK}))
    (d / "evals" / "chat-arith" / "suite.yaml").write_text("description: arithmetic\nmaxTokens: 32\n")
    (d / "evals" / "chat-arith" / "items.jsonl").write_text("".join(json.dumps(i) + "\n" for i in items()))
    (tmp_path / "token").write_text(TOKEN + "\n")
    return d


@pytest.fixture
def backend() -> Any:
    answers = {i["prompt"]: (i["id"], right_answer(i)) for i in items()}
    with GradedBackend(answers, accuracy=ACCURACY, token=TOKEN) as b:
        yield b


def test_eval_scores_each_variant_and_records_the_gate(stacks: Path, backend: GradedBackend,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(["eval", "t", "--workload", "chat", "--url", backend.url, "--token-file",
                     str(stacks.parent / "token"), "--stacks-dir", str(stacks), "--concurrency", "8"])
    out, err = capsys.readouterr()
    print(out, err)
    assert code == 0
    results = yaml.safe_load((stacks / "evals" / "results" / "t.yaml").read_text())
    print(results)
