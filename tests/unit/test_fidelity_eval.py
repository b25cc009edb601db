"""`aifactory eval` and the fidelity gate with the real lm-evaluation-harness against fake OpenAI-compatible
models that are right a known share of the time (tests/support/graded_backend.py)."""

from __future__ import annotations

import gc
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra import cli, fidelity
from infra.fidelity_stats import Table, drop_interval, items_needed, min_items, resolution, run_alpha, z_for
from infra.preflight import preflight_command
from infra.synth import load_stack, synth
from policies.fidelity import fidelity_findings, routed_variants
from policies.preflight import from_entries
from tests.support.graded_backend import GradedBackend, draw
from tests.support.processes import free_port

N_ITEMS = 200
ACCURACY = {"chat-bf16": 0.95, "chat-good": 0.94, "chat-bad": 0.80}
TOKEN = "test-token"

_VARIANT = {"engine": "vllm", "toolCallParser": "none", "tenant": "t1", "pool": "gpu-a", "workload": "chat"}
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
                                                            "maxDrop": 0.05}}},
                          "auth": {"issuers": [{"issuer": "https://sso.example.com/realms/t",
                                                "jwksUri": "https://sso.example.com/realms/t/certs"}]}},
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


def make_stacks(d: Path, *, suite: list[dict[str, Any]] | None = None, gate: dict[str, Any] | None = None) -> Path:
    """A stack `t` with the three variants of STACK and the suite `chat-arith` (default: items()); `gate`: keys
    of its fidelity gate to change."""
    (d / "evals" / "chat-arith").mkdir(parents=True)
    config = json.loads(json.dumps(STACK))
    config["aifactory:gateway"]["routing"]["chat"]["fidelity"].update(gate or {})
    (d / "Pulumi.t.yaml").write_text(yaml.safe_dump({"config": config}))
    (d / "evals" / "chat-arith" / "suite.yaml").write_text("description: arithmetic\nmaxTokens: 32\n")
    (d / "evals" / "chat-arith" / "items.jsonl").write_text(
        "".join(json.dumps(i) + "\n" for i in (items() if suite is None else suite)))
    (d / "token").write_text(TOKEN + "\n")
    return d


def run_eval(stacks: Path, url: str, *extra: str) -> int:
    return cli.main(["eval", "t", "--workload", "chat", "--url", url, "--token-file", str(stacks / "token"),
                     "--stacks-dir", str(stacks), "--concurrency", "8", "--timeout", "10", *extra])


def results_of(stacks: Path, stack: str) -> dict[str, Any]:
    return yaml.safe_load((stacks / "evals" / "results" / f"{stack}.yaml").read_text())


def results(stacks: Path) -> dict[str, Any]:
    return results_of(stacks, "t")


def graded(accuracy: dict[str, float]) -> GradedBackend:
    return GradedBackend({i["prompt"]: (i["id"], right_answer(i)) for i in items()}, accuracy=accuracy, token=TOKEN)


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    """One `aifactory eval` of the three variants (95%, 94%, 80% right), recorded; with its printed report. It runs
    with a TMPDIR of its own and without HF_HOME, to see what it leaves there."""
    stacks = make_stacks(tmp_path_factory.mktemp("evaluated") / "stacks")
    tmpdir = tmp_path_factory.mktemp("tmpdir")
    with graded(ACCURACY) as b, pytest.MonkeyPatch.context() as mp:
        out: list[str] = []
        mp.setattr("sys.stdout.write", out.append)
        mp.setattr("tempfile.tempdir", str(tmpdir))
        mp.delenv("HF_HOME", raising=False)
        code = run_eval(stacks, b.url)
        assert "HF_HOME" not in os.environ  # the run's own home went with the run
    assert code == 0
    assert sorted(tmpdir.iterdir()) == []  # no aifactory-eval-hf-* (nor anything else) left behind
    yield stacks, "".join(out)


def expected_right(accuracy: float) -> int:
    """How many of the suite's items the fake gets right at `accuracy` (its draw per item, not the kit's code)."""
    return sum(draw(i["id"]) < accuracy for i in items())


def test_each_variant_scores_what_its_backend_answers_right(evaluated: tuple[Path, str]) -> None:
    stacks, _ = evaluated
    rec = results(stacks)["workloads"]["chat"]
    assert (rec["suite"], rec["baseline"], rec["items"]) == ("chat-arith", "chat-bf16", N_ITEMS)
    for variant, accuracy in ACCURACY.items():
        v = rec["variants"][variant]
        right = expected_right(accuracy)
        assert v["correct"] == right and v["score"] == right / N_ITEMS
        # the Wilson interval holds the backend's true accuracy, and is about +-3-6 points wide at n=200
        low, high = v["ci95"]
        assert low < accuracy < high and 0.05 < high - low < 0.13


def test_the_record_keeps_the_paired_table_and_every_answer(evaluated: tuple[Path, str]) -> None:
    stacks, _ = evaluated
    rec = results(stacks)["workloads"]["chat"]
    base = expected_right(ACCURACY["chat-bf16"])
    for variant in ("chat-good", "chat-bad"):
        # the fake's right items are nested (a draw below 0.80 is below 0.95): every disagreement is a loss
        right = expected_right(ACCURACY[variant])
        assert rec["variants"][variant]["vsBaseline"] == {"bothRight": right, "lost": base - right, "gained": 0,
                                                          "drop": round((base - right) / N_ITEMS, 6)}
        assert rec["variants"][variant]["answered"] == N_ITEMS
    assert "vsBaseline" not in rec["variants"]["chat-bf16"]
    # every run is kept, compactly
    ((run,),) = [rec["runs"]]
    assert run["evaluatedAt"] == rec["evaluatedAt"] and run["suiteDigest"] == rec["suiteDigest"]
    assert run["variants"]["chat-bad"] == {"fingerprint": rec["variants"]["chat-bad"]["fingerprint"],
                                           "correct": expected_right(0.80), "answered": N_ITEMS,
                                           "bothRight": expected_right(0.80), "lost": base - expected_right(0.80),
                                           "gained": 0}
    # per item, beside the results file, keyed by the variant's fingerprint
    for variant, accuracy in ACCURACY.items():
        entry = rec["variants"][variant]
        path = stacks / "evals" / "results" / entry["outcomes"]
        assert path.name == entry["fingerprint"].removeprefix("sha256:")[:16] + ".jsonl"
        lines = [json.loads(line) for line in path.read_text().splitlines()]
        assert [(x["id"], x["right"], x["answered"]) for x in lines] == [
            (i["id"], draw(i["id"]) < accuracy, True) for i in items()]
        assert {x["fingerprint"] for x in lines} == {entry["fingerprint"]}


def test_the_gate_passes_the_good_variant_and_refuses_the_bad_one_by_name(evaluated: tuple[Path, str]) -> None:
    stacks, report = evaluated
    cfg = load_stack("t", stacks)
    found = {v.variant: v for v in fidelity.load_verdicts(cfg, stacks)}
    assert {k: v.status for k, v in found.items()} == {"chat-bad": "failed", "chat-bf16": "baseline",
                                                       "chat-good": "passed"}
    base, bad = expected_right(0.95) / N_ITEMS, expected_right(0.80) / N_ITEMS
    # Holm over the two variants of the first run (1.25%): chat-good has the smaller p-value, tested at 0.625%;
    # chat-bad at 1.25%
    table = Table(expected_right(0.80), expected_right(0.95) - expected_right(0.80), 0,
                  N_ITEMS - expected_right(0.95))
    worst = drop_interval(table, z=z_for(0.0125))[2]
    assert found["chat-bad"].message == (
        f"workload 'chat': variant 'chat-bad' scored {bad:.3f} on suite 'chat-arith' vs baseline 'chat-bf16' "
        f"{base:.3f}: drop {base - bad:.3f}, at most {worst:.3f} (one-sided 1.25%), more than maxDrop 0.050")
    assert found["chat-bad"].message in report
    assert found["chat-good"].message.endswith("within maxDrop 0.050")


def test_the_report_says_what_the_suite_could_show_and_how_many_items_maxdrop_needs(
        evaluated: tuple[Path, str]) -> None:
    """Per variant: unanswered items, drop and bound at its Holm level, the smallest bound the suite could give it
    (its disagreements split evenly) and the items its shares would need for maxDrop ("none": above it)."""
    _, report = evaluated
    base, good, bad = (expected_right(ACCURACY[v]) for v in ("chat-bf16", "chat-good", "chat-bad"))
    t = Table(good, base - good, 0, N_ITEMS - base)
    drop, _, bound = drop_interval(t, z=z_for(0.00625))
    need = items_needed(t, 0.05, alpha=0.00625)
    line = next(x for x in report.splitlines() if x.startswith("  chat-good "))
    assert line.split()[3:] == ["0", f"+{drop:.3f}", "<=", f"{bound:.3f}", "(0.625%)",
                                f"{resolution(t, alpha=0.00625):.3f}", str(need), "passed"]
    bad_line = next(x for x in report.splitlines() if x.startswith("  chat-bad "))
    assert bad_line.split()[-2:] == ["none", "failed"]


def test_routing_chooses_only_among_variants_that_passed(evaluated: tuple[Path, str], tmp_path: Path) -> None:
    stacks, _ = evaluated
    synth("t", tmp_path / "out", stacks_dir=stacks, progress=None)
    state = json.loads((tmp_path / "out" / "state.json").read_text())
    resources = from_entries(state["deployment"]["resources"])
    ((_, routed),) = routed_variants(resources).values()
    assert sorted(routed) == ["chat-bf16", "chat-good"]
    assert fidelity_findings(resources) == []  # the state's own gate agrees with its routing


def test_a_changed_variant_needs_a_new_result(evaluated: tuple[Path, str], tmp_path: Path) -> None:
    stacks, _ = evaluated
    changed = make_stacks(tmp_path / "stacks")
    (changed / "evals" / "results").mkdir()
    (changed / "evals" / "results" / "t.yaml").write_text((stacks / "evals" / "results" / "t.yaml").read_text())
    doc = yaml.safe_load((changed / "Pulumi.t.yaml").read_text())
    doc["config"]["aifactory:models"]["chat-good"]["quantization"] = "int8"
    doc["config"]["aifactory:models"]["chat-good"]["model"] = "org/chat-w8a8"
    (changed / "Pulumi.t.yaml").write_text(yaml.safe_dump(doc))
    found = {v.variant: v for v in fidelity.load_verdicts(load_stack("t", changed), changed)}
    assert (found["chat-good"].status, found["chat-good"].message) == ("stale", (
        "workload 'chat': variant 'chat-good' has a stale result: it changed since it was evaluated (args changed, "
        "model changed (org/chat -> org/chat-w8a8), preQuantizedCheckpoint changed (False -> True), quantization "
        "changed (fp8 -> int8), uri changed (hf://org/chat -> hf://org/chat-w8a8)); run `aifactory eval t "
        "--workload chat`"))
    # a changed suite makes every result of it stale
    with (changed / "evals" / "chat-arith" / "items.jsonl").open("a") as f:
        f.write(json.dumps({"id": "extra", "prompt": "One more?", "scorer": "exact", "reference": "yes"}) + "\n")
    found = {v.variant: v for v in fidelity.load_verdicts(load_stack("t", changed), changed)}
    assert found["chat-bad"].message == ("workload 'chat': variant 'chat-bad' has a stale result: suite "
                                         "'chat-arith' changed since it was evaluated; run `aifactory eval t "
                                         "--workload chat`")


def test_preflight_refuses_a_deployed_gateway_that_routes_a_variant_whose_result_went_stale(
        evaluated: tuple[Path, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stacks, _ = evaluated
    synth("t", tmp_path / "deployed", stacks_dir=stacks, progress=None)  # routes chat-good (passed)
    doc = yaml.safe_load((stacks / "Pulumi.t.yaml").read_text())
    changed = make_stacks(tmp_path / "stacks")
    (changed / "evals" / "results").mkdir()
    (changed / "evals" / "results" / "t.yaml").write_text((stacks / "evals" / "results" / "t.yaml").read_text())
    doc["config"]["aifactory:models"]["chat-good"]["model"] = "org/chat-v2"
    (changed / "Pulumi.t.yaml").write_text(yaml.safe_dump(doc))
    code = preflight_command("t", state=tmp_path / "deployed" / "state.json", stacks_dir=changed)
    out = capsys.readouterr().out
    assert code == 1
    assert ("fidelity-gate (1)\n  ConfigMap/aifactory-gateway/envoy-config\n      workload 'chat': variant "
            "'chat-good' has a stale result: it changed since it was evaluated (args changed, model changed "
            "(org/chat -> org/chat-v2), uri changed (hf://org/chat -> hf://org/chat-v2)); run `aifactory eval t "
            "--workload chat`; yet the gateway routes workload 'chat''s traffic to it (aggregate clusters "
            "chat__chat-bf16, chat__chat-good)\n") in out


def test_an_unreachable_endpoint_is_one_line_and_exit_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stacks = make_stacks(tmp_path / "stacks")
    port = free_port()
    assert run_eval(stacks, f"http://127.0.0.1:{port}") == 1
    err = capsys.readouterr().err
    assert err.splitlines()[-1] == (f"aifactory: eval: variant 'chat-bf16' at http://127.0.0.1:{port}: cannot reach "
                                    f"127.0.0.1:{port} (Connection refused)")
    assert "Traceback" not in err and not (stacks / "evals" / "results").exists()


def test_a_gateway_refusing_the_token_is_one_line_and_exit_1(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    stacks = make_stacks(tmp_path / "stacks")
    (stacks / "token").write_text("wrong\n")
    with graded(ACCURACY) as b:
        assert run_eval(stacks, b.url) == 1
    err = capsys.readouterr().err
    # the last line, after the harness's progress bar; the token appears nowhere
    assert err.endswith(f"aifactory: eval: variant 'chat-bf16' at {b.url}: HTTP 401: Unauthorized\n")
    assert "Traceback" not in err and "wrong" not in err
    gc.collect()  # the harness's failed requests leave tasks behind: collected, they print nothing either
    assert "Traceback" not in capsys.readouterr().err


@pytest.mark.parametrize(("change", "expected"), [
    ({"gateway.routing.chat.fidelity.baseline": "chat-x"},
     "gateway.routing.chat.fidelity.baseline: 'chat-x' is not a variant of workload 'chat'; its variants: chat-bad, "
     "chat-bf16, chat-good"),
    ({"gateway.routing.chat.fidelity.maxDrop": 1.5}, "gateway.routing.chat.fidelity.maxDrop: 1.5 is above the "
                                                     "maximum 1"),
    ({"gateway.routing.chat.fidelity.suite": "nope"},
     "gateway.routing.chat.fidelity.suite: 'nope' has no suite: {stacks}/evals/nope/items.jsonl does not exist"),
    ({"gateway.routing.chat.fidelity.suite": None}, "gateway.routing.chat.fidelity.suite: is required"),
    ({"gateway.routing.chat.fidelity.minBaselineScore": 1.5},
     "gateway.routing.chat.fidelity.minBaselineScore: 1.5 is above the maximum 1"),
    ({"gateway.routing.chat.fidelity.maxUnanswered": -0.1},
     "gateway.routing.chat.fidelity.maxUnanswered: -0.1 is below the minimum 0"),
    ({"gateway.routing.chat.fidelity.categories": {"fx": {}}},
     "gateway.routing.chat.fidelity.categories.fx: needs minScore (the variant's score on the category's items at "
     "least this) or maxDrop (at most this below the baseline's)"),
])
def test_gate_contradictions_name_the_key_path(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                               change: dict[str, Any], expected: str) -> None:
    stacks = make_stacks(tmp_path / "stacks")
    doc = yaml.safe_load((stacks / "Pulumi.t.yaml").read_text())
    ((path, value),) = change.items()
    node = doc["config"]["aifactory:gateway"]
    *parents, last = path.split(".")[1:]
    for key in parents:
        node = node[key]
    if value is None:
        del node[last]
    else:
        node[last] = value
    (stacks / "Pulumi.t.yaml").write_text(yaml.safe_dump(doc))
    assert run_eval(stacks, "http://127.0.0.1:9") == 2
    err = capsys.readouterr().err
    assert f"  - {expected.format(stacks=stacks)}\n" in err and "Traceback" not in err


def test_a_broken_suite_names_the_file_line_and_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stacks = make_stacks(tmp_path / "stacks")
    with (stacks / "evals" / "chat-arith" / "items.jsonl").open("a") as f:
        f.write(json.dumps({"id": "q0", "prompt": "again", "scorer": "fuzzy", "reference": "x"}) + "\n")
    assert run_eval(stacks, "http://127.0.0.1:9") == 2
    err = capsys.readouterr().err
    items_file = stacks / "evals" / "chat-arith" / "items.jsonl"
    assert (f"  - gateway.routing.chat.fidelity.suite: {items_file}:{N_ITEMS + 1}: scorer: 'fuzzy' is not allowed; "
            "choose one of: exact, regex, numeric, json-schema\n") in err




# --- the shipped example suite: prod's finance-8b (AWQ INT4) against an unquantised baseline

# What a right model answers each item, in the forms models write them (currency signs, thousands separators,
# percent signs, fenced JSON): the suite's scorers must accept all of them.
FINANCE_ANSWERS = {
    "simple-interest": "$1,620.00", "compound-annual": "$16,288.95", "compound-monthly": "$5,635.80",
    "percent-change": "15%", "gross-margin": "35%", "current-ratio": "1.5", "debt-to-equity": "1.5",
    "eps": "$3.00", "pe-ratio": "25", "loan-payment": "$1,199.10", "npv": "$41.32", "cagr": "10%", "vat": "$96.00",
    "fx": "2,700 USD", "basis-points": "35", "straight-line": "$5,000", "break-even": "6,000 units",
    "dividend-yield": "4%", "statement-revenue": "income", "statement-assets": "balance", "debit-credit": "debit",
    "side-prepaid": "asset", "side-unearned": "liability", "bond-price-rates": "down", "iso-currency-yen": "JPY",
    "iso-currency-franc": "CHF", "fiscal-quarter": "Q2", "date-iso": "2025-03-31",
    "extract-invoice": '{"invoice": "INV-2041", "total": 1250.00, "currency": "EUR"}',
    "extract-transaction": '```json\n{"date": "2025-02-14", "amount": 89.99, "direction": "debit"}\n```',
}
SHIPPED = Path(__file__).resolve().parents[2] / "stacks"


def finance_answer(item: fidelity.Item) -> str:
    """What a right model answers: the hand-written forms above, else the reference as a model writes it."""
    if item.id in FINANCE_ANSWERS:
        return FINANCE_ANSWERS[item.id]
    if item.scorer == "numeric":
        return f"{float(item.reference):,.2f}"
    return item.reference.removeprefix("^\\s*").removesuffix("\\b")  # regex: the ISO code itself


def test_the_shipped_finance_suite_is_large_enough_for_its_gate() -> None:
    """prod's finance-8b gate (maxDrop 0.03, one variant): its suite has the items a first and a second run need
    to pass a variant that agrees with the baseline everywhere, as suite.yaml and README state."""
    cfg = load_stack("prod", SHIPPED)
    gate = cfg.gateway.fidelity["finance-8b"]
    suite = fidelity.load_suite(SHIPPED, gate.suite)
    assert (gate.baseline, gate.max_drop, cfg.routing_policy("finance-8b")) == ("finance-8b-bf16", 0.03,
                                                                                "cost-within-deadline")
    assert [v.name for v in cfg.variants_of("finance-8b")] == ["finance-8b", "finance-8b-bf16"]
    assert cfg.models["finance-8b-bf16"].quantization == "none" and cfg.models["finance-8b"].quantization == "awq"
    need = [min_items(0.03, alpha=run_alpha(k)) for k in (1, 2)]
    assert need == [178, 217] and len(suite.items) == 226 >= need[1]
    text = (SHIPPED / "evals" / "finance-qa" / "suite.yaml").read_text()
    assert "226 items" in text and "needs 178" in text and "217 at a second run" in text
    assert set(suite.categories) == {"accounting", "costing", "extraction", "interest", "ratios", "reference-data"}


def test_synth_holds_the_shipped_awq_variant_back_until_it_is_evaluated() -> None:
    found = {v.variant: v for v in fidelity.load_verdicts(load_stack("prod", SHIPPED), SHIPPED)}
    assert (found["finance-8b-bf16"].status, found["finance-8b"].status) == ("baseline", "missing")
    routed = fidelity.routable(load_stack("prod", SHIPPED), list(found.values()))
    assert routed.variants_of("finance-8b") == [routed.models["finance-8b-bf16"]]


@pytest.mark.parametrize(("awq", "status"), [(1.0, "passed"), (0.8, "failed")])
def test_the_shipped_finance_suite_scores_a_right_model_fully_and_gates_the_awq_variant(
        tmp_path: Path, awq: float, status: str) -> None:
    import shutil

    suite = fidelity.load_suite(SHIPPED, "finance-qa")
    assert set(FINANCE_ANSWERS) <= {i.id for i in suite.items}
    assert {i.scorer for i in suite.items} == {"exact", "regex", "numeric", "json-schema"}
    stacks = tmp_path / "stacks"
    shutil.copytree(SHIPPED / "evals" / "finance-qa", stacks / "evals" / "finance-qa")
    shutil.copy(SHIPPED / "Pulumi.prod.yaml", stacks / "Pulumi.prod.yaml")
    (stacks / "token").write_text(TOKEN)
    # every item's right answer is accepted by its scorer; the AWQ variant loses the items whose draw is >= awq
    answers = {i.prompt: (i.id, finance_answer(i)) for i in suite.items}
    with GradedBackend(answers, accuracy={"finance-8b-bf16": 1.0, "finance-8b": awq}, token=TOKEN) as b:
        # finance-8b is named like its workload, which the gateway routes by that name: it is called at its own URL
        code = cli.main(["eval", "prod", "--workload", "finance-8b", "--url", b.url, "--url-for",
                         f"finance-8b={b.url}", "--token-file", str(stacks / "token"), "--stacks-dir", str(stacks)])
    assert code == 0
    rec = results_of(stacks, "prod")["workloads"]["finance-8b"]["variants"]
    assert rec["finance-8b-bf16"]["correct"] == len(suite.items)
    assert rec["finance-8b"]["correct"] == sum(draw(i.id) < awq for i in suite.items)
    found = {v.variant: v.status for v in fidelity.load_verdicts(load_stack("prod", stacks), stacks)}
    assert found == {"finance-8b": status, "finance-8b-bf16": "baseline"}


@pytest.mark.parametrize(("scorer", "reference", "answer", "tolerance", "right"), [
    ("exact", "asset", "  asset\n", 0.0, True),
    ("exact", "asset", "Asset", 0.0, False),  # case counts: write the reference as the workload needs it
    ("regex", r"^\s*Q2\b", "Q2 (August)", 0.0, True),
    ("regex", r"^\s*Q2\b", "It is Q2", 0.0, False),
    ("numeric", "1199.1", "The payment is $1,199.10 a month", 0.5, True),
    ("numeric", "1199.1", "$1,200.00", 0.5, False),
    ("numeric", "-3.5", "-3.5e0", 0.0, True),
    ("numeric", "3", "three", 0.0, False),
    ("json-schema", '{"type": "object", "required": ["a"]}', '{"a": 1}', 0.0, True),
    ("json-schema", '{"type": "object", "required": ["a"]}', '{"b": 1}', 0.0, False),
    ("json-schema", '{"type": "object"}', 'Here: {"a": 1}', 0.0, False),  # prose around the JSON is not JSON
])
def test_scorers(scorer: str, reference: str, answer: str, tolerance: float, right: bool) -> None:
    from infra.fidelity_scorers import score

    assert score(scorer=scorer, reference=reference, answer=answer, tolerance=tolerance) is right


def test_the_pack_refuses_a_state_whose_gateway_routes_a_variant_its_gate_record_holds_back(
        evaluated: tuple[Path, str], tmp_path: Path) -> None:
    """CrossGuard sees only the state: its `aifactory-fidelity` ConfigMap against the Envoy config's routing. A
    state built by the kit agrees with itself; one whose routing was built without the gate (here: the record
    says chat-good's result went stale, the routing still has it) is refused."""
    from components.k8s.fidelity import GATE_CONFIG_MAP, GATE_KEY
    from policies.pack import by_name
    from policies.runner import run_policies

    stacks, _ = evaluated
    synth("t", tmp_path / "out", stacks_dir=stacks, progress=None)
    entries = json.loads((tmp_path / "out" / "state.json").read_text())["deployment"]["resources"]
    policy = [by_name()["fidelity-gate"]]
    assert run_policies(entries, policies=policy) == []
    (cm,) = [e for e in entries if e["type"] == "kubernetes:core/v1:ConfigMap"
             and e["inputs"]["metadata"]["name"] == GATE_CONFIG_MAP]
    gate = json.loads(cm["inputs"]["data"][GATE_KEY])
    gate["chat"]["variants"]["chat-good"] = {"status": "stale", "message": "workload 'chat': variant 'chat-good' "
                                                                          "has a stale result: it changed"}
    for side in ("inputs", "outputs"):
        cm[side]["data"][GATE_KEY] = json.dumps(gate)
    (v,) = run_policies(entries, policies=policy)
    assert (v.policy, v.enforcement, v.message) == (
        "fidelity-gate", "mandatory",
        "ConfigMap/aifactory-gateway/envoy-config: workload 'chat': variant 'chat-good' has a stale result: it "
        "changed; yet the gateway routes workload 'chat''s traffic to it (aggregate clusters chat__chat-bf16, "
        "chat__chat-good)")


def test_a_variant_named_like_its_workload_needs_its_own_url(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """The gateway routes a workload's name to the workload: a variant with that name cannot be reached by it."""
    stacks = make_stacks(tmp_path / "stacks")
    doc = yaml.safe_load((stacks / "Pulumi.t.yaml").read_text())
    models = doc["config"]["aifactory:models"]
    models["chat"] = models.pop("chat-bad")
    doc["config"]["aifactory:gateway"]["routing"]["chat"]["fidelity"]["job"] = {
        "image": "registry.example.com/aifactory:1", "tokenSecret": {"name": "t", "key": "token"}}
    (stacks / "Pulumi.t.yaml").write_text(yaml.safe_dump(doc))
    assert cli.main(["validate", "t", "--stacks-dir", str(stacks)]) == 2
    assert ("  - gateway.routing.chat.fidelity.job: cannot reach variant 'chat' through the gateway: a model named "
            "like its workload has no route of its own") in capsys.readouterr().err
    del doc["config"]["aifactory:gateway"]["routing"]["chat"]["fidelity"]["job"]
    (stacks / "Pulumi.t.yaml").write_text(yaml.safe_dump(doc))
    assert run_eval(stacks, "http://127.0.0.1:9") == 2
    assert ("  - --url-for: is required for variant 'chat': it is named like its workload, and the gateway routes "
            "that name to the workload's routing, not to this variant; give --url-for chat=URL (its engine's base "
            "URL)\n") in capsys.readouterr().err
    # ... so the command the gate tells the user to run gives it, with the port-forward it needs
    cfg = load_stack("t", stacks_dir=stacks)
    forward = f"kubectl -n {cfg.tenant_of(cfg.models['chat']).namespace} port-forward svc/chat 8000:8000"
    assert fidelity.eval_commands(cfg, "chat") == (
        forward, "aifactory eval t --workload chat --url-for chat=http://127.0.0.1:8000")
    assert {v.message.rpartition("; run ")[2] for v in fidelity.verdicts(cfg, {}) if v.variant != "chat-bf16"} == {
        f"`{forward}` and `aifactory eval t --workload chat --url-for chat=http://127.0.0.1:8000`"}
    assert fidelity.eval_commands(cfg, "other") == ("aifactory eval t --workload other",)


@pytest.mark.slow
def test_without_a_result_only_the_baseline_is_routed_and_envoy_accepts_the_config(tmp_path: Path) -> None:
    """The promote flow's first step: variants deployed, nothing recorded. The real Envoy validates the bootstrap
    whose workload routes only to the baseline, and every variant keeps its own model key's route."""
    import subprocess

    from infra.writers.envoy import ENVOY_CONFIG_PATH
    from tests.support.fake_backends import ENVOY

    stacks = make_stacks(tmp_path / "stacks")
    synth("t", tmp_path / "out", stacks_dir=stacks, progress=None)
    state = json.loads((tmp_path / "out" / "state.json").read_text())
    ((_, routed),) = routed_variants(from_entries(state["deployment"]["resources"])).values()
    assert routed == {"chat-bf16": ["chat__chat-bf16"]}
    path = tmp_path / "out" / ENVOY_CONFIG_PATH
    res = subprocess.run([str(ENVOY), "--mode", "validate", "-c", str(path), "--use-dynamic-base-id", "-l",
                          "warning"], capture_output=True, text=True, timeout=60, check=False)
    assert res.returncode == 0, res.stdout + res.stderr
    routes = {r["name"] for listener in yaml.safe_load(path.read_text())["static_resources"]["listeners"]
              for chain in listener["filter_chains"] for f in chain["filters"]
              for vh in f["typed_config"].get("route_config", {}).get("virtual_hosts", []) for r in vh["routes"]
              if "name" in r}
    assert {"chat-good/key-body", "chat-bad/key-body", "chat-bf16/key-body"} <= routes
