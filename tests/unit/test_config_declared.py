"""The declared sections of the stack model (infra/stack/declared.py): each setting's type, default, bounds and
description written once on its settings dataclass (components/k8s/settings/), and everything else read from
there: the validation of the stack file, its editor schema and docs/stack-reference.md."""

from __future__ import annotations

import dataclasses
import json
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from components.k8s.settings import (
    SETTING,
    CircuitBreakers,
    GatewaySettings,
    HealthCheck,
    Ingest,
    ModelSlo,
    NodeCheck,
    ObservabilitySettings,
    OutlierDetection,
    Retries,
    VolumeSizes,
)
from infra.config import ConfigError, PlatformConfig, parse, stack_file_schema
from infra.stack import declared, reference
from tests.support.stacks import stack_raw

ROOT = Path(__file__).resolve().parents[2]
SECTIONS = (GatewaySettings, Retries, OutlierDetection, CircuitBreakers, HealthCheck, ModelSlo, NodeCheck,
            ObservabilitySettings, Ingest, VolumeSizes)
# where each section sits in the editor schema (stacks/aifactory.schema.json)
SCHEMA_PATHS: dict[type, tuple[str, ...]] = {
    GatewaySettings: ("gateway",), ObservabilitySettings: ("observability",),
    Retries: ("gateway", "retries"), OutlierDetection: ("gateway", "outlierDetection"),
    CircuitBreakers: ("gateway", "circuitBreakers"), HealthCheck: ("gateway", "healthCheck"),
    ModelSlo: ("models", "*", "slo"), NodeCheck: ("nodePools", "*", "nodeCheck"),
    Ingest: ("observability", "ingest"), VolumeSizes: ("observability", "volumes"),
}


def _problems(**sections: Any) -> list[str]:
    raw = stack_raw("dev")
    for key, value in sections.items():
        raw[key] = value
    with pytest.raises(ConfigError) as err:
        parse(raw, stack="dev")
    return [str(p) for p in err.value.problems]


def _schema_of(cls: type) -> dict[str, Any]:
    node: dict[str, Any] = json.loads((ROOT / "stacks" / "aifactory.schema.json").read_text())["definitions"]
    for step in SCHEMA_PATHS[cls]:
        node = node["additionalProperties"] if step == "*" else node[step] if "properties" not in node \
            else node["properties"][step]
    return node


def _declared_classes(cls: type = PlatformConfig) -> list[type]:
    """Every settings dataclass of the stack model: PlatformConfig and each below it (a key's type or form)."""
    out = [cls]
    for f in declared.declared_fields(cls):
        meta = f.metadata[SETTING]
        for t in _types_in(meta["form"] or typing.get_type_hints(cls)[f.name]):
            if dataclasses.is_dataclass(t) and t not in out:
                out += [c for c in _declared_classes(typing.cast(type, t)) if c not in out]
    return out


def _types_in(annotation: Any) -> list[Any]:
    return [annotation, *(t for a in typing.get_args(annotation) for t in _types_in(a))]


EVERY_SECTION = _declared_classes()


def test_every_section_of_the_model_is_found() -> None:
    names = {c.__name__ for c in EVERY_SECTION}
    assert {c.__name__ for c in SECTIONS} < names
    assert {"Target", "NodePool", "Capacity", "InfinibandSettings", "Tenant", "Model", "Quantization",
            "SessionAffinity", "GatewayAuth", "JwtIssuer", "Routing", "Fidelity", "FidelityJob", "CategoryGate",
            "Alerting", "AlertReceiver", "AlertRoutes", "SecretRef", "Heartbeat"} < names


@pytest.mark.parametrize("cls", EVERY_SECTION, ids=lambda c: c.__name__)
def test_each_default_is_written_once_on_the_dataclass(cls: type) -> None:
    """The validating model's default is the dataclass field's default itself (the same object), the editor schema
    states that value (unless derived from other settings) and the field's description."""
    model = declared.section_model(cls)
    schema = declared.section_schema(cls)
    for f in declared.declared_fields(cls):
        meta = f.metadata[SETTING]
        prop = schema["properties"][declared.key_of(f)]
        if f.name in model.model_fields:
            assert model.model_fields[f.name].default is f.default or f.default is dataclasses.MISSING
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        if meta["derived"] or default is None or default is dataclasses.MISSING or isinstance(default, Mapping) \
                or dataclasses.is_dataclass(default) or isinstance(default, tuple) and meta["form"] is not None:
            assert "default" not in prop
        else:
            assert prop["default"] == (list(default) if isinstance(default, tuple) else default)
        assert prop["description"] == meta["doc"] and len(meta["doc"]) > 10


@pytest.mark.parametrize("cls", SECTIONS, ids=lambda c: c.__name__)
def test_an_empty_section_reads_as_the_dataclass_with_no_arguments(cls: type) -> None:
    assert declared.read(_NoProblems(), cls, None, "x") == cls()


@pytest.mark.parametrize("cls", SECTIONS, ids=lambda c: c.__name__)
def test_the_shipped_editor_schema_carries_each_declared_section(cls: type) -> None:
    """Every declared key as the model states it (a section read partly by code, such as the gateway's nested
    sections and routing, also lists the keys that code reads)."""
    shipped, model = _schema_of(cls), declared.json_schema(cls)
    assert {k: shipped["properties"][k] for k in model["properties"]} == model["properties"]
    assert shipped["additionalProperties"] is False


class _NoProblems:
    """A reader that fails the test on any problem."""

    def fail(self, path: str, message: str) -> None:
        raise AssertionError(f"{path}: {message}")


def test_every_problem_of_declared_sections_is_reported_at_once_in_house_wording() -> None:
    """Unknown keys with "did you mean", types with the value received, bounds with the limit, patterns with what
    was meant: pydantic's errors in the reader's words, each at its key path, every section reported."""
    raw = stack_raw("dev")
    gateway = {"retries": {"atempts": 1, "budgetPercent": "ten"}, "circuitBreakers": {"maxRequests": True},
               "outlierDetection": {"maxEjectionPercent": 0, "intervalSeconds": 0}}
    observability = {**raw.get("observability", {}), "volumes": {"lokiGiB": 0, "jaegerGiB": 1.5},
                     "ingest": {"logGiBPerDay": -1}}
    pools = raw["nodePools"]
    pool = next(iter(pools))
    pools[pool]["nodeCheck"] = {"driverMinVersion": "latest", "burnInSeconds": 3601}
    assert _problems(gateway=gateway, observability=observability, nodePools=pools) == [
        f"nodePools.{pool}.nodeCheck.driverMinVersion: 'latest' is not a driver version such as 550.54.15",
        f"nodePools.{pool}.nodeCheck.burnInSeconds: 3601 is above the maximum 3600",
        "gateway.retries.atempts: unknown key (did you mean 'attempts'?); allowed keys: attempts, budgetPercent",
        "gateway.retries.budgetPercent: expected a number, got a string 'ten'",
        "gateway.outlierDetection.intervalSeconds: 0.0 is below the minimum 0.1",
        "gateway.outlierDetection.maxEjectionPercent: 0 is below the minimum 1",
        "gateway.circuitBreakers.maxRequests: expected an integer, got a boolean true",
        "observability.ingest.logGiBPerDay: -1.0 is below the minimum 0.01",
        "observability.volumes.lokiGiB: 0 is below the minimum 1",
        "observability.volumes.jaegerGiB: expected an integer, got a number 1.5",
    ]


def test_null_is_unset_and_a_bad_key_reads_as_its_default_so_later_checks_still_run() -> None:
    seen: list[str] = []

    class Reader:
        def fail(self, path: str, message: str) -> None:
            seen.append(f"{path}: {message}")

    got = declared.read(Reader(), Retries, {"attempts": None, "budgetPercent": 500}, "gateway.retries")  # type: ignore[arg-type]
    assert got == Retries()
    assert seen == ["gateway.retries.budgetPercent: 500.0 is above the maximum 100"]
    assert declared.read(Reader(), Retries, [1], "gateway.retries") == Retries()  # type: ignore[arg-type]
    assert seen[-1] == "gateway.retries: expected a mapping, got a list [1]"


@pytest.mark.parametrize(("health", "timeout", "problems"), [
    ({"intervalSeconds": 1}, 8.0, []),  # the default, 8 s: 1 x (8 + 1) is within 10 s
    ({"intervalSeconds": 1, "timeoutSeconds": 9}, 9.0, []),  # 1 x (9 + 1) = 10 s: the longest the preStop allows
    ({"intervalSeconds": 4}, 6.0, []),  # unset: the longest that fits, 10 - 4, below the default
    ({"unhealthyThreshold": 2}, 3.0, []),  # unset: 10 / 2 - 2
    ({"intervalSeconds": 4, "unhealthyThreshold": 3}, None, [
        "gateway.healthCheck: unhealthyThreshold x (timeoutSeconds + intervalSeconds) is 36 s, above 10 s: a replica "
        "that stops answering would still get new requests after its pod's preStop wait "
        "(components.k8s.defaults.GATEWAY_DETECTION_SECONDS); lower one of them"]),
    ({"intervalSeconds": 2, "timeoutSeconds": 9}, None, [
        "gateway.healthCheck: unhealthyThreshold x (timeoutSeconds + intervalSeconds) is 11 s, above 10 s: a replica "
        "that stops answering would still get new requests after its pod's preStop wait "
        "(components.k8s.defaults.GATEWAY_DETECTION_SECONDS); lower one of them"]),
])
def test_a_health_checks_timeout_keeps_its_window_within_the_prestop(health: dict[str, Any], timeout: float | None,
                                                                     problems: list[str]) -> None:
    """A check may take longer than its interval (a generation queued behind a saturated engine's work: 8 s shipped,
    every 2 s); the window unhealthyThreshold x (timeoutSeconds + intervalSeconds) may not exceed 10 s. An unset
    timeoutSeconds is 8 or the longest that fits."""
    raw = stack_raw("dev")
    raw["gateway"] = {"healthCheck": health}
    if problems:
        assert _problems(gateway=raw["gateway"]) == problems
    else:
        assert parse(raw, stack="dev").gateway.health_check.timeout_seconds == timeout


def test_the_stack_reference_page_is_current() -> None:
    """Regenerate with `python -m infra.stack.reference > docs/stack-reference.md` when this fails."""
    page = (ROOT / "docs" / "stack-reference.md").read_text()
    assert reference.COMMAND in page.splitlines()[2]
    assert page == reference.render(stack_file_schema())


def test_the_stack_reference_lists_each_declared_setting_with_type_default_bounds_and_description() -> None:
    page = (ROOT / "docs" / "stack-reference.md").read_text()
    assert ("| `gateway.retries.attempts` | integer | `2` | >= 0; <= 10 | Retries of one request, on a connect "
            "failure, a reset, a 500, 502 or 503, or a try idle longer than the model's tryIdleTimeoutSeconds. |"
            ) in page.splitlines()
    for cls in SECTIONS:
        for f in declared.declared_fields(cls):
            key = declared.key_of(f)
            path = ".".join("<name>" if s == "*" else s for s in SCHEMA_PATHS[cls]) + f".{key}"
            assert any(line.startswith(f"| `{path}` |") and f.metadata[SETTING]["doc"] in line
                       for line in page.splitlines()), path


def test_declared_dataclasses_stay_plain_for_the_components() -> None:
    """components/ needs no pydantic: a settings dataclass is a standard library dataclass with metadata."""
    for cls in SECTIONS:
        assert dataclasses.is_dataclass(cls) and not hasattr(cls, "__pydantic_fields__")


def test_a_setting_reaches_the_component_args_of_the_same_name_with_no_line_of_mapping() -> None:
    """infra/component_args.shared(): every scalar setting a component's args take by name, unset ones left out (the
    component's default applies); what differs in shape (the pool, replicas) is mapped by hand after it."""
    from components.k8s.serving import ModelDeploymentArgs
    from infra.component_args import model_deployment_args, shared

    cfg = parse(stack_raw("dev"), stack="dev")
    m = next(iter(cfg.models.values()))
    got = shared(m, ModelDeploymentArgs)
    assert got["quantization"] == m.quantization and got["tensor_parallel"] == m.tensor_parallel
    assert got["engine"] == m.engine and got["startup_budget_seconds"] == m.startup_budget_seconds
    assert "speculative" not in got and "replicas" not in got  # sections: mapped by hand
    assert all(v is not None for v in got.values())
    args = model_deployment_args(cfg, m)
    assert {k: args[k] for k in got if k != "pool"} == {k: v for k, v in got.items() if k != "pool"}  # type: ignore[literal-required]
    assert args["pool"]["name"] == m.pool


def _declared_keys() -> dict[str, list[str]]:
    """stack file key -> the declared fields (Class.field) that own it, over every settings dataclass."""
    import components.k8s.settings as settings
    import infra.config as config
    import infra.stack.cluster as cluster

    classes = {v for m in (settings, cluster, config) for v in vars(m).values()
               if isinstance(v, type) and dataclasses.is_dataclass(v)}
    keys: dict[str, list[str]] = {}
    for cls in sorted(classes, key=lambda c: c.__name__):
        for f in declared.declared_fields(cls):
            keys.setdefault(declared.key_of(f), []).append(f"{cls.__name__}.{f.name}")
    return keys


# The readers of a raw stack mapping and the position of their `default` argument: value(d, key, path, kind,
# default), strings(d, key, path, default).
_READERS = {"value": 4, "strings": 3}


def test_no_reader_writes_a_literal_default_of_a_declared_setting_a_second_time() -> None:
    """A default is written once, on the declaration: infra/config.py and infra/stack/ read a declared key through
    the declared reader (fields, section, listed) or pass a default taken from the declaration, never a literal of
    their own (which could drift from the declaration's, and from the schema and reference generated from it)."""
    import ast

    keys = _declared_keys()
    found = []
    for path in sorted([ROOT / "infra" / "config.py", *(ROOT / "infra" / "stack").glob("*.py")]):
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in _READERS and len(node.args) > 1
                    and isinstance(node.args[1], ast.Constant) and node.args[1].value in keys):
                continue
            at = _READERS[node.func.attr]
            default = node.args[at] if len(node.args) > at else next(
                (k.value for k in node.keywords if k.arg == "default"), None)
            literal = isinstance(default, ast.List | ast.Tuple | ast.Dict | ast.Set) or (
                isinstance(default, ast.Constant) and default.value is not None)
            if literal:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.args[1].value} "
                             f"(declared on {', '.join(keys[node.args[1].value])})")
    assert found == []
    assert {"quantization", "taints", "issuers", "callers", "type"} <= set(keys)  # the scan sees the declarations


def test_mappings_of_numbers_take_key_pattern_and_value_bounds_from_their_declaration() -> None:
    """observability.prices and tenants.<name>.migQuota: a bad entry is reported at its key with the declared bound
    (ge=0 on ObservabilitySettings.prices and Tenant.mig_quota) and the declared key check; good entries stay."""
    raw = stack_raw("dev")
    raw["observability"] = {"prices": {"g5.xlarge": -1, "g6.xlarge": True, "x9.huge": 2.0}}
    raw["tenants"]["demo"]["migQuota"] = {"1g.10gb": -2, "2g": 1, "3g.40gb": 1.5}
    with pytest.raises(ConfigError) as err:
        parse(raw, stack="dev")
    problems = [str(p) for p in err.value.problems]
    assert [p for p in problems if ".migQuota." in p] == [
        "tenants.demo.migQuota.1g.10gb: expected a slice count (an integer >= 0), got -2",
        "tenants.demo.migQuota.2g: is not a MIG profile such as 1g.10gb",
        "tenants.demo.migQuota.3g.40gb: expected a slice count (an integer >= 0), got 1.5"]
    assert [p for p in problems if ".prices." in p][:2] == [
        "observability.prices.g5.xlarge: expected a price in $/hour (a number >= 0), got -1",
        "observability.prices.g6.xlarge: expected a price in $/hour (a number >= 0), got true"]
    assert [p for p in problems if ".prices." in p][2].startswith(
        "observability.prices.x9.huge: is not a known instance type; known: ")


def test_the_settings_package_exports_every_public_name_of_its_modules() -> None:
    """components.k8s.settings is one module per section; `from components.k8s.settings import X` (and the old
    components.k8s.values) keeps working for every name a section module exports."""
    import importlib

    import components.k8s.settings as settings
    import components.k8s.values as values

    for name in ("base", "tenants", "models", "gateway", "pools", "observability"):
        module = importlib.import_module(f"components.k8s.settings.{name}")
        assert set(module.__all__) <= set(settings.__all__), name
        assert all(getattr(settings, n) is getattr(module, n) for n in module.__all__), name
    assert sorted(values.__all__) == sorted(settings.__all__) and len(set(settings.__all__)) == len(settings.__all__)
    # the old name is for importers outside the kit: the kit's own modules use the settings package
    root = Path(__file__).resolve().parents[2]
    old = [str(p.relative_to(root)) for d in ("components", "infra", "dashboards", "policies", "telemetry")
           for p in sorted((root / d).rglob("*.py"))
           if "components.k8s.values" in p.read_text() and p.name != "values.py"]
    assert old == []
