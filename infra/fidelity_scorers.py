"""The scorers of a fidelity suite's items, as lm-evaluation-harness calls them.

The harness scores a `generate_until` task's documents with the task's `process_results` function, which a task
YAML names with `!function <module>.<function>` (lm_eval/utils.py `import_function`: the module is a file beside
the YAML; lm_eval/api/task.py ConfigurableTask.process_results calls it with the document and the filtered
responses). The task infra/evaluate.py writes names `process_results` below through a one-line shim beside it.

Each document carries its own scorer, so one suite mixes them:

    exact        the answer, stripped of surrounding whitespace, equals `reference`
    regex        `reference` (Python re syntax) matches somewhere in the answer (anchor it with ^...$ for all)
    numeric      the answer's first number is within `tolerance` of `reference` (absolute; default 0)
    json-schema  the answer (stripped; a ```json fence around it is allowed) is JSON valid against the JSON Schema
                 `reference` (the schema's own $schema, else draft 2020-12)

This module imports nothing heavy: the harness loads it once per task.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["SCORERS", "METRIC", "ANSWERED", "score", "answered", "process_results", "doc_to_text", "doc_to_target"]

SCORERS = ("exact", "regex", "numeric", "json-schema")
METRIC = "score"  # the task's metric: 1.0 when the item's answer is right, else 0.0
ANSWERED = "answered"  # and 1.0 when the endpoint gave an answer at all, else 0.0 (see answered())
_NUMBER = re.compile(r"[-+]?(?:\d+(?:,\d{3})*(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?")
_FENCE = re.compile(r"^```(?:json)?\s*\n?(.*?)\n?```$", re.DOTALL)


def _first_number(text: str) -> float | None:
    m = _NUMBER.search(text)
    return float(m.group(0).replace(",", "")) if m else None


def _json_valid(answer: str, schema_text: str) -> bool:
    import jsonschema

    text = answer.strip()
    if m := _FENCE.match(text):
        text = m.group(1).strip()
    try:
        value = json.loads(text)
    except ValueError:
        return False
    schema = json.loads(schema_text)
    validator = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    return validator(schema).is_valid(value)


def score(*, scorer: str, reference: str, answer: str, tolerance: float = 0.0) -> bool:
    """Whether `answer` is right. `reference` is the item's reference as text (a number's decimal form, a
    schema's JSON)."""
    if scorer == "exact":
        return answer.strip() == reference.strip()
    if scorer == "regex":
        return re.search(reference, answer) is not None
    if scorer == "numeric":
        got = _first_number(answer)
        return got is not None and abs(got - float(reference)) <= tolerance
    if scorer == "json-schema":
        return _json_valid(answer, reference)
    raise ValueError(f"unknown scorer {scorer!r}; scorers: {', '.join(SCORERS)}")


def answered(answer: str | None) -> bool:
    """Whether the endpoint answered at all. The harness turns a null `content` (a reasoning model that spent its
    max_tokens thinking) into LMEVAL_MODEL_NONE_ANSWER_PLACEHOLDER, "" unless set, and a body without `choices` (an
    error body with HTTP 200) into "" (lm_eval/models/api_models.py TemplateAPI.amodel_call,
    lm_eval/models/openai_completions.py LocalChatCompletion.parse_generations, lm-eval 0.4.13): an empty or blank
    answer is no answer, which is the endpoint's failure, not a wrong answer of the model."""
    return answer is not None and bool(answer.strip())


def process_results(doc: Mapping[str, Any], results: Sequence[str]) -> dict[str, float]:
    """The harness's per-document hook: {"score": 1.0 | 0.0, "answered": 1.0 | 0.0}. A missing answer is wrong."""
    answer = results[0] if results and results[0] is not None else ""
    ok = score(scorer=doc["scorer"], reference=doc["reference"], answer=answer,
               tolerance=float(doc.get("tolerance") or 0.0))
    return {METRIC: 1.0 if ok else 0.0, ANSWERED: 1.0 if answered(answer) else 0.0}


def doc_to_text(doc: Mapping[str, Any]) -> str:
    """The prompt the harness sends for a document (the task's `doc_to_text`)."""
    return str(doc["prompt"])


def doc_to_target(doc: Mapping[str, Any]) -> str:
    """The document's reference, as the harness records it beside each sample (the task's `doc_to_target`)."""
    return str(doc["reference"])
