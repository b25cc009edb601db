"""Run the pack offline over a stack export: `aifactory policy check STATE_JSON` and synth's policy report.

The runner calls the pack's own `validate` functions (the objects the Analyzer gRPC server serves),
with ResourceValidationArgs built from each resource's `inputs` (what CrossGuard's Analyze receives)
and StackValidationArgs whose PolicyResources carry `outputs` (what AnalyzeStack receives), parents,
dependencies and property dependencies. Config uses the format of `pulumi up --policy-pack-config`:
policy name -> enforcement level, or -> {enforcementLevel?, <property>: value}; "all" sets every level.
"""

from __future__ import annotations

import difflib
import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pulumi_policy import (
    EnforcementLevel,
    Policy,
    PolicyCustomTimeouts,
    PolicyResource,
    PolicyResourceOptions,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidationArgs,
    StackValidationPolicy,
)
from pulumi_policy.deserialize import deserialize_properties
from pulumi_policy.proxy import unknown_checking_proxy

from policies.pack import PACK_NAME, POLICIES

__all__ = [
    "EXIT_OK",
    "EXIT_VIOLATIONS",
    "EXIT_BAD_INPUT",
    "ENCRYPTED_SECRET",
    "SEVERITY_ORDER",
    "PolicyInputError",
    "PackConfig",
    "Violation",
    "parse_config",
    "read_config",
    "state_resources",
    "read_state",
    "run_policies",
    "report",
    "format_text",
    "check_command",
]

EXIT_OK, EXIT_VIOLATIONS, EXIT_BAD_INPUT = 0, 1, 2
SEVERITY_ORDER = ("critical", "high", "medium", "low", "unspecified")
_LEVELS = {level.value: level for level in EnforcementLevel}
_STACK_TYPE = "pulumi:pulumi:Stack"
_JSON_TYPES: dict[str, type] = {"array": list, "string": str, "boolean": bool}


class PolicyInputError(Exception):
    """The stack export or the pack config cannot be used; the message says where and why."""


@dataclass(frozen=True)
class PackConfig:
    """Enforcement overrides and config properties per policy name."""

    levels: Mapping[str, EnforcementLevel] = field(default_factory=dict)
    properties: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def level(self, policy: Policy) -> EnforcementLevel:
        return self.levels.get(policy.name) or self.levels.get("all") or policy.enforcement_level \
            or EnforcementLevel.ADVISORY


@dataclass(frozen=True)
class Violation:
    severity: str
    policy: str
    urn: str
    message: str
    enforcement: str
    resource_name: str
    resource_type: str
    remediation: str = ""  # the policy's remediation steps: what to change to comply

    @property
    def mandatory(self) -> bool:
        return self.enforcement in ("mandatory", "remediate")


# ---------------------------------------------------------------------------------------------
# inputs


def _load(path: Path, what: str) -> Any:
    try:
        text = path.read_bytes().decode("utf-8")
    except OSError as err:
        raise PolicyInputError(f"{path}: cannot read {what}: {err.strerror or err}") from None
    except UnicodeDecodeError as err:
        raise PolicyInputError(f"{path}: {what} is not UTF-8 text (byte 0x{err.object[err.start]:02x} at offset "
                               f"{err.start}); save it as UTF-8") from None
    try:
        return json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as err:
        raise PolicyInputError(f"{path}: {what} is not valid {'JSON' if path.suffix == '.json' else 'YAML/JSON'}: "
                               f"{str(err).splitlines()[0]}") from None


def parse_config(raw: Any, *, source: str = "config", policies: Sequence[Policy] = POLICIES) -> PackConfig:
    """Validate a pack config (every problem at once, with its key path)."""
    if raw is None:
        return PackConfig()
    if not isinstance(raw, Mapping):
        raise PolicyInputError(f"{source}: expected a mapping of policy name to settings, got {type(raw).__name__}")
    known = {p.name: p for p in policies}
    problems: list[str] = []
    levels: dict[str, EnforcementLevel] = {}
    props: dict[str, dict[str, Any]] = {}

    def level(path: str, value: Any) -> None:
        if value not in _LEVELS:
            problems.append(f"{path}: {value!r} is not an enforcement level; choose one of: {', '.join(_LEVELS)}")
        else:
            levels[path.split(".")[0]] = _LEVELS[value]

    for name, body in raw.items():
        name = str(name)
        if name == "all":
            level(name, body)
            continue
        if name not in known:
            close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.75)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            problems.append(f"{name}: unknown policy{hint}; policies: {', '.join(sorted(known))}")
            continue
        if isinstance(body, str):
            level(name, body)
            continue
        if not isinstance(body, Mapping):
            problems.append(f"{name}: expected an enforcement level or a mapping, got {type(body).__name__}")
            continue
        declared = known[name].config_schema
        schema = declared.properties if declared is not None else {}
        for key, value in body.items():
            path = f"{name}.{key}"
            if key == "enforcementLevel":
                level(path, value)
            elif key not in schema:
                problems.append(f"{path}: unknown property; {name} takes: "
                                f"{', '.join(['enforcementLevel', *sorted(schema)])}")
            elif (msg := _type_problem(schema[key], value)) is not None:
                problems.append(f"{path}: {msg}")
            else:
                props.setdefault(name, {})[key] = value
    if problems:
        raise PolicyInputError(f"{source}: {len(problems)} problem(s):\n" + "\n".join(f"  - {p}" for p in problems))
    return PackConfig(levels, props)


def _type_problem(schema: Mapping[str, Any], value: Any) -> str | None:
    kind = _JSON_TYPES[schema["type"]]
    ok = isinstance(value, list) and all(isinstance(v, str) for v in value) if kind is list else isinstance(value, kind)
    if not ok:
        want = "a list of strings" if kind is list else f"a {schema['type']}"
        return f"expected {want}, got {json.dumps(value)}"
    return None


def read_config(path: Path) -> PackConfig:
    return parse_config(_load(path, "policy config"), source=str(path))


def state_resources(doc: Any, *, source: str = "state") -> list[dict[str, Any]]:
    """The resources of a `pulumi stack export` (version 3) document."""
    resources = doc.get("deployment", {}).get("resources") if isinstance(doc, Mapping) and \
        isinstance(doc.get("deployment"), Mapping) else None
    if not isinstance(resources, list):
        raise PolicyInputError(f"{source}: not a stack export: expected deployment.resources "
                               "(the output of `pulumi stack export` or synth's state.json)")
    for i, r in enumerate(resources):
        if not isinstance(r, Mapping) or not isinstance(r.get("urn"), str) or not isinstance(r.get("type"), str):
            raise PolicyInputError(f"{source}: deployment.resources[{i}] has no urn and type")
    return resources


def read_state(path: Path) -> list[dict[str, Any]]:
    return state_resources(_load(path, "stack export"), source=str(path))


# ---------------------------------------------------------------------------------------------
# running the pack's validate functions


def _name(urn: str) -> str:
    return urn.rsplit("::", 1)[-1]


_SIG_KEY, _SECRET_SIG = "4dabf18193072939515e22adb298388d", "1b47061264138c4ac30d75fd1eb44270"
ENCRYPTED_SECRET = "[secret]"


def _secrets_opened(value: Any) -> Any:
    """Secrets as an export holds them, in the shape CrossGuard's deserializer takes ({sig, value}):
    `--show-secrets` exports carry `plaintext` (JSON text); encrypted ones become the string "[secret]"."""
    if isinstance(value, list):
        return [_secrets_opened(v) for v in value]
    if not isinstance(value, dict):
        return value
    if value.get(_SIG_KEY) == _SECRET_SIG and "value" not in value:
        plain = json.loads(value["plaintext"]) if isinstance(value.get("plaintext"), str) else ENCRYPTED_SECRET
        return {_SIG_KEY: _SECRET_SIG, "value": _secrets_opened(plain)}
    return {k: _secrets_opened(v) for k, v in value.items()}


def _props(values: Any) -> Mapping[str, Any]:
    return unknown_checking_proxy(deserialize_properties(_secrets_opened(dict(values or {}))))


def _timeouts(entry: Mapping[str, Any]) -> PolicyCustomTimeouts:
    """The resource's customTimeouts as the export records them (seconds; 0 = the provider's default)."""
    ct = entry.get("customTimeouts")
    seconds = [float(ct.get(k) or 0) if isinstance(ct, Mapping) else 0.0 for k in ("create", "update", "delete")]
    return PolicyCustomTimeouts(*seconds)


def _options(entry: Mapping[str, Any]) -> PolicyResourceOptions:
    return PolicyResourceOptions(bool(entry.get("protect")), [], None, [], _timeouts(entry), [],
                                 entry.get("parent"))


def _stack_resources(entries: Sequence[Mapping[str, Any]]) -> list[PolicyResource]:
    by_urn = {}
    for e in entries:
        by_urn[e["urn"]] = PolicyResource(e["type"], _props(e.get("outputs") or e.get("inputs")), e["urn"],
                                          _name(e["urn"]), _options(e), None, None, [], {})
    for e in entries:
        r = by_urn[e["urn"]]
        r.parent = by_urn.get(e.get("parent") or "")
        r.dependencies = [by_urn[u] for u in e.get("dependencies") or () if u in by_urn]
        r.property_dependencies = {k: [by_urn[u] for u in us if u in by_urn]
                                   for k, us in (e.get("propertyDependencies") or {}).items()}
    return list(by_urn.values())


def run_policies(entries: Sequence[Mapping[str, Any]], config: PackConfig | None = None,
                 policies: Sequence[Policy] = POLICIES) -> list[Violation]:
    """Every violation the policies report over the export's resources, sorted by severity."""
    config = config or PackConfig()
    entries = [e for e in entries if e["type"] != _STACK_TYPE]
    by_urn = {e["urn"]: e for e in entries}
    out: list[Violation] = []
    stack = None
    inputs: dict[str, Mapping[str, Any]] = {}  # read once, shared by every resource policy (they only read)
    for policy in policies:
        level = config.level(policy)
        if level == EnforcementLevel.DISABLED:
            continue
        severity = policy.severity.value if policy.severity else "unspecified"
        cfg = dict(config.properties.get(policy.name) or {})

        def reporter(default_urn: str | None, policy: Policy = policy, severity: str = severity,
                     level: EnforcementLevel = level):
            def report_violation(message: str, urn: str | None = None) -> None:
                where = default_urn or urn or ""
                out.append(Violation(severity, policy.name, where, message, level.value,
                                     _name(where) if where else "(stack)", by_urn.get(where, {}).get("type", ""),
                                     policy.remediation_steps or ""))
            return report_violation

        if isinstance(policy, ResourceValidationPolicy):
            for e in entries:
                if e["urn"] not in inputs:
                    inputs[e["urn"]] = _props(e.get("inputs"))
                args = ResourceValidationArgs(e["type"], inputs[e["urn"]], e["urn"], _name(e["urn"]), _options(e),
                                              None, cfg)
                policy.validate(args, reporter(e["urn"]))
        elif isinstance(policy, StackValidationPolicy):
            stack = stack if stack is not None else _stack_resources(entries)
            policy.validate(StackValidationArgs(stack, cfg), reporter(None))
    # stable: a resource's violations keep the order its policy reported them in
    return sorted(out, key=lambda v: (SEVERITY_ORDER.index(v.severity), v.policy, v.resource_name, v.urn))


# ---------------------------------------------------------------------------------------------
# output


def report(violations: Sequence[Violation], *, resources: int, policies: Sequence[Policy] = POLICIES,
           config: PackConfig | None = None) -> dict[str, Any]:
    config = config or PackConfig()
    return {
        "pack": PACK_NAME,
        "resources": resources,
        "policies": [{"name": p.name, "severity": p.severity.value if p.severity else "unspecified",
                      "enforcement": config.level(p).value, "description": p.description,
                      "remediation": p.remediation_steps or ""} for p in policies],
        "summary": {"mandatory": sum(v.mandatory for v in violations),
                    "advisory": sum(not v.mandatory for v in violations)},
        "violations": [asdict(v) for v in violations],
    }


def format_text(violations: Sequence[Violation], *, resources: int, policies: int) -> str:
    mandatory = sum(v.mandatory for v in violations)
    lines = [f"policy check: {policies} policies over {resources} resources: {mandatory} mandatory, "
             f"{len(violations) - mandatory} advisory violation(s)"]
    for severity in SEVERITY_ORDER:
        group = [v for v in violations if v.severity == severity]
        if group:
            lines.append(f"\n{severity.upper()} ({len(group)})")
            for i, v in enumerate(group):
                what = f"{v.resource_name} ({v.resource_type})" if v.resource_type else v.resource_name
                lines.append(f"  [{v.enforcement}] {v.policy}  {what}\n      {v.message}")
                last_of_policy = i + 1 == len(group) or group[i + 1].policy != v.policy
                if last_of_policy and v.remediation:  # once per policy, after its violations
                    lines.append(f"    fix ({v.policy}): {v.remediation}")
    return "\n".join(lines) + "\n"


def check_command(state_path: Path, *, config: Path | None, json_out: Path | None) -> int:
    """`aifactory policy check`: 0 clean or advisory only, 1 mandatory violations, 2 unusable input.

    `json_out`: also write the report as JSON there; `-` writes it to stdout (the text report then goes to
    stderr). The caller checks that the target is writable before calling (nothing is created here).
    """
    try:
        entries = read_state(state_path)
        pack_config = read_config(config) if config is not None else PackConfig()
    except PolicyInputError as err:
        print(f"aifactory: policy check: {err}", file=sys.stderr, flush=True)
        return EXIT_BAD_INPUT
    resources = sum(e["type"] != _STACK_TYPE for e in entries)
    violations = run_policies(entries, pack_config)
    to_stdout = json_out is not None and str(json_out) == "-"
    (sys.stderr if to_stdout else sys.stdout).write(format_text(violations, resources=resources,
                                                                policies=len(POLICIES)))
    if json_out is not None:
        text = json.dumps(report(violations, resources=resources, config=pack_config), indent=2, sort_keys=True) + "\n"
        if to_stdout:
            sys.stdout.write(text)
        else:
            json_out.write_text(text)
    return EXIT_VIOLATIONS if any(v.mandatory for v in violations) else EXIT_OK
