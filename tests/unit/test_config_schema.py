"""The stack config's JSON Schema (stacks/aifactory.schema.json), generated from the stack model's declarations
alone, checked with the `jsonschema` validator against the shipped stacks and against the model itself: where the
schema rejects a config, the model rejects it at the same key path, and configs the model takes are never rejected
by the schema."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from infra import cli
from infra.config import ConfigError, parse, stack_file_schema

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "stacks" / "aifactory.schema.json"
STACKS = ("dev", "staging", "prod", "onprem")


def _stack(name: str) -> dict[str, Any]:
    doc = yaml.safe_load((ROOT / "stacks" / f"Pulumi.{name}.yaml").read_text())
    assert isinstance(doc, dict)
    return doc


def _validator() -> jsonschema.Draft7Validator:
    return jsonschema.Draft7Validator(json.loads(SHIPPED.read_text()))


def _schema_errors(doc: dict[str, Any]) -> list[str]:
    """The key paths (as the reader spells them) the schema rejects: config.aifactory:gateway.minReplicas ->
    gateway.minReplicas."""
    out = []
    for err in _validator().iter_errors(doc):
        path = [str(p) for p in err.absolute_path]
        assert path[0] == "config"
        key = path[1].removeprefix("aifactory:")
        extra = sorted(set(err.instance) - set(err.schema.get("properties", {}))) \
            if err.validator == "additionalProperties" else [None]  # the reader names the unknown key itself
        out += [".".join([key, *path[2:], *([x] if x else [])]) for x in extra]
    return sorted(out)


def _reader_paths(doc: dict[str, Any], stack: str) -> list[str]:
    raw = {k.removeprefix("aifactory:"): v for k, v in doc["config"].items() if k.startswith("aifactory:")}
    try:
        parse(raw, stack=stack)
    except ConfigError as err:
        return sorted(p.path for p in err.problems)
    return []


def test_the_shipped_schema_is_what_the_model_generates_today() -> None:
    """Regenerate with `aifactory schema --out stacks/aifactory.schema.json` when this fails."""
    assert json.loads(SHIPPED.read_text()) == stack_file_schema()


@pytest.mark.parametrize("stack", STACKS)
def test_every_shipped_stack_names_the_schema_for_editors(stack: str) -> None:
    first = (ROOT / "stacks" / f"Pulumi.{stack}.yaml").read_text().splitlines()[0]
    assert first == "# yaml-language-server: $schema=aifactory.schema.json"


def test_the_schema_is_valid_draft_7_what_editors_support() -> None:
    jsonschema.Draft7Validator.check_schema(json.loads(SHIPPED.read_text()))


@pytest.mark.parametrize("stack", STACKS)
def test_every_shipped_stack_is_valid_against_the_schema(stack: str) -> None:
    assert _schema_errors(_stack(stack)) == []


def _set(doc: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    doc = copy.deepcopy(doc)
    key, *rest = path.split(".")
    node = doc["config"].setdefault(f"aifactory:{key}", {})
    for part in rest[:-1]:
        node = node.setdefault(part, {})
    node[rest[-1]] = value
    return doc


# (stack, key path, value): each wrong in a way a schema can say (type, bound, choice, unknown key)
BAD = [
    ("dev", "gateway.minReplicas", 0),  # below the minimum 1
    ("dev", "gateway.serviceType", "Ingress"),  # not one of LoadBalancer, NodePort, ClusterIP
    ("dev", "gateway.minReplica", 2),  # a typo: unknown key
    ("dev", "gateway.retries.attempts", "two"),  # a string for an integer
    ("staging", "observability.traceSampleRatio", 1.5),  # above the maximum 1
    ("prod", "network.natGateways", "two"),
    ("onprem", "infiniband.interfaces", "ib0"),  # a string for a list
]


@pytest.mark.parametrize(("stack", "path", "value"), BAD)
def test_what_the_schema_rejects_the_reader_rejects_at_the_same_key(stack: str, path: str, value: Any) -> None:
    doc = _set(_stack(stack), path, value)
    assert _schema_errors(doc) == [path]
    assert path in _reader_paths(doc, stack)


def test_an_unknown_top_level_aifactory_key_is_rejected_and_other_namespaces_are_left_alone() -> None:
    doc = copy.deepcopy(_stack("dev"))
    doc["config"]["aifactory:gateways"] = {}
    doc["config"]["aws:profile"] = "x"
    doc["config"]["pulumi:tags"] = {"team": "ml"}
    assert [e.message for e in _validator().iter_errors(doc)] == [
        "False schema does not allow {}"]
    assert _reader_paths(doc, "dev") == ["gateways"]


def test_a_bare_unknown_key_and_a_missing_target_are_rejected_as_the_reader_does(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Pulumi reads a key without a namespace in the project's (aifactory): a misspelt one is a typo too."""
    doc = copy.deepcopy(_stack("dev"))
    doc["config"]["kubernetesVersoin"] = "1.33"
    assert [e.message for e in _validator().iter_errors(doc)] == ["False schema does not allow '1.33'"]
    (tmp_path / "Pulumi.typo.yaml").write_text(yaml.safe_dump(doc))
    assert cli.main(["validate", "typo", "--stacks-dir", str(tmp_path)]) == 2
    assert "kubernetesVersoin: unknown key" in capsys.readouterr().err
    del doc["config"]["kubernetesVersoin"]
    del doc["config"]["aifactory:target"]
    assert [e.validator for e in _validator().iter_errors(doc)] == ["anyOf"]
    assert "target" in _reader_paths(doc, "dev")


# valid configs that take the branches the shipped stacks do not: the schema must not reject what the reader takes
GOOD = [
    ("dev", "models.{m}.quantization", {"method": "fp8", "checkpoint": "load-time"}),  # a mapping, not a string
    ("dev", "models.{m}.quantization", "fp8"),
    ("dev", "models.{m}.speculative", {"method": "ngram"}),  # ngram drafts from the prompt: no draftModel
    ("dev", "gateway.minReplicas", None),  # null reads as unset
]


@pytest.mark.parametrize(("stack", "path", "value"), GOOD)
def test_configs_the_reader_takes_are_not_rejected_by_the_schema(stack: str, path: str, value: Any) -> None:
    doc = _stack(stack)
    model = next(iter(doc["config"]["aifactory:models"]))
    doc = _set(doc, path.format(m=model), value)
    assert _reader_paths(doc, stack) == []
    assert _schema_errors(doc) == []


def test_defaults_the_reader_computes_are_not_stated_and_literal_ones_are() -> None:
    """gateway.maxReplicas defaults to max(minReplicas, 6) and a tenant's namespace to its name: no single
    default holds, so the schema states none; minReplicas' default is the literal 2."""
    defs = json.loads(SHIPPED.read_text())["definitions"]
    gateway = defs["gateway"]["properties"]
    assert gateway["minReplicas"]["default"] == 2
    assert "default" not in gateway["maxReplicas"]
    tenant = defs["tenants"]["additionalProperties"]["properties"]
    assert "default" not in tenant["namespace"]
    assert "default" not in tenant["cpuQuota"]  # "0" in the reader only stands for "derived from the GPU quota"


def test_the_schema_command_writes_the_file_whole_and_refuses_a_missing_directory(tmp_path: Path,
                                                                                   capsys: pytest.CaptureFixture[str]
                                                                                   ) -> None:
    out = tmp_path / "s.json"
    assert cli.main(["schema", "--out", str(out)]) == 0
    assert json.loads(out.read_text()) == json.loads(SHIPPED.read_text())
    assert cli.main(["schema", "--out", str(tmp_path / "no" / "s.json")]) == 2
    assert "directory" in capsys.readouterr().err and not (tmp_path / "no").exists()


# --- what the schema states holds for the reader: a stated default is what leaving the key out gives, and null is
# --- unset, on every instance of the key in the shipped stacks ------------------------------------------------------

NULL_IS_NOT_UNSET = {("models", "*", "variant")}  # `variant:` alone still marks a variant (config.py)


def _keys(node: dict[str, Any], at: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], dict[str, Any]]]:
    """(path, schema) of every key below `node`; "*" stands for any name, "[]" for any list item."""
    out = []
    for branch in node.get("anyOf", [node]):
        for key, sub in branch.get("properties", {}).items():
            out += [((*at, key), sub), *_keys(sub, (*at, key))]
        if isinstance(branch.get("additionalProperties"), dict):
            out += _keys(branch["additionalProperties"], (*at, "*"))
        if isinstance(branch.get("items"), dict):
            out += _keys(branch["items"], (*at, "[]"))
    return out


def _where(raw: Any, path: tuple[str, ...], at: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """The concrete paths of `path` in `raw` whose parent exists (names and list indices filled in)."""
    if len(path) == 1:
        return [(*at, path[0])] if isinstance(raw, dict) else []
    head, rest = path[0], path[1:]
    if head == "*":
        return [p for k, v in raw.items() for p in _where(v, rest, (*at, k))] if isinstance(raw, dict) else []
    if head == "[]":
        return [p for i, v in enumerate(raw) for p in _where(v, rest, (*at, i))] if isinstance(raw, list) else []
    return _where(raw.get(head), rest, (*at, head)) if isinstance(raw, dict) and head in raw else []


def _with(raw: dict[str, Any], path: tuple[Any, ...], value: Any, *, remove: bool = False) -> dict[str, Any]:
    out = copy.deepcopy(raw)
    node: Any = out
    for step in path[:-1]:
        node = node[step]
    node.pop(path[-1], None)
    if not remove:
        node[path[-1]] = value
    return out


def _outcome(raw: dict[str, Any], stack: str) -> Any:
    """The config, or the key paths of its problems (a message may quote the value as given)."""
    try:
        return parse(raw, stack=stack)
    except ConfigError as err:
        return sorted(p.path for p in err.problems)


def _disagreements(check: Any) -> list[str]:
    defs = json.loads(SHIPPED.read_text())["definitions"]
    out = []
    for stack in STACKS:
        doc = _stack(stack)
        raw = {k.removeprefix("aifactory:"): v for k, v in doc["config"].items() if k.startswith("aifactory:")}
        for top, node in defs.items():
            for path, sub in _keys(node, (top,)):
                for where in _where(raw, path):
                    unset = _with(raw, where, None, remove=True)
                    if (value := check(path, sub)) is not _SKIP and \
                            _outcome(_with(unset, where, value), stack) != _outcome(unset, stack):
                        out.append(f"{stack}: {'.'.join(map(str, where))}: {json.dumps(value)}")
    return out


_SKIP = object()


def test_every_stated_default_is_what_leaving_the_key_out_gives() -> None:
    assert _disagreements(lambda path, sub: sub["default"] if "default" in sub else _SKIP) == []


def test_null_is_unset_wherever_the_schema_allows_it() -> None:
    def null(path: tuple[str, ...], sub: dict[str, Any]) -> Any:
        types = \
            [t for b in sub.get("anyOf", [sub]) for t in ([b["type"]] if isinstance(b.get("type"), str)
                                                          else b.get("type", []))]
        return None if "null" in types and path not in NULL_IS_NOT_UNSET else _SKIP

    assert _disagreements(null) == []
