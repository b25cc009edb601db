"""What each object of the program waits for (state.json `dependencies`): only what it needs, so `pulumi up`
creates models side by side and `pulumi destroy` removes each object before what it needs. Each ordering that
matters is pinned here with the reason the real system gives."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from components.aws.node_pool import TYPE as POOL_TYPE

RELEASE = "kubernetes:helm.sh/v3:Release"
POLICY = "kubernetes:security.istio.io/v1:AuthorizationPolicy"
WORKLOADS = ("kubernetes:apps/v1:StatefulSet", "kubernetes:leaderworkerset.x-k8s.io/v1:LeaderWorkerSet")


def _state(synthesized: Callable[[str], Path], stack: str) -> list[dict[str, Any]]:
    return json.loads((synthesized(stack) / "state.json").read_text())["deployment"]["resources"]


def _name(r: dict[str, Any]) -> str:
    return r["urn"].rsplit("::", 1)[-1]


def _by_name(res: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {_name(r): r for r in res}


def _release(res: list[dict[str, Any]], chart: str) -> str:
    (urn,) = [r["urn"] for r in res if r["type"] == RELEASE and r["inputs"]["chart"].rsplit("/", 1)[-1] == chart]
    return urn


def _model_objects(res: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in res if r.get("custom") and "aifactory:k8s:ModelDeployment$kubernetes:" in r["urn"]]


@pytest.mark.parametrize("stack", ["staging", "prod", "onprem"])
def test_model_pods_wait_for_istiod_their_tenant_namespace_its_policies_and_priority_class(
        synthesized: Callable[[str], Path], stack: str) -> None:
    """Istio injects the sidecar by a mutating webhook on pod CREATE only (istio/istio@1.28.3:
    manifests/charts/istio-control/istio-discovery/templates/mutatingwebhook.yaml): a pod created before istiod runs
    without one, outside its tenant's AuthorizationPolicies, until restarted. The Priority admission plugin refuses a
    pod whose PriorityClass does not exist ("no PriorityClass with name ... was found", kubernetes/kubernetes@v1.34.0:
    plugin/pkg/admission/priority/admission.go)."""
    res = _state(synthesized, stack)
    names = _by_name(res)
    istiod = _release(res, "istiod")
    workloads = [r for r in _model_objects(res) if r["type"] in WORKLOADS]
    assert len(workloads) >= 2
    for w in workloads:
        ns = w["inputs"]["metadata"]["namespace"]
        deps = set(w["dependencies"])
        tenant_ns = {r["urn"] for r in res if r["type"] == "kubernetes:core/v1:Namespace"
                     and r["inputs"]["metadata"]["name"] == ns}
        policies = {r["urn"]: r["inputs"]["metadata"]["namespace"] for r in res if r["type"] == POLICY}
        own = {p for p, policy_ns in policies.items() if policy_ns == ns}
        pods = w["inputs"]["spec"].get("template") or w["inputs"]["spec"]["leaderWorkerTemplate"]["leaderTemplate"]
        priority = pods["spec"]["priorityClassName"]
        (pc,) = [r["urn"] for r in res if r["type"] == "kubernetes:scheduling.k8s.io/v1:PriorityClass"
                 and r["inputs"]["metadata"]["name"] == priority]
        peer = names["platform-mesh-peer-authentication"]["urn"]
        assert {istiod, peer, pc} | tenant_ns | own <= deps, _name(w)
        assert own and not deps & (set(policies) - own), f"{_name(w)}: another tenant's policies"


def test_aws_model_pods_wait_for_their_pools_nodes_the_cache_class_and_the_node_cache(
        synthesized: Callable[[str], Path]) -> None:
    """The pods' cache volumes name the kit's gp3 class (no default class on EKS 1.30+, so the claim would stay
    Pending), they run on their pool's nodes, and a node-cache claim is a hostPath of type Directory that the prep
    DaemonSet makes (the kubelet does not mount a missing Directory)."""
    res = _state(synthesized, "prod")
    names = _by_name(res)
    deployment = names["model-assistant-batch-statefulset"]  # h200 pool: NVMe instance store, the node cache
    deps = set(deployment["dependencies"])
    assert {names["model-cache-storageclass"]["urn"], names["serving-cache-prep"]["urn"],
            names["aifactory-prod-h200-ng"]["urn"]} <= deps
    assert names["aifactory-prod-l40s-ng"]["urn"] not in deps  # another pool's nodes
    l40s = set(names["model-finance-8b-statefulset"]["dependencies"])  # no instance store: no node cache
    assert names["serving-cache-prep"]["urn"] not in l40s and names["aifactory-prod-l40s-ng"]["urn"] in l40s


@pytest.mark.parametrize("stack", ["dev", "staging", "prod"])
def test_aws_model_pods_wait_for_their_pools_node_group_not_each_resource_of_the_pool(
        synthesized: Callable[[str], Path], stack: str) -> None:
    """Of its pool, a workload waits for the EKS node group alone: the node group already waits for its launch
    template, node role and security groups, and is created once EKS reports it ACTIVE (pulumi-aws 7.51.1's
    upstream, hashicorp/terraform-provider-aws@v6: internal/service/eks/node_group.go waitNodegroupCreated). The ASG's
    node-template tags only tell the cluster autoscaler what a pool at zero offers; it reads them again at every
    scan, so a pod created before them waits one scan longer, nothing more. Depending on the pool component would
    add each of its resources as an edge, every one of which the SDK checks for a cycle."""
    res = _state(synthesized, stack)
    pool_of = {r["urn"]: r["urn"].split("::")[-1].rsplit("-", 1)[0] for r in res
               if f"{POOL_TYPE}$" in r["urn"]}
    workloads = [r for r in _model_objects(res) if r["type"] in WORKLOADS]
    on_aws = [w for w in workloads if any(d in pool_of for d in w["dependencies"])]
    assert on_aws and len(on_aws) == len(workloads)
    for w in on_aws:
        from_pools = [d for d in w["dependencies"] if d in pool_of]
        assert [d.rsplit("::", 1)[-1] for d in from_pools] == [f"{pool_of[from_pools[0]]}-ng"], _name(w)
        assert from_pools[0].split("::")[-2].endswith("aws:eks/nodeGroup:NodeGroup")


@pytest.mark.parametrize("stack", ["dev", "staging", "prod", "onprem"])
def test_custom_resources_wait_for_the_release_that_installs_their_crd(
        synthesized: Callable[[str], Path], stack: str) -> None:
    """Before its CRD exists the API server answers 'no matches for kind' and the create fails; on destroy, the
    controller must outlive its custom resources to remove their finalizers. KEDA's chart installs keda.sh,
    kube-prometheus-stack monitoring.coreos.com, lws leaderworkerset.x-k8s.io (the charts at
    components/k8s/versions.py's pins)."""
    res = _state(synthesized, stack)
    charts = {"keda.sh": "keda", "monitoring.coreos.com": "kube-prometheus-stack", "leaderworkerset.x-k8s.io": "lws"}
    seen = set()
    for r in res:
        group = r["type"].split(":")[1].rpartition("/")[0] if r["type"].startswith("kubernetes:") else ""
        owner = r["urn"].rsplit("::", 2)[-2]
        if group in charts and ("ModelDeployment$" in owner or "Monitoring$" in owner):
            assert _release(res, charts[group]) in r["dependencies"], _name(r)
            seen.add(r["type"].rsplit(":", 1)[-1])
    assert {"ServiceMonitor", "PrometheusRule"} <= seen


def test_model_objects_without_pods_wait_for_their_namespace_only(synthesized: Callable[[str], Path]) -> None:
    """A Service, ServiceAccount or PodDisruptionBudget needs its namespace and nothing of the mesh, the nodes or
    the observability backends: each model's objects are created while the platform's releases still install."""
    res = _state(synthesized, "prod")
    names = _by_name(res)
    tenant_ns = names["platform-tenancy-assistant"]["urn"]
    for kind in ("service", "serviceaccount", "poddisruptionbudget", "persistentvolumeclaim"):
        assert names[f"model-assistant-batch-{kind}"]["dependencies"] == [tenant_ns], kind
    assert "dependencies" not in names["model-assistant-batch-persistentvolume"]  # cluster-scoped


@pytest.mark.parametrize("stack", ["prod", "onprem"])
def test_the_gateway_waits_for_the_model_services_and_workloads_it_routes_to(
        synthesized: Callable[[str], Path], stack: str) -> None:
    """Envoy reaches the replicas by the model's headless Service's name (envoy_replicas); the
    gateway's pods get their sidecar from istiod and its ServiceMonitor needs the Prometheus operator's CRD. Its
    objects are created after the component, which waits for these and for every model's StatefulSet or
    LeaderWorkerSet (pulumi-kubernetes awaits a StatefulSet's ready replicas), so a new gateway config is not
    applied before the workloads it routes to are ready. On AWS it waits for the AWS Load Balancer Controller too:
    its pod webhook gives the gateway's pods their readiness gates (failing closed) and its finalizer on the
    gateway's Service deletes the NLB, so `pulumi destroy` removes the gateway before the controller."""
    res = _state(synthesized, stack)
    names = _by_name(res)
    services = {r["urn"] for r in _model_objects(res) if r["type"] == "kubernetes:core/v1:Service"}
    workloads = {r["urn"] for r in _model_objects(res)
                 if r["type"].rsplit(":", 1)[1] in ("StatefulSet", "LeaderWorkerSet")}
    assert len(services) >= 3 and len(workloads) == len(services)
    controller = {_release(res, "aws-load-balancer-controller")} if stack != "onprem" else set()
    assert set(names["gateway"]["dependencies"]) == services | workloads | controller | {
        _release(res, "istiod"), _release(res, "kube-prometheus-stack")}


def test_the_load_balancer_controller_is_scraped_plain_after_the_prometheus_operator(
        synthesized: Callable[[str], Path]) -> None:
    """The controller's chart renders its ServiceMonitor whenever serviceMonitor.enabled is set, CRD or not (eks-charts
    aws-load-balancer-controller 3.5.0 templates/servicemonitor.yaml), so its release waits for kube-prometheus-stack,
    which brings the CRD. Its namespace has no sidecar injection (no istio-injection or istio.io/rev label): the
    chart's plain-HTTP scrape reaches the controller, as policies/scrape.py's mesh-scrapes-use-mtls requires only of
    injected namespaces."""
    res = _state(synthesized, "prod")
    controller = next(r for r in res if r["urn"] == _release(res, "aws-load-balancer-controller"))
    assert _release(res, "kube-prometheus-stack") in controller["dependencies"]
    assert controller["inputs"]["values"]["serviceMonitor"] == {"enabled": True}
    namespace = controller["inputs"]["namespace"]
    [labels] = [r["inputs"]["metadata"]["labels"] for r in res if r["type"] == "kubernetes:core/v1:Namespace"
                and r["inputs"]["metadata"]["name"] == namespace]
    assert namespace == "aifactory-system" and not {"istio-injection", "istio.io/rev"} & set(labels)


@pytest.mark.parametrize("stack", ["dev", "prod", "onprem"])
def test_the_gateway_deployment_waits_for_its_service_account_and_config_map_the_rest_for_their_namespace(
        synthesized: Callable[[str], Path], stack: str) -> None:
    """A pod naming a ServiceAccount that does not exist is refused at admission (kubernetes/kubernetes
    plugin/pkg/admission/serviceaccount/admission.go); a changed envoy.yaml replaces the ConfigMap
    (pulumi/pulumi-kubernetes@v4.32.0 provider/pkg/provider/diff.go: ConfigMaps are immutable unless
    enableConfigMapMutable) and Envoy reads it once at start, so the rollout its new hash starts must come after it.
    Every other object needs only its namespace here: what the gateway needs from outside (istiod, the Prometheus
    operator, the model Services) orders the component itself, which its children follow at `up` and precede at
    `destroy` (the engine counts a resource's parent among its dependencies: pulumi/pulumi@v3.259.0
    pkg/resource/graph/dependency_graph.go DependenciesOf)."""
    res = _state(synthesized, stack)
    names = _by_name(res)
    children = {_name(r): r for r in res if r.get("custom") and r.get("parent") == names["gateway"]["urn"]}
    ns = names["gateway-ns"]["urn"]
    # behind an AWS NLB its pods also come after the Service, whose target group binding their readiness gates need
    # (components.k8s.gateway.component.object_needs)
    behind_nlb = {names["gateway-service"]["urn"]} if stack != "onprem" else set()
    assert set(children["gateway-deployment"]["dependencies"]) == {
        ns, names["gateway-serviceaccount"]["urn"], names["gateway-configmap"]["urn"], *behind_nlb}
    others = {n: r["dependencies"] for n, r in children.items()
              if n not in ("gateway-deployment", "gateway-ns", "gateway-budget-store")}
    assert len(others) >= 15 and {n: [ns] for n in others} == others
    # the token budgets' store is a release with a volume claim: on EKS it also waits for what every platform
    # release does (the system nodes, the add-ons, node egress, the storage class its claim names)
    if "gateway-budget-store" in children:
        store = set(children["gateway-budget-store"]["dependencies"])
        classes = {r["urn"] for r in res if r["type"] == "kubernetes:storage.k8s.io/v1:StorageClass"}
        assert ns in store and (stack == "onprem" or bool(classes & store))
