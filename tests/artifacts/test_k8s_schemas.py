"""Every Kubernetes object each shipped stack renders validates against the upstream OpenAPI schemas of
the stack's Kubernetes version (kubernetes-validate, strict: unknown fields are errors). Custom
resources have no schema there: they must name an API group the kit installs a controller for, and
their spec may use only fields their CRD's openAPIV3Schema has, with its types and enums: those facts
are in tests/artifacts/crds/*.yaml (notation in monitoring.coreos.com.yaml); embedded pod templates
(LeaderWorkerSet) validate strictly as core PodTemplates."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path
from typing import Any

import kubernetes_validate
import kubernetes_validate.utils
import pytest
import yaml

from tests.support.stacks import SHIPPED_STACKS

# API groups of custom resources, and the component whose CRDs define them.
CUSTOM_GROUPS = {
    "security.istio.io": "Istio base",
    "telemetry.istio.io": "Istio base",
    "networking.istio.io": "Istio base",
    "monitoring.coreos.com": "kube-prometheus-stack",
    "mellanox.com": "NVIDIA network operator",
    "nv-ipam.nvidia.com": "NVIDIA network operator (nv-ipam)",
    "sriovnetwork.openshift.io": "SR-IOV network operator",
    "leaderworkerset.x-k8s.io": "LeaderWorkerSet",
    "keda.sh": "KEDA",
    "inference.networking.k8s.io": "Gateway API Inference Extension",
    "inference.networking.x-k8s.io": "Gateway API Inference Extension",
    "gateway.networking.k8s.io": "Gateway API",
    "nvidia.com": "NVIDIA GPU operator",
}


@pytest.fixture(autouse=True, scope="module")
def _schemas_parsed_once() -> Iterator[None]:
    """kubernetes-validate reads and parses a kind's schema file and the version's _definitions.json (megabytes)
    again for every object it validates (kubernetes-validate 1.37.0 utils.py, validate() calls schema_contents()
    for both); the files do not change during the run, so this module parses each once (a pure function of the
    file name; the validator only reads what it returns)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(kubernetes_validate.utils, "schema_contents", cache(kubernetes_validate.utils.schema_contents))
        yield


def _objects(out: Path) -> list[tuple[str, dict[str, Any]]]:
    paths = sorted((out / "manifests").rglob("*.yaml"))
    # libyaml's safe loader (PyYAML's C binding, same YAML 1.1 safe schema): the pure-Python one spent most of this
    # file's minute parsing the stacks' manifests
    return [(str(p.relative_to(out)), yaml.load(p.read_text(), Loader=yaml.CSafeLoader)) for p in paths]


def _group(api_version: str) -> str:
    return api_version.rsplit("/", 1)[0] if "/" in api_version else ""


@pytest.mark.parametrize("stack", SHIPPED_STACKS)
def test_every_builtin_object_validates_strictly(stack: str, synthesized: Callable[[str], Path]) -> None:
    out = synthesized(stack)
    version = _version(out)
    failures, custom = [], []
    for rel, obj in _objects(out):
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.SchemaNotFoundError:
            custom.append((rel, obj))
        except kubernetes_validate.ValidationError as exc:
            failures.append(f"{rel}: {exc.message} at {'.'.join(map(str, exc.path))}")
    assert failures == []
    unknown = [f"{rel}: {obj['apiVersion']} {obj['kind']}" for rel, obj in custom
               if _group(obj["apiVersion"]) not in CUSTOM_GROUPS]
    assert unknown == [], "objects with no schema and no known CRD (a typo in apiVersion or kind?)"



# --------------------------------------------------------------------------------------------
# custom resources against the facts of their CRDs

CRDS_DIR = Path(__file__).parent / "crds"
LABEL_SELECTOR = {"matchLabels": "string-map",
                  "matchExpressions": [{"key": "string", "operator": "string", "values": ["string"]}]}
SCALARS: dict[str, Callable[[Any], bool]] = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "int-or-string": lambda v: isinstance(v, str) or (isinstance(v, int) and not isinstance(v, bool)),
    "string-map": lambda v: isinstance(v, dict) and all(isinstance(x, str) for x in v.values()),
    "any": lambda v: True,
}


@cache
def crd_specs() -> dict[str, Any]:
    """`apiVersion/kind` -> the notation of its spec, from every tests/artifacts/crds/*.yaml."""
    out: dict[str, Any] = {}
    for path in sorted(CRDS_DIR.glob("*.yaml")):
        doc = yaml.load(path.read_text(), Loader=yaml.CSafeLoader)
        out.update({k: v for k, v in doc.items() if k != "_definitions"})
    return out


def _version(out: Path) -> str:
    return json.loads((out / "state.json").read_text())["deployment"]["resources"][0]["outputs"][
        "kubernetesVersion"]


def spec_problems(value: Any, schema: Any, path: str, k8s_version: str) -> list[str]:
    """Where `value` leaves `schema` (the crds/ notation): unknown fields, wrong types, values outside enums."""
    if isinstance(schema, str) and schema in SCALARS:
        return [] if SCALARS[schema](value) else [f"{path}: {value!r} is not {schema}"]
    if schema == "label-selector":
        return spec_problems(value, LABEL_SELECTOR, path, k8s_version)
    if schema == "pod-template":
        template = {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "crd-field"}, "template": value}
        try:
            kubernetes_validate.validate(template, k8s_version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            return [f"{path}.{'.'.join(map(str, list(exc.path)[1:]))}: {exc.message}"]
        return []
    if isinstance(schema, list):
        if not isinstance(value, list):
            return [f"{path}: {value!r} is not a list"]
        return [p for i, item in enumerate(value) for p in spec_problems(item, schema[0], f"{path}[{i}]", k8s_version)]
    if isinstance(schema, dict) and set(schema) == {"enum"}:
        return [] if value in schema["enum"] else [f"{path}: {value!r} is not one of {schema['enum']}"]
    if not isinstance(value, dict):
        return [f"{path}: {value!r} is not an object"]
    problems = [f"{path}.{k}: no such field in the CRD (fields: {', '.join(sorted(schema))})"
                for k in value if k not in schema]
    return problems + [p for k, v in value.items() if k in schema
                       for p in spec_problems(v, schema[k], f"{path}.{k}", k8s_version)]


def custom_resource_problems(obj: dict[str, Any], k8s_version: str) -> list[str]:
    key = f"{obj['apiVersion']}/{obj['kind']}"
    if key not in crd_specs():
        return [f"{key}: no CRD facts in tests/artifacts/crds/ (add the spec fields the kit uses, from the CRD)"]
    extra = sorted(set(obj) - {"apiVersion", "kind", "metadata", "spec"})
    return [f"{key}: unknown top-level field {k}" for k in extra] + \
        spec_problems(obj.get("spec", {}), crd_specs()[key], "spec", k8s_version)


def _custom(out: Path) -> list[tuple[str, dict[str, Any]]]:
    return [(rel, obj) for rel, obj in _objects(out) if _group(obj["apiVersion"]) in CUSTOM_GROUPS]


@pytest.mark.parametrize("stack", SHIPPED_STACKS)
def test_every_custom_resource_uses_only_fields_of_its_crd(stack: str, synthesized: Callable[[str], Path]) -> None:
    out = synthesized(stack)
    version = _version(out)
    problems = [f"{rel}: {p}" for rel, obj in _custom(out) for p in custom_resource_problems(obj, version)]
    assert problems == []


def _first(stack_out: Path, kind: str) -> dict[str, Any]:
    return copy.deepcopy(next(obj for _, obj in _custom(stack_out) if obj["kind"] == kind))


def test_crd_check_catches_wrong_fields_types_and_enums(synthesized: Callable[[str], Path]) -> None:
    out = synthesized("prod")
    version = _version(out)
    scaled = _first(out, "ScaledObject")
    scaled["spec"]["maxReplicas"] = 4  # the HPA's name, not KEDA's maxReplicaCount
    scaled["spec"]["triggers"][0]["metadata"]["threshold"] = 20  # trigger metadata is a map of strings
    scaled["spec"]["scaleTargetRef"]["replicas"] = 1
    assert custom_resource_problems(scaled, version) == [
        "spec.maxReplicas: no such field in the CRD (fields: advanced, cooldownPeriod, fallback, idleReplicaCount, "
        "initialCooldownPeriod, maxReplicaCount, minReplicaCount, pollingInterval, scaleTargetRef, triggers)",
        "spec.scaleTargetRef.replicas: no such field in the CRD (fields: apiVersion, envSourceContainerName, kind, "
        "name)",
        "spec.triggers[0].metadata: {'ignoreNullValues': 'true', 'activationThreshold': '0', "
        f"'query': {scaled['spec']['triggers'][0]['metadata']['query']!r}, 'threshold': 20, "
        f"'serverAddress': {scaled['spec']['triggers'][0]['metadata']['serverAddress']!r}}} is not string-map",
    ]
    lws = _first(out, "LeaderWorkerSet")
    lws["spec"]["leaderWorkerTemplate"]["size"] = "2"
    lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]["gpus"] = 8
    lws["spec"]["startupPolicy"] = "LeaderFirst"
    assert sorted(custom_resource_problems(lws, version)) == [
        "spec.leaderWorkerTemplate.size: '2' is not integer",
        "spec.leaderWorkerTemplate.workerTemplate.spec.containers.0: Additional properties are not allowed "
        "('gpus' was unexpected)",
        "spec.startupPolicy: 'LeaderFirst' is not one of ['LeaderCreated', 'LeaderReady']"]
    monitor = _first(out, "ServiceMonitor")
    monitor["spec"]["podMetricsEndpoints"] = monitor["spec"].pop("endpoints")  # a PodMonitor's field
    monitor["spec"]["selector"]["matchLabel"] = {"app": "x"}
    assert custom_resource_problems(monitor, version) == [
        "spec.podMetricsEndpoints: no such field in the CRD (fields: "
        f"{', '.join(sorted(crd_specs()['monitoring.coreos.com/v1/ServiceMonitor']))})",
        "spec.selector.matchLabel: no such field in the CRD (fields: matchExpressions, matchLabels)"]
    monitor["kind"] = "PodMonitor"
    del monitor["spec"]["selector"]["matchLabel"]
    assert custom_resource_problems(monitor, version) == []  # the same scrape as a PodMonitor is valid
