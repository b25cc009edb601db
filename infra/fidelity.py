"""Fidelity, the third pillar beside latency and cost: a workload's variant gets traffic only once it has passed
the workload's own evaluation suite against the baseline variant, on the same items, and only while what was
evaluated is what is deployed.

    stacks/evals/<suite>/suite.yaml      description, maxTokens, system prompt (all optional)
    stacks/evals/<suite>/items.jsonl     one item per line: id, prompt, scorer, reference[, tolerance][, category]
    stacks/evals/results/<stack>.yaml    what `aifactory eval` measured, per workload and variant, and every run
    stacks/evals/results/<stack>.items/  per-item outcomes, one JSONL per variant fingerprint (both reviewed, committed)

A result is current while the variant's fingerprint (engine, image and flags, model id and URI, quantization:
`fingerprint()`), the baseline's fingerprint, the suite's digest and the gate's suite and baseline are those it
was measured with. A variant passes when the upper end of the one-sided interval of its drop against the baseline
on the same items (Newcombe's paired score interval at its run's level, shared by the gate's variants with Holm's
procedure: infra/fidelity_stats.py) is at most the gate's maxDrop: the data must show the drop is small, not merely
fail to show it is large. No verdict when the suite is too small for maxDrop (`underpowered`), nor when the
evidence is no evidence (`error`: a baseline below minBaselineScore, too many unanswered items).
`verdicts()` judges every gated variant; `routable()` is the
config the gateway is built from, with the variants that did not pass left out of the workload's routing (they
are still served by their own model key, which is how `aifactory eval` reaches them).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import re
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from components.k8s.settings import Fidelity, Model
from components.k8s.verdicts import Verdict
from infra import fidelity_stats as stats
from infra.config import DEFAULT_STACKS_DIR, ConfigError, PlatformConfig, Problem
from infra.fidelity_scorers import SCORERS

__all__ = [
    "EVALS_DIR",
    "RESULTS_DIR",
    "SUITE_FILE",
    "ITEMS_FILE",
    "DEFAULT_MAX_TOKENS",
    "Item",
    "Suite",
    "SuiteError",
    "Verdict",
    "suite_dir",
    "load_suite",
    "suite_problems",
    "fingerprint",
    "evaluated_facts",
    "Judgement",
    "judgements",
    "table_of",
    "run_number",
    "results_file",
    "read_results",
    "write_results",
    "write_text",
    "verdicts",
    "eval_commands",
    "held_back",
    "routable",
    "suite_digests",
    "load_verdicts",
    "default_stacks_dir",
    "evaluates",
]

EVALS_DIR = "evals"  # under the stacks directory
RESULTS_DIR = "results"  # under EVALS_DIR: one <stack>.yaml per stack
SUITE_FILE = "suite.yaml"
ITEMS_FILE = "items.jsonl"
DEFAULT_MAX_TOKENS = 256  # suite.yaml maxTokens: the longest answer an item gets
_SUITE_KEYS = ("description", "maxTokens", "system")
_ITEM_KEYS = ("id", "prompt", "scorer", "reference", "tolerance", "category")
_GENERATOR = "aifactory eval"


# --------------------------------------------------------------------------------------------
# suites


class SuiteError(Exception):
    """A suite that cannot be read: each line names the file (and line) and what is wrong."""


@dataclass(frozen=True, slots=True)
class Item:
    id: str
    prompt: str
    scorer: str  # one of SCORERS
    reference: str  # as text: the exact answer, a regex, a number's decimal form, a JSON Schema's JSON
    tolerance: float = 0.0  # numeric: absolute; default 0
    category: str | None = None  # default: none; what the item tests, for per-category scores and guards


@dataclass(frozen=True, slots=True)
class Suite:
    name: str
    items: tuple[Item, ...]
    description: str = ""  # default: none
    max_tokens: int = DEFAULT_MAX_TOKENS  # default: 256
    system: str | None = None  # default: none (the prompt is the only message)

    @property
    def digest(self) -> str:
        """sha256 over what the harness is given: a changed item, prompt or limit needs a new result."""
        items = [{k: v for k, v in dataclasses.asdict(i).items() if k != "category" or v is not None}
                 for i in self.items]  # an item without a category digests as it did before categories
        body = {"items": items, "maxTokens": self.max_tokens, "system": self.system}
        return "sha256:" + hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()

    @property
    def categories(self) -> tuple[str, ...]:
        return tuple(sorted({i.category for i in self.items if i.category is not None}))


def suite_dir(stacks_dir: Path, name: str) -> Path:
    return stacks_dir / EVALS_DIR / name


def _item(raw: Any, where: str) -> tuple[Item | None, list[str]]:
    if not isinstance(raw, dict):
        return None, [f"{where}: expected a JSON object, got {type(raw).__name__}"]
    problems = [f"{where}: {k}: unknown key; allowed keys: {', '.join(_ITEM_KEYS)}" for k in raw if k not in _ITEM_KEYS]
    for key in ("id", "prompt"):
        if not isinstance(raw.get(key), str) or not raw[key].strip():
            problems.append(f"{where}: {key}: is required, a non-empty string")
    scorer = raw.get("scorer")
    if scorer not in SCORERS:
        problems.append(f"{where}: scorer: {scorer!r} is not allowed; choose one of: {', '.join(SCORERS)}")
    ref = raw.get("reference")
    tolerance = raw.get("tolerance", 0.0)
    if not isinstance(tolerance, int | float) or isinstance(tolerance, bool) or tolerance < 0:
        problems.append(f"{where}: tolerance: {tolerance!r} is not a number >= 0")
    elif tolerance and scorer != "numeric":
        problems.append(f"{where}: tolerance: only numeric items have one")
    text: str | None = None
    if scorer in ("exact", "regex"):
        if not isinstance(ref, str):
            problems.append(f"{where}: reference: {scorer} needs a string, got {ref!r}")
        elif scorer == "regex":
            try:
                re.compile(ref)
                text = ref
            except re.error as err:
                problems.append(f"{where}: reference: {ref!r} is not a valid regular expression: {err}")
        else:
            text = ref
    elif scorer == "numeric":
        if not isinstance(ref, int | float) or isinstance(ref, bool) or not math.isfinite(ref):
            problems.append(f"{where}: reference: numeric needs a finite number, got {ref!r}")
        else:
            text = repr(float(ref))
    elif scorer == "json-schema":
        import jsonschema

        if not isinstance(ref, dict):
            problems.append(f"{where}: reference: json-schema needs a JSON Schema object, got {ref!r}")
        else:
            try:
                jsonschema.validators.validator_for(ref, default=jsonschema.Draft202012Validator).check_schema(ref)
                text = json.dumps(ref, sort_keys=True)
            except jsonschema.SchemaError as err:
                problems.append(f"{where}: reference: not a valid JSON Schema: {err.message}")
    category = raw.get("category")
    if category is not None and (not isinstance(category, str) or not category.strip() or category == "*"):
        problems.append(f"{where}: category: {category!r} is not a category name (a non-empty string other than '*')")
    if problems or text is None:
        return None, problems
    return Item(raw["id"], raw["prompt"], str(scorer), text, float(tolerance), category), []


def load_suite(stacks_dir: Path, name: str) -> Suite:
    """The suite `stacks/evals/<name>/`; SuiteError lists every problem (file:line: key: what is wrong)."""
    base = suite_dir(stacks_dir, name)
    items_path, suite_path = base / ITEMS_FILE, base / SUITE_FILE
    if not items_path.is_file():
        raise SuiteError(f"{items_path}: no such file (a suite is a directory with {ITEMS_FILE} and, optionally, "
                         f"{SUITE_FILE})")
    problems: list[str] = []
    meta: dict[str, Any] = {}
    if suite_path.is_file():
        loaded = yaml.safe_load(suite_path.read_text()) or {}
        if not isinstance(loaded, dict):
            problems.append(f"{suite_path}: expected a mapping")
        else:
            meta = loaded
            problems += [f"{suite_path}: {k}: unknown key; allowed keys: {', '.join(_SUITE_KEYS)}"
                         for k in meta if k not in _SUITE_KEYS]
    max_tokens = meta.get("maxTokens", DEFAULT_MAX_TOKENS)
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or not 1 <= max_tokens <= 32768:
        problems.append(f"{suite_path}: maxTokens: {max_tokens!r} is not a whole number of tokens in 1-32768")
    items: list[Item] = []
    seen: set[str] = set()
    for n, line in enumerate(items_path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{items_path}:{n}"
        try:
            raw = json.loads(line)
        except ValueError as err:
            problems.append(f"{where}: not JSON: {err}")
            continue
        item, found = _item(raw, where)
        problems += found
        if item is not None:
            if item.id in seen:
                problems.append(f"{where}: id: {item.id!r} is already an item's id")
            seen.add(item.id)
            items.append(item)
    if not items and not problems:
        problems.append(f"{items_path}: has no items")
    if problems:
        raise SuiteError("\n".join(problems))
    return Suite(name, tuple(items), str(meta.get("description") or ""), max_tokens, meta.get("system"))


def suite_problems(cfg: PlatformConfig, stacks_dir: Path) -> list[Problem]:
    """Each gate whose suite directory has no items file, at its key path."""
    out = []
    for workload, gate in sorted(cfg.gateway.fidelity.items()):
        path = suite_dir(stacks_dir, gate.suite) / ITEMS_FILE
        if not path.is_file():
            out.append(Problem(f"gateway.routing.{workload}.fidelity.suite",
                               f"{gate.suite!r} has no suite: {path} does not exist"))
    return out


# --------------------------------------------------------------------------------------------
# what was evaluated


def evaluated_facts(cfg: PlatformConfig, model: Model) -> dict[str, Any]:
    """What decides a variant's answers: its engine, image and flags as deployed, model id, URI (a revision
    rides in it) and quantization. Replicas, pools and routing are left out: they change speed, not answers."""
    from components.k8s.engines import engine_named

    engine = engine_named(model.engine)
    image, args = engine.image(cfg, model), engine.evaluated_args(model)
    return {"engine": model.engine, "image": image, "args": list(args), "model": model.model, "uri": model.uri,
            "quantization": model.quantization, "preQuantizedCheckpoint": model.quantized_checkpoint}


def fingerprint(facts: Mapping[str, Any]) -> str:
    return "sha256:" + hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()


def _what_changed(before: Mapping[str, Any], now: Mapping[str, Any]) -> str:
    changed = []
    for key in sorted(set(before) | set(now)):
        if before.get(key) != now.get(key):
            b, n = before.get(key), now.get(key)
            changed.append(f"{key} changed" if isinstance(b, list) or isinstance(n, list)
                           else f"{key} changed ({b} -> {n})")
    return ", ".join(changed) or "its fingerprint changed"


# --------------------------------------------------------------------------------------------
# the results file


def results_file(stacks_dir: Path, stack: str) -> Path:
    return stacks_dir / EVALS_DIR / RESULTS_DIR / f"{stack}.yaml"


def read_results(path: Path) -> dict[str, Any]:
    """The recorded results (empty when the file does not exist)."""
    if not path.is_file():
        return {}
    loaded = yaml.safe_load(path.read_text()) or {}
    if not isinstance(loaded, dict) or not isinstance(loaded.get("workloads", {}), dict):
        raise ConfigError([Problem(str(path), "expected a mapping with `workloads`")])
    return loaded


def write_text(path: Path, text: str) -> None:
    """Write `text` to `path` atomically (a temporary file in the same directory, then rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_results(path: Path, results: Mapping[str, Any]) -> None:
    """Write the results file atomically."""
    header = (f"# Written by `{_GENERATOR}`: what each variant scored on its workload's suite, and what was\n"
              "# evaluated (the fingerprint); `runs` keeps every run. Review and commit it, with the per-item\n"
              "# outcomes beside it (<stack>.items/): synth, preflight and deploy read it.\n")
    write_text(path, header + yaml.safe_dump(dict(results), sort_keys=True, width=120))


# --------------------------------------------------------------------------------------------
# the gate


def _f(x: float) -> str:
    return f"{x:.3f}"


def _pct(x: float) -> str:
    return f"{x * 100:.3g}%"


def table_of(entry: Mapping[str, Any], n: int) -> stats.Table:
    """A recorded variant's paired table against the baseline (its `vsBaseline` counts)."""
    vs = entry["vsBaseline"]
    lost, gained, both = int(vs["lost"]), int(vs["gained"]), int(vs["bothRight"])
    return stats.Table(both, lost, gained, n - both - lost - gained)


def run_number(rec: Mapping[str, Any], variant: str, baseline: str) -> int:
    """Which recorded run of the variant this is: the runs with the record's suite digest, the baseline's and the
    variant's fingerprints as recorded now (1 for a record without `runs`)."""
    variants = rec.get("variants") or {}
    fp, base_fp = (variants.get(variant) or {}).get("fingerprint"), (variants.get(baseline) or {}).get("fingerprint")
    same = [r for r in rec.get("runs") or [] if r.get("suiteDigest") == rec.get("suiteDigest")
            and ((r.get("variants") or {}).get(variant) or {}).get("fingerprint") == fp
            and ((r.get("variants") or {}).get(baseline) or {}).get("fingerprint") == base_fp]
    return max(1, len(same))


@dataclass(frozen=True, slots=True)
class Judgement:
    """The statistics behind one variant's verdict in one run (what the report prints beside the verdict)."""

    table: stats.Table
    level: float  # the one-sided level it was tested at (its run's share, Holm's step)
    drop: float
    low: float  # the drop's lower end at `level`
    bound: float  # the drop's upper end at `level`
    passed: bool  # Holm rejected "drop > maxDrop"
    min_items: int | None  # the fewest items at which a variant agreeing on every item could pass, at `first_level`
    first_level: float  # the run's level over its variants: Holm's first step, which any pass must clear
    resolution: float  # the smallest bound the suite could give it (its disagreements, no drop)
    items_needed: int | None  # for maxDrop at its shares (None: its drop is above maxDrop)


def judgements(gate: Fidelity, rec: Mapping[str, Any]) -> dict[str, Judgement]:
    """Per non-baseline variant of the record's run: its drop, bound and Holm decision. The run's level is
    stats.run_alpha(k) for the most re-run of its variants (k-th run), shared by Holm's procedure."""
    variants = rec.get("variants") or {}
    n = int(rec.get("items") or 0)
    names = sorted(k for k, e in variants.items() if k != gate.baseline and "vsBaseline" in e)
    if not names or n <= 0:
        return {}
    alpha = stats.run_alpha(max(run_number(rec, v, gate.baseline) for v in names))
    tables = {v: table_of(variants[v], n) for v in names}
    p = {v: 1.0 if not _answered_enough(gate, variants[v], n) else stats.p_value(t, gate.max_drop)
         for v, t in tables.items()}
    decided = stats.holm(p, alpha=alpha)
    out = {}
    for v, t in tables.items():
        level, passed = decided[v]
        drop, low, bound = stats.drop_interval(t, z=stats.z_for(level))
        first = alpha / len(names)
        out[v] = Judgement(t, level, drop, low, bound, passed, stats.min_items(gate.max_drop, alpha=first), first,
                           stats.resolution(t, alpha=level), stats.items_needed(t, gate.max_drop, alpha=level))
    return out


def _answered_enough(gate: Fidelity, entry: Mapping[str, Any], n: int) -> bool:
    return n - int(entry.get("answered", n)) <= gate.max_unanswered * n + 1e-9


def _unanswered(who: str, entry: Mapping[str, Any], n: int, gate: Fidelity) -> str:
    missing = n - int(entry.get("answered", n))
    return (f"{who} left {missing} of {n} items unanswered ({_pct(missing / n)}), more than maxUnanswered "
            f"{_pct(gate.max_unanswered)}: its endpoint answered without content (null or empty content, or an error "
            "body without choices; a reasoning model short of max tokens?); that is the endpoint, not the model: fix "
            "it and evaluate again")


def _category_failures(gate: Fidelity, mine: Mapping[str, Any], base: Mapping[str, Any]) -> list[str]:
    out = []
    for cat, c in sorted((mine.get("categories") or {}).items()):
        guard = gate.category_gate(cat)
        if guard is None or not c.get("items"):
            continue
        score = c["correct"] / c["items"]
        b = (base.get("categories") or {}).get(cat) or {}
        base_score = b["correct"] / b["items"] if b.get("items") else score
        if guard.min_score is not None and score < guard.min_score - 1e-12:
            out.append(f"category {cat!r} scored {_f(score)} ({c['correct']}/{c['items']}), below its minScore "
                       f"{_f(guard.min_score)}")
        if guard.max_drop is not None and base_score - score > guard.max_drop + 1e-12:
            out.append(f"category {cat!r} scored {_f(score)} ({c['correct']}/{c['items']}) vs the baseline's "
                       f"{_f(base_score)}: drop {_f(base_score - score)}, more than its maxDrop {_f(guard.max_drop)}")
    return out


def _judge(cfg: PlatformConfig, workload: str, gate: Fidelity, v: Model, rec: Mapping[str, Any] | None,
           suite_digest: str | None, commands: Sequence[str]) -> Verdict:
    variants = (rec or {}).get("variants") or {}
    mine, base = variants.get(v.name), variants.get(gate.baseline)
    who = f"workload {workload!r}: variant {v.name!r}"
    rerun = "; run " + " and ".join(f"`{c}`" for c in commands)
    if v.name == gate.baseline:
        return Verdict(workload, v.name, "baseline", f"{who} is the baseline")
    if rec is None or mine is None:
        return Verdict(workload, v.name, "missing", f"{who} has no result of suite {gate.suite!r}{rerun}")
    if rec.get("suite") != gate.suite or rec.get("baseline") != gate.baseline:
        return Verdict(workload, v.name, "stale", f"{who} has a stale result: it was measured on suite "
                                                  f"{rec.get('suite')!r} against baseline {rec.get('baseline')!r}, "
                                                  f"the gate names {gate.suite!r} and {gate.baseline!r}{rerun}")
    if suite_digest is not None and rec.get("suiteDigest") != suite_digest:
        return Verdict(workload, v.name, "stale", f"{who} has a stale result: suite {gate.suite!r} changed since "
                                                  f"it was evaluated{rerun}")
    for name, r in ((v.name, mine), (gate.baseline, base)):
        now = evaluated_facts(cfg, cfg.models[name])
        if r is None or r.get("fingerprint") != fingerprint(now):
            what = _what_changed((r or {}).get("evaluated") or {}, now)
            whose = "it" if name == v.name else f"baseline {name!r}"
            return Verdict(workload, v.name, "stale", f"{who} has a stale result: {whose} changed since it was "
                                                      f"evaluated ({what}){rerun}")
    assert base is not None
    n = int(rec["items"])
    if not _answered_enough(gate, base, n):
        return Verdict(workload, v.name, "error", f"{who} cannot be judged: "
                       + _unanswered(f"baseline {gate.baseline!r}", base, n, gate))
    if base["score"] < gate.min_baseline_score - 1e-12:
        return Verdict(workload, v.name, "error", (
            f"{who} cannot be judged: baseline {gate.baseline!r} scored {_f(base['score'])} on suite {gate.suite!r}, "
            f"below minBaselineScore {_f(gate.min_baseline_score)}: a baseline that fails its own suite vouches for "
            "no variant (a broken endpoint, the wrong suite or wrong references?)"))
    if not _answered_enough(gate, mine, n):
        return Verdict(workload, v.name, "error", f"{who}'s evaluation failed: " + _unanswered("it", mine, n, gate))
    j = judgements(gate, rec)[v.name]
    text = (f"{who} scored {_f(mine['score'])} on suite {gate.suite!r} vs baseline {gate.baseline!r} "
            f"{_f(base['score'])}: drop {_f(j.drop)}, at most {_f(j.bound)} (one-sided {_pct(j.level)})")
    if j.min_items is not None and n < j.min_items:
        if j.low > gate.max_drop:  # too few items to show a small drop, enough to show this one is large
            return Verdict(workload, v.name, "failed", f"{text}, at least {_f(j.low)}: more than maxDrop "
                                                       f"{_f(gate.max_drop)}")
        return Verdict(workload, v.name, "underpowered", (
            f"{who} is not judged: suite {gate.suite!r} has {n} items, too few to show a drop of at most maxDrop "
            f"{_f(gate.max_drop)} even for a variant that agrees with the baseline on every item (one-sided "
            f"{_pct(j.first_level)}: at least {j.min_items} items); grow the suite or raise maxDrop"))
    cats = _category_failures(gate, mine, base)
    if cats:
        return Verdict(workload, v.name, "failed", f"{text}; " + "; ".join(cats))
    if j.passed:
        return Verdict(workload, v.name, "passed", f"{text}, within maxDrop {_f(gate.max_drop)}")
    if j.bound <= gate.max_drop + 1e-12:
        return Verdict(workload, v.name, "failed", f"{text}, within maxDrop {_f(gate.max_drop)} at its level, but "
                                                   "Holm's procedure stopped at a variant with a smaller p-value that "
                                                   "did not pass")
    needed = (f"; {j.items_needed} items would show maxDrop at these shares" if j.items_needed is not None
              else "")
    return Verdict(workload, v.name, "failed", f"{text}, more than maxDrop {_f(gate.max_drop)}{needed}")


def verdicts(cfg: PlatformConfig, results: Mapping[str, Any], *, suite_digests: Mapping[str, str] | None = None
             ) -> list[Verdict]:
    """Every gated workload's variants, judged against the recorded results, sorted by workload and variant.
    `suite_digests` (suite -> digest): the suites as they are now; without it suite changes go unnoticed."""
    out = []
    for workload, gate in sorted(cfg.gateway.fidelity.items()):
        rec = (results.get("workloads") or {}).get(workload)
        commands = eval_commands(cfg, workload)
        digest = (suite_digests or {}).get(gate.suite)
        for v in sorted(cfg.variants_of(workload), key=lambda m: m.name):
            out.append(_judge(cfg, workload, gate, v, rec, digest, commands))
    return out


def eval_commands(cfg: PlatformConfig, workload: str) -> tuple[str, ...]:
    """The commands that evaluate `workload`'s variants, in the order to start them: `aifactory eval` last. A
    variant named like its workload has no model key of its own at the gateway (the name routes to the workload),
    so `eval` reaches it through its engine's Service, port-forwarded first (infra/evaluate.py refuses to run
    without that)."""
    from components.k8s.naming import MODEL_HTTP_PORT

    forwards, line = [], f"aifactory eval {cfg.stack} --workload {workload}"
    for v in sorted(cfg.variants_of(workload), key=lambda m: m.name):
        if v.name == workload:
            forwards.append(f"kubectl -n {cfg.tenant_of(v).namespace} port-forward svc/{v.name} "
                            f"{MODEL_HTTP_PORT}:{MODEL_HTTP_PORT}")
            line += f" --url-for {v.name}=http://127.0.0.1:{MODEL_HTTP_PORT}"
    return (*forwards, line)


def held_back(found: Sequence[Verdict]) -> frozenset[str]:
    return frozenset(v.variant for v in found if not v.routable)


def routable(cfg: PlatformConfig, found: Sequence[Verdict]) -> PlatformConfig:
    """The config the gateway is built from: variants that did not pass leave their workload's routing (deadline
    decisions and overflow) and keep only their own model key. Without held-back variants: `cfg` itself."""
    out = held_back(found)
    if not out:
        return cfg
    models = {k: dataclasses.replace(m, variant=None) if k in out else m for k, m in cfg.models.items()}
    return dataclasses.replace(cfg, models=models)


def suite_digests(cfg: PlatformConfig, stacks_dir: Path) -> dict[str, str]:
    """Each gated suite's digest as it is now; ConfigError at the gate's key path for a missing or broken suite."""
    problems = suite_problems(cfg, stacks_dir)
    out: dict[str, str] = {}
    for workload, gate in sorted(cfg.gateway.fidelity.items()):
        if gate.suite in out or any(p.path == f"gateway.routing.{workload}.fidelity.suite" for p in problems):
            continue
        try:
            out[gate.suite] = load_suite(stacks_dir, gate.suite).digest
        except SuiteError as err:
            problems += [Problem(f"gateway.routing.{workload}.fidelity.suite", line) for line in str(err).splitlines()]
    if problems:
        raise ConfigError(problems, source=f"stack {cfg.stack!r} fidelity suites")
    return out


def default_stacks_dir() -> Path:
    return DEFAULT_STACKS_DIR


def load_verdicts(cfg: PlatformConfig, stacks_dir: Path) -> list[Verdict]:
    """The gate as the stack's files say now: its results file, its suites."""
    if not cfg.gateway.fidelity:
        return []
    digests = suite_digests(cfg, stacks_dir)
    return verdicts(cfg, read_results(results_file(stacks_dir, cfg.stack)), suite_digests=digests)


def evaluates(cfg: PlatformConfig, stacks_dir: Path) -> dict[str, str]:
    """Per gated workload, a digest of what its evaluation covers: each variant's fingerprint, the suite's digest,
    the baseline. The evaluation Job carries it, so any change runs the Job again."""
    digests = suite_digests(cfg, stacks_dir)
    out = {}
    for workload, gate in sorted(cfg.gateway.fidelity.items()):
        body = {"suite": digests[gate.suite], "baseline": gate.baseline,
                "variants": {v.name: fingerprint(evaluated_facts(cfg, v)) for v in cfg.variants_of(workload)}}
        out[workload] = fingerprint(body)
    return out
