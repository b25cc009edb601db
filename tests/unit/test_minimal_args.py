"""Each component from its required arguments only (`Cls(name, args)` with every optional one omitted): its own
documented defaults land in the objects it renders, and they are the stack model's defaults: the same objects as
the component built from a minimal stack's config through infra.component_args (which passes every field)."""

from __future__ import annotations

from typing import Any

from components.k8s.fabric import Fabric
from components.k8s.mesh import Mesh
from components.k8s.serving import ModelDeployment
from components.k8s.tenancy import Tenancy
from infra.component_args import fabric_args, mesh_args, model_deployment_args, tenancy_args
from infra.config import PlatformConfig, parse
from tests.unit.test_aws_node_pool import register

MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def minimal_stack(**extra: Any) -> PlatformConfig:
    """An existing cluster with one pool, one tenant and one model: only what the stack model requires."""
    raw: dict[str, Any] = {
        "target": {"provider": "existing", "kubeconfig": "~/.kube/config", "storageClass": "fast-nvme"},
        "nodePools": {"h100": {"instanceType": "dgx-h100"}}, "tenants": {"chat": {"gpuQuota": 8}},
        "observability": {"prices": {"dgx-h100": 30.0}},
        "models": {"llama": {"engine": "vllm", "model": MODEL, "tenant": "chat", "pool": "h100"}}}
    raw.update(extra)
    return parse(raw, stack="minimal")


def rendered(build: Any) -> dict[str, dict[str, Any]]:
    return {r.name: r.inputs for r in register(build) if r.custom and not r.type.startswith("pulumi:providers:")}


def test_model_deployment_from_required_args_renders_the_stack_models_defaults() -> None:
    res = rendered(lambda: ModelDeployment("llama", {
        "engine": "vllm", "model": MODEL, "tenant": "chat", "pool": {"name": "h100", "instance_type": "dgx-h100"},
        "storage_class": "fast-nvme"}))  # storage_class: required off AWS
    # replicas default one: no ScaledObject; no IRSA role (hf://); no node cache off AWS
    assert sorted(res) == ["llama-poddisruptionbudget", "llama-service", "llama-serviceaccount",
                           "llama-servicemonitor", "llama-statefulset"]
    dep = res["llama-statefulset"]
    assert dep["metadata"]["namespace"] == "chat"  # namespace: the tenant's name
    assert dep["spec"]["replicas"] == 1
    pod = dep["spec"]["template"]["spec"]
    assert "priorityClassName" not in pod  # the cluster's default priority (the component creates no class)
    engine = pod["containers"][0]
    assert engine["image"] == "vllm/vllm-openai:v0.33.0"
    assert engine["resources"]["limits"]["nvidia.com/gpu"] == "1"  # tensorParallel x pipelineParallel = 1
    command = engine["command"]
    assert command[:3] == ["vllm", "serve", MODEL]
    assert command[command.index("--served-model-name") + 1] == "llama"  # model_name: the component's name
    assert command[command.index("--tensor-parallel-size") + 1] == "1"
    assert "--enable-prefix-caching" in command and "--quantization" not in command  # prefix caching: true
    assert command[command.index("--otlp-traces-endpoint") + 1] == (  # monitoring_namespace: monitoring
        "http://otel-collector.monitoring.svc.cluster.local:4317")
    assert {"name": "OTEL_TRACES_SAMPLER_ARG", "value": "1.0"} in engine["env"]  # trace_sample_ratio: 1.0
    assert engine["startupProbe"]["failureThreshold"] * engine["startupProbe"]["periodSeconds"] == 1800
    cache = next(v for v in pod["volumes"] if v["name"] == "model-cache")["ephemeral"]["volumeClaimTemplate"]
    assert cache["spec"]["resources"]["requests"] == {"storage": "200Gi"}
    assert pod["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Equal", "value": "true",
                                   "effect": "NoSchedule"}]
    assert res["llama-poddisruptionbudget"]["spec"]["minAvailable"] == 1  # one replica: never evict the last

    # The stack model's defaults are the component's, but for the PriorityClass: the kit's program creates
    # aifactory-serving-interactive (ServingControllers) and names it; the component alone cannot assume it exists.
    cfg = minimal_stack()
    stack_args = model_deployment_args(cfg, cfg.models["llama"])
    assert stack_args.pop("priority_class_name") == "aifactory-serving-interactive"  # type: ignore[misc]
    assert rendered(lambda: ModelDeployment("llama", stack_args)) == res


def test_mesh_from_required_args_renders_the_stack_models_defaults() -> None:
    res = rendered(lambda: Mesh("istio", {"tenants": {"chat": {}}}))
    policies = {n: r["spec"] for n, r in res.items() if r.get("kind") == "AuthorizationPolicy"}
    assert sorted(policies) == ["istio-chat-allow-gateway", "istio-chat-allow-monitoring", "istio-chat-allow-nothing"]
    assert policies["istio-chat-allow-gateway"]["rules"][0]["from"] == [  # gateway_namespace: aifactory-gateway
        {"source": {"principals": ["cluster.local/ns/aifactory-gateway/sa/aifactory-gateway"]}}]
    assert policies["istio-chat-allow-monitoring"]["rules"][0]["from"] == [  # monitoring_namespace: monitoring
        {"source": {"principals": ["cluster.local/ns/monitoring/sa/prometheus"]}}]
    assert res["istio-tracing"]["spec"]["tracing"][0]["randomSamplingPercentage"] == 1  # trace_sampling_percent
    assert res["istio-ns"]["metadata"]["labels"]["pod-security.kubernetes.io/enforce-version"] == "v1.35"
    assert rendered(lambda: Mesh("istio", mesh_args(minimal_stack()))) == res


def test_tenancy_from_required_args_renders_the_stack_models_defaults() -> None:
    res = rendered(lambda: Tenancy("tenancy", {"tenants": {"chat": {"cpu_quota": "96", "memory_quota": "1024Gi"}}}))
    ns = res["tenancy-chat"]["metadata"]
    assert ns["name"] == "chat"  # namespace: the tenant's name
    assert ns["labels"]["pod-security.kubernetes.io/enforce-version"] == "v1.35"
    quota = next(r for r in res.values() if r.get("kind") == "ResourceQuota")["spec"]["hard"]
    assert quota["requests.nvidia.com/gpu"] == "0"  # gpu_quota: 0; no MIG quota
    assert not any(k.startswith("requests.nvidia.com/mig-") for k in quota)
    # The stack model derives cpu and memory quotas from its models; given those, the objects are the same.
    stack = tenancy_args(minimal_stack(models={}))
    chat = stack["tenants"]["chat"]
    chat["cpu_quota"], chat["memory_quota"], chat["gpu_quota"] = "96", "1024Gi", 0
    assert rendered(lambda: Tenancy("tenancy", stack)) == res


def test_fabric_from_required_args_is_nothing_and_the_stack_models_default_is_the_same() -> None:
    """No EFA pools and no InfiniBand: no device plugin, no network operator, no namespace of its own."""
    assert rendered(lambda: Fabric("fabric", {})) == {}
    assert rendered(lambda: Fabric("fabric", fabric_args(minimal_stack()))) == {}
