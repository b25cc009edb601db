"""The kit's shared vocabulary: node label and taint keys, and the one YAML rendering every layer uses.

Every layer may import this module (infra/, components/, dashboards/, policies/, telemetry/): it imports
nothing of the kit, and nothing heavier than PyYAML, at import time. It lives in components/ because that
package's `__init__` imports nothing, so `import components.vocabulary` loads this file alone. Metric and
label names of telemetry live beside it in telemetry/names.py (also import-free of the kit and the SDK).
"""

from __future__ import annotations

from typing import Any

import yaml

__all__ = ["POOL_LABEL", "GPU_TAINT_KEY", "SYSTEM_NAMESPACES", "LOKI_INDEX_TABLE_PREFIX", "AUTOSCALED_TAG",
           "AUTOSCALER_CHART", "MAX_GRACEFUL_TERMINATION_FLAG", "DEFAULT_MAX_GRACEFUL_TERMINATION_SECONDS",
           "SYSTEM_POOL", "NLB_CLASS", "NLB_TARGET_TYPE", "NLB_TARGET_GROUP_ATTRIBUTES", "DEREGISTRATION_DELAY",
           "READINESS_GATE_INJECT", "dump_yaml"]

POOL_LABEL = "aifactory.io/pool"  # every node of a pool carries it (AWS: set by the kit; on-prem: by admins)
# The AWS stacks' pool for the platform's own pods (components.aws.cluster), where the AWS Load Balancer Controller
# runs (components.k8s.load_balancer).
SYSTEM_POOL = "system"
# What the AWS Load Balancer Controller reads (kubernetes-sigs/aws-load-balancer-controller@v3.5.0,
# docs/guide/service/nlb.md, annotations.md, docs/deploy/pod_readiness_gate.md): the loadBalancerClass it reconciles,
# the Service annotations of its NLB's target type and target group attributes, the attribute of the deregistration
# delay, and the namespace (and, through the kit's webhook selector, pod) label that makes it inject readiness gates.
# The gateway sets them (components.k8s.gateway.component), the controller's values name the label
# (components.k8s.load_balancer), preflight's nlb-targets-stable-nodes reads them (policies.preflight.lb_targets).
NLB_CLASS = "service.k8s.aws/nlb"
NLB_TARGET_TYPE = "service.beta.kubernetes.io/aws-load-balancer-nlb-target-type"
NLB_TARGET_GROUP_ATTRIBUTES = "service.beta.kubernetes.io/aws-load-balancer-target-group-attributes"
DEREGISTRATION_DELAY = "deregistration_delay.timeout_seconds"
READINESS_GATE_INJECT = "elbv2.k8s.aws/pod-readiness-gate-inject"
GPU_TAINT_KEY = "nvidia.com/gpu"  # the taint that keeps pods without a GPU toleration off GPU nodes
# Namespaces of Kubernetes itself and of the kit's platform (default names): no tenant may take one (stack
# config), and the policy pack treats workloads in them as the platform's, not a tenant's.
SYSTEM_NAMESPACES = frozenset(
    {"default", "kube-system", "kube-public", "kube-node-lease", "istio-system", "monitoring",
     "gpu-operator", "nvidia-network-operator", "aifactory-gateway", "aifactory-system"}
)

# Loki's schemaConfig index prefix: Loki writes its index under it (components.k8s.observability.loki), and the log
# bucket's lifecycle rules expire objects under it (components.aws.log_store).
LOKI_INDEX_TABLE_PREFIX = "loki_index_"
# The Auto Scaling group tag of the node pools the cluster autoscaler may size: the AWS pools carry it
# (components.aws.nodes), the autoscaler discovers groups by it (components.k8s.autoscaler).
AUTOSCALED_TAG = "aifactory.io/autoscaled"
# The cluster autoscaler's chart, and its flag for the longest grace it gives a pod it evicts at scale-down, with the
# app's own default (cluster-autoscaler 1.34.1, the app of chart 9.52.1: config/flags/flags.go, 10*60): the kit's
# release sets it (components.k8s.autoscaler), preflight's scale-down-drains rule reads it (policies.preflight.drain).
AUTOSCALER_CHART = "cluster-autoscaler"
MAX_GRACEFUL_TERMINATION_FLAG = "max-graceful-termination-sec"
DEFAULT_MAX_GRACEFUL_TERMINATION_SECONDS = 600


# libyaml's emitter when PyYAML has it (the wheels do): a large fleet's Envoy bootstrap and manifests are the
# slowest thing synth renders with the pure-Python emitter. Representers stay Python, so the style below holds.
class _Dumper(getattr(yaml, "CSafeDumper", yaml.SafeDumper)):  # type: ignore[misc]
    pass


def _str_presenter(dumper: yaml.SafeDumper, data: str) -> yaml.Node:
    # Multi-line strings (embedded configs, CSVs, scripts) as literal blocks: readable and diffable.
    if "\n" in data:
        return dumper.represent_scalar("tag:yaml.org,2002:str", data, style="|")
    return dumper.represent_scalar("tag:yaml.org,2002:str", data)


_Dumper.add_representer(str, _str_presenter)


def dump_yaml(data: Any, *, multi: bool = False) -> str:
    """Deterministic YAML: key order kept as built, literal blocks for multi-line strings."""
    if multi:
        return yaml.dump_all(data, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=120)
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=120)
