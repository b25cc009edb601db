"""manifests/ (every Kubernetes object, one YAML each) and helm/ (one YAML per Helm release)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from infra.artifacts import ArtifactContext, artifact, dump_yaml

__all__ = ["HELM_RELEASE", "kubernetes_objects", "registered_object", "helm_releases", "manifest_path"]

HELM_RELEASE = "kubernetes:helm.sh/v3:Release"
# Types that are not objects in the cluster: providers, Helm releases (written to helm/), component wrappers.
_NOT_OBJECTS = ("pulumi:providers:", HELM_RELEASE, "kubernetes:yaml:", "kubernetes:kustomize:",
                "kubernetes:helm.sh/v4:")


def kubernetes_objects(resources: list[Any]) -> list[dict[str, Any]]:
    """The Kubernetes objects a synth result creates, as the manifests the provider would apply."""
    objs = []
    for r in resources:
        if not r.custom or r.external or not r.type.startswith("kubernetes:") or r.type.startswith(_NOT_OBJECTS):
            continue
        obj = {k: v for k, v in r.inputs.items() if not k.startswith("__")}
        meta = obj.get("metadata") or {}
        if not meta.get("name"):
            raise ValueError(f"{r.urn}: metadata.name is not set; the kit names every object explicitly "
                             "(auto-naming would make manifests unstable)")
        objs.append(obj)
    return objs


def registered_object(resources: list[Any], kind: str, namespace: str, name: str) -> dict[str, Any]:
    """The object the program registered: artifacts that mirror one (Envoy, Collector, dashboards, rules) are
    written from it, so they hold exactly what deploys and nothing is rendered twice."""
    for obj in kubernetes_objects(resources):
        meta = obj["metadata"]
        if obj["kind"] == kind and meta.get("namespace") == namespace and meta["name"] == name:
            return obj
    raise LookupError(f"the program registered no {kind} {namespace}/{name}")


def manifest_path(obj: dict[str, Any]) -> str:
    meta = obj["metadata"]
    return f"{meta.get('namespace') or '_cluster'}/{obj['kind'].lower()}.{meta['name']}.yaml"


def helm_releases(resources: list[Any]) -> list[dict[str, Any]]:
    releases = []
    for r in resources:
        if r.type != HELM_RELEASE:
            continue
        i = r.inputs
        releases.append({
            "name": i.get("name", r.name),
            "namespace": i.get("namespace", "default"),
            "chart": i.get("chart"),
            "repository": (i.get("repositoryOpts") or {}).get("repo"),
            "version": i.get("version"),
            "values": i.get("values") or {},
        })
    return releases


@artifact("manifests", order=10)
def write_manifests(ctx: ArtifactContext) -> list[Path]:
    written: dict[str, Path] = {}
    for obj in kubernetes_objects(ctx.result.resources):
        rel = manifest_path(obj)
        if rel in written:
            raise ValueError(f"two objects map to manifests/{rel}: {obj['apiVersion']} {obj['kind']} "
                             f"{obj['metadata']['name']}")
        path = ctx.out / "manifests" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(dump_yaml(obj))
        written[rel] = path
    return [written[k] for k in sorted(written)]


@artifact("helm", order=10)
def write_helm(ctx: ArtifactContext) -> list[Path]:
    out = []
    for rel in helm_releases(ctx.result.resources):
        path = ctx.out / "helm" / f"{rel['namespace']}.{rel['name']}.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(dump_yaml(rel))
        out.append(path)
    return sorted(out)
