"""Known-answer runs of the fidelity gate: the real lm-evaluation-harness against fake OpenAI-compatible models
whose right answers, silences and failures are known per item (tests/support/graded_backend.py), and the verdict
each case must get: an under-powered suite, a silent baseline, a variant that answers nothing, a collapsed
category, a flaky variant, a timeout, and 94% vs 95%."""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra import evaluate, fidelity
from infra.fidelity_stats import Table, drop_interval, min_items, run_alpha, z_for
from infra.synth import load_stack
from tests.support.graded_backend import GradedBackend, draw
from tests.unit.test_fidelity_eval import TOKEN, items, make_stacks, results, right_answer, run_eval

KINDS = {"exact": "spelling", "regex": "tickets", "numeric": "division", "json-schema": "extraction"}
FX = ("q0", "q1")  # a 1% category of a 200-item suite


def categorised() -> list[dict[str, Any]]:
    return [{**i, "category": "fx" if i["id"] in FX else KINDS[i["scorer"]]} for i in items()]


def backend(suite: list[dict[str, Any]], accuracy: dict[str, float], **kw: Any) -> GradedBackend:
    return GradedBackend({i["prompt"]: (i["id"], right_answer(i)) for i in suite}, accuracy=accuracy, token=TOKEN,
                         category_of={i["id"]: i.get("category") for i in suite if i.get("category")}, **kw)


def verdicts_of(stacks: Path) -> dict[str, fidelity.Verdict]:
    return {v.variant: v for v in fidelity.load_verdicts(load_stack("t", stacks), stacks)}


def test_an_under_powered_suite_gets_no_verdict_even_when_every_answer_agrees(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """30 items, three variants that answer exactly as the baseline: the Wald interval passed them ([0, 0]); no
    30-item suite can show a drop of at most 0.05 at the run's level, so none is judged."""
    stacks = make_stacks(tmp_path / "stacks", suite=items()[:30])
    same = {"chat-bf16": 0.95, "chat-good": 0.95, "chat-bad": 0.95}
    with backend(items(), same) as b:
        assert run_eval(stacks, b.url) == 0
    need = min_items(0.05, alpha=run_alpha(1) / 2)  # Holm's first step over the two variants
    assert need is not None and need > 30
    found = verdicts_of(stacks)
    assert {k: v.status for k, v in found.items()} == {"chat-bad": "underpowered", "chat-bf16": "baseline",
                                                       "chat-good": "underpowered"}
    assert found["chat-good"].message == (
        "workload 'chat': variant 'chat-good' is not judged: suite 'chat-arith' has 30 items, too few to show a "
        "drop of at most maxDrop 0.050 even for a variant that agrees with the baseline on every item (one-sided "
        f"0.625%: at least {need} items); grow the suite or raise maxDrop")
    assert found["chat-good"].message in capsys.readouterr().out


@pytest.mark.parametrize("silence", ["null-content", "no-choices"])
def test_a_silent_baseline_vouches_for_no_variant(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                  silence: str) -> None:
    """The baseline answers HTTP 200 without content: it scores 0, and against it every variant would pass. Its
    unanswered items are counted; no variant is judged; the run exits 1."""
    stacks = make_stacks(tmp_path / "stacks")
    with backend(items(), {"chat-bf16": 0.95, "chat-good": 0.94, "chat-bad": 0.80}, broken={"chat-bf16": silence}) as b:
        assert run_eval(stacks, b.url) == 1
    rec = results(stacks)["workloads"]["chat"]["variants"]
    assert (rec["chat-bf16"]["correct"], rec["chat-bf16"]["answered"]) == (0, 0)
    found = verdicts_of(stacks)
    assert {k: v.status for k, v in found.items()} == {"chat-bad": "error", "chat-bf16": "baseline",
                                                       "chat-good": "error"}
    assert found["chat-good"].message == (
        "workload 'chat': variant 'chat-good' cannot be judged: baseline 'chat-bf16' left 200 of 200 items unanswered "
        "(100%), more than maxUnanswered 5%: its endpoint answered without content (null or empty content, or an "
        "error body without choices; a reasoning model short of max tokens?); that is the endpoint, not the model: "
        "fix it and evaluate again")
    out = capsys.readouterr().out
    assert "  chat-bf16                 0.000  0.000-0.019         200" in out


def test_a_baseline_below_its_floor_vouches_for_no_variant(tmp_path: Path) -> None:
    """A baseline that answers, but wrong (the wrong suite, wrong references): below minBaselineScore."""
    stacks = make_stacks(tmp_path / "stacks", gate={"minBaselineScore": 0.6})
    with backend(items(), {"chat-bf16": 0.5, "chat-good": 0.5, "chat-bad": 0.5}) as b:
        assert run_eval(stacks, b.url) == 1
    base = sum(draw(i["id"]) < 0.5 for i in items()) / 200
    found = verdicts_of(stacks)
    assert found["chat-good"].status == "error"
    assert found["chat-good"].message == (
        f"workload 'chat': variant 'chat-good' cannot be judged: baseline 'chat-bf16' scored {base:.3f} on suite "
        "'chat-arith', below minBaselineScore 0.600: a baseline that fails its own suite vouches for no variant (a "
        "broken endpoint, the wrong suite or wrong references?)")


def test_a_variant_that_answers_nothing_fails_its_evaluation_not_its_model(tmp_path: Path) -> None:
    stacks = make_stacks(tmp_path / "stacks")
    with backend(items(), {"chat-bf16": 0.95, "chat-good": 0.95, "chat-bad": 0.95},
                 broken={"chat-bad": "null-content"}) as b:
        assert run_eval(stacks, b.url) == 1
    found = verdicts_of(stacks)
    assert (found["chat-good"].status, found["chat-bad"].status) == ("passed", "error")
    assert found["chat-bad"].message.startswith("workload 'chat': variant 'chat-bad''s evaluation failed: it left 200 "
                                                "of 200 items unanswered (100%), more than maxUnanswered 5%")


def test_a_collapsed_category_fails_its_guard_and_shows_in_the_report(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """chat-good answers as the baseline, except the two items of the 1% category fx, which it gets all wrong:
    the aggregate drop (0.010) passes maxDrop 0.05; the category guard does not."""
    suite = categorised()
    accuracy = {"chat-bf16": 0.95, "chat-good": 0.95, "chat-bad": 0.80}
    lost = {"chat-good": frozenset({"fx"})}
    assert all(draw(i) < 0.95 for i in FX)  # the baseline gets both right
    plain = make_stacks(tmp_path / "plain", suite=suite)
    with backend(suite, accuracy, lost_categories=lost) as b:
        assert run_eval(plain, b.url) == 0
        assert verdicts_of(plain)["chat-good"].status == "passed"  # the aggregate alone misses it
        guarded = make_stacks(tmp_path / "guarded", suite=suite, gate={"categories": {"*": {"maxDrop": 0.25}}})
        capsys.readouterr()
        assert run_eval(guarded, b.url) == 0
    out = capsys.readouterr().out
    found = verdicts_of(guarded)
    assert found["chat-good"].status == "failed"
    assert found["chat-good"].message.endswith("; category 'fx' scored 0.000 (0/2) vs the baseline's 1.000: drop "
                                               "1.000, more than its maxDrop 0.250")
    assert "  worst categories of chat-good: fx 0/2 (baseline 2, -1.000)\n" in out
    rec = results(guarded)["workloads"]["chat"]["variants"]
    assert rec["chat-good"]["categories"]["fx"] == {"items": 2, "correct": 0}
    assert rec["chat-bf16"]["categories"]["fx"] == {"items": 2, "correct": 2}


def test_a_flaky_variant_keeps_the_others_results_and_every_run_is_kept(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """chat-bad's engine answers 500 to every request: its run fails with one line, without asyncio's "Task
    exception was never retrieved" tracebacks, and the baseline's and chat-good's results are recorded. A second,
    healthy run is appended and tested at the second run's share of the level."""
    stacks = make_stacks(tmp_path / "stacks")
    accuracy = {"chat-bf16": 0.95, "chat-good": 0.94, "chat-bad": 0.80}
    with backend(items(), accuracy, broken={"chat-bad": "http-500"}) as b:
        assert run_eval(stacks, b.url) == 1
        gc.collect()
        err = capsys.readouterr().err
        assert err.endswith(f"aifactory: eval: variant 'chat-bad' at {b.url}: HTTP 500: Internal Server Error\n")
        assert "Task exception was never retrieved" not in err and "Traceback" not in err
        rec = results(stacks)["workloads"]["chat"]
        assert sorted(rec["variants"]) == ["chat-bf16", "chat-good"]
        assert rec["runs"][0]["failed"] == {"chat-bad": f"variant 'chat-bad' at {b.url}: HTTP 500: Internal Server "
                                                       "Error"}
        found = verdicts_of(stacks)
        assert {k: v.status for k, v in found.items()} == {"chat-bad": "missing", "chat-bf16": "baseline",
                                                           "chat-good": "passed"}
        assert "(one-sided 1.25%)" in found["chat-good"].message  # alone in its run: Holm's one step
    with backend(items(), accuracy) as b:
        assert run_eval(stacks, b.url) == 0
    rec = results(stacks)["workloads"]["chat"]
    assert len(rec["runs"]) == 2 and "failed" not in rec["runs"][1]
    found = verdicts_of(stacks)
    # chat-good's second run with the same fingerprint spends 0.625%, shared by two variants: Holm tests the
    # smaller p-value, chat-good's, at 0.3125%
    assert (fidelity.run_number(rec, "chat-good", "chat-bf16"), fidelity.run_number(rec, "chat-bad", "chat-bf16")) \
        == (2, 1)
    assert found["chat-good"].status == "passed" and "(one-sided 0.312%)" in found["chat-good"].message


def test_a_timeout_names_the_limit_and_the_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stacks = make_stacks(tmp_path / "stacks", suite=items()[:4])
    with backend(items(), {"chat-bf16": 0.95, "chat-good": 0.95, "chat-bad": 0.95}, broken={"chat-bf16": "slow"},
                 slow_seconds=2.5) as b:
        code = run_eval(stacks, b.url, "--timeout", "1")
    assert code == 1
    assert capsys.readouterr().err.endswith(
        f"aifactory: eval: variant 'chat-bf16' at {b.url}: a request took longer than --timeout 1s (lm-eval's "
        "`timeout`: connection to last byte, each try); raise --timeout, or lower --concurrency if the endpoint "
        "queues\n")


def test_94_against_95_percent_does_not_pass_maxdrop_three_points(tmp_path: Path) -> None:
    """200 items: the baseline right on 190, the variant on 188, 3 lost and 1 gained. The Wald bound 0.0296
    passed maxDrop 0.03; Newcombe's, at the run's 1.25%, is above it."""
    stacks = make_stacks(tmp_path / "stacks", gate={"maxDrop": 0.03})
    doc = yaml.safe_load((stacks / "Pulumi.t.yaml").read_text())
    del doc["config"]["aifactory:models"]["chat-bad"]
    (stacks / "Pulumi.t.yaml").write_text(yaml.safe_dump(doc))
    cfg = load_stack("t", stacks)
    suite = fidelity.load_suite(stacks, "chat-arith")
    base = [1.0] * 190 + [0.0] * 10
    variant = [1.0] * 187 + [0.0] * 3 + [1.0] + [0.0] * 9
    report = evaluate.Report("t", "chat", suite, "chat-bf16", 0.03, (
        evaluate.VariantScore("chat-good", tuple(variant), (True,) * 200, 0.94, None),
        evaluate.VariantScore("chat-bf16", tuple(base), (True,) * 200, 0.95, None)),
        {m: fidelity.evaluated_facts(cfg, cfg.models[m]) for m in ("chat-good", "chat-bf16")})
    rec = evaluate.record({}, report, now="2026-11-25T00:00:00Z")
    (found,) = [v for v in fidelity.verdicts(cfg, rec) if v.variant == "chat-good"]
    bound = drop_interval(Table(187, 3, 1, 9), z=z_for(0.0125))[2]
    assert found.status == "failed"
    assert found.message.startswith(
        "workload 'chat': variant 'chat-good' scored 0.940 on suite 'chat-arith' vs baseline 'chat-bf16' 0.950: drop "
        f"0.010, at most {bound:.3f} (one-sided 1.25%), more than maxDrop 0.030; ")
    assert round(bound, 3) == 0.044
