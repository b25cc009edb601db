"""What preflight and the pack report on the shipped stacks today: defects of issue #12 (items 1-6) that the
components still have on this branch and that branch i12a fixes. After merging those fixes both mappings are
empty: every shipped stack synthesizes, passes `policy check` and `preflight` clean.

(rule, resource) per stack, and (policy, resource name) per stack.
"""

from __future__ import annotations

__all__ = ["TODAY", "TODAY_POLICY", "synth_exit_code"]

TODAY: dict[str, list[tuple[str, str]]] = {
    "dev": [
        ("api-endpoint-reachable", "aifactory-dev-eks"),
        ("await-timeout", "Deployment/demo/chat"),
        ("release-bring-up-order", "HelmRelease/aifactory-system/keda"),
        ("release-bring-up-order", "HelmRelease/gpu-operator/gpu-operator"),
        ("release-bring-up-order", "HelmRelease/istio-system/istio-cni"),
        ("release-bring-up-order", "HelmRelease/istio-system/istiod"),
        ("release-bring-up-order", "HelmRelease/monitoring/alloy"),
        ("release-bring-up-order", "HelmRelease/monitoring/jaeger"),
        ("release-bring-up-order", "HelmRelease/monitoring/kube-prometheus-stack"),
        ("release-bring-up-order", "HelmRelease/monitoring/loki"),
        ("release-bring-up-order", "HelmRelease/monitoring/otel-collector"),
        ("storage-class", "HelmRelease/monitoring/loki"),
    ],
    "onprem": [
        ("await-timeout", "Deployment/analytics-ai/classifier"),
        ("await-timeout", "Deployment/ml-platform/llama-70b"),
        ("quota-admission", "Deployment/analytics-ai/classifier"),
        ("quota-admission", "Deployment/ml-platform/llama-70b"),
        ("quota-admission", "LeaderWorkerSet/ml-platform/llama-405b-lws (spec.leaderWorkerTemplate.leaderTemplate)"),
        ("quota-admission", "LeaderWorkerSet/ml-platform/llama-405b-lws (spec.leaderWorkerTemplate.workerTemplate)"),
        ("schedulable", "Deployment/analytics-ai/classifier"),
        ("storage-class", "Deployment/analytics-ai/classifier"),
        ("storage-class", "Deployment/ml-platform/llama-70b"),
        ("storage-class", "HelmRelease/monitoring/loki"),
        ("storage-class", "LeaderWorkerSet/ml-platform/llama-405b-lws"),
    ],
    "prod": [
        ("api-endpoint-reachable", "aifactory-prod-eks"),
        ("await-timeout", "Deployment/assistant/assistant-batch"),
        ("await-timeout", "Deployment/assistant/assistant-fast"),
        ("await-timeout", "Deployment/finance/finance-8b"),
        ("await-timeout", "Deployment/search/embed-rerank"),
        ("quota-admission", "Deployment/assistant/assistant-batch"),
        ("quota-admission", "Deployment/assistant/assistant-fast"),
        ("quota-admission", "LeaderWorkerSet/research/deep-research-lws (spec.leaderWorkerTemplate.leaderTemplate)"),
        ("quota-admission", "LeaderWorkerSet/research/deep-research-lws (spec.leaderWorkerTemplate.workerTemplate)"),
        ("quota-admission", "ResourceQuota/search/tenant-quota"),
        ("release-bring-up-order", "HelmRelease/aifactory-system/aws-efa-k8s-device-plugin"),
        ("release-bring-up-order", "HelmRelease/aifactory-system/keda"),
        ("release-bring-up-order", "HelmRelease/aifactory-system/lws"),
        ("release-bring-up-order", "HelmRelease/gpu-operator/gpu-operator"),
        ("release-bring-up-order", "HelmRelease/istio-system/istio-cni"),
        ("release-bring-up-order", "HelmRelease/istio-system/istiod"),
        ("release-bring-up-order", "HelmRelease/monitoring/alloy"),
        ("release-bring-up-order", "HelmRelease/monitoring/jaeger"),
        ("release-bring-up-order", "HelmRelease/monitoring/kube-prometheus-stack"),
        ("release-bring-up-order", "HelmRelease/monitoring/loki"),
        ("release-bring-up-order", "HelmRelease/monitoring/otel-collector"),
        ("storage-class", "HelmRelease/monitoring/loki"),
    ],
    "staging": [
        ("await-timeout", "Deployment/search/llama-70b"),
        ("await-timeout", "Deployment/support/llama-8b-trt"),
        ("quota-admission", "Deployment/search/llama-70b"),
        ("quota-admission", "ResourceQuota/support/tenant-quota"),
        ("release-bring-up-order", "HelmRelease/aifactory-system/aws-efa-k8s-device-plugin"),
        ("release-bring-up-order", "HelmRelease/aifactory-system/keda"),
        ("release-bring-up-order", "HelmRelease/gpu-operator/gpu-operator"),
        ("release-bring-up-order", "HelmRelease/istio-system/istio-cni"),
        ("release-bring-up-order", "HelmRelease/istio-system/istiod"),
        ("release-bring-up-order", "HelmRelease/monitoring/alloy"),
        ("release-bring-up-order", "HelmRelease/monitoring/jaeger"),
        ("release-bring-up-order", "HelmRelease/monitoring/kube-prometheus-stack"),
        ("release-bring-up-order", "HelmRelease/monitoring/loki"),
        ("release-bring-up-order", "HelmRelease/monitoring/otel-collector"),
        ("storage-class", "HelmRelease/monitoring/loki"),
    ],
}

TODAY_POLICY: dict[str, list[tuple[str, str]]] = {
    "dev": [
        ("await-covers-startup", "model-chat-deployment"),
    ],
    "onprem": [
        ("await-covers-startup", "model-classifier-deployment"),
        ("await-covers-startup", "model-llama-70b-deployment"),
        ("quota-admits-pods", "model-classifier-deployment"),
        ("quota-admits-pods", "model-llama-405b-leaderworkerset"),
        ("quota-admits-pods", "model-llama-70b-deployment"),
    ],
    "prod": [
        ("await-covers-startup", "model-assistant-batch-deployment"),
        ("await-covers-startup", "model-assistant-fast-deployment"),
        ("await-covers-startup", "model-embed-rerank-deployment"),
        ("await-covers-startup", "model-finance-8b-deployment"),
        ("quota-admits-pods", "model-assistant-batch-deployment"),
        ("quota-admits-pods", "model-assistant-fast-deployment"),
        ("quota-admits-pods", "model-deep-research-leaderworkerset"),
        ("quota-admits-pods", "platform-tenancy-search-resourcequota-tenant-quota"),
    ],
    "staging": [
        ("await-covers-startup", "model-llama-70b-deployment"),
        ("await-covers-startup", "model-llama-8b-trt-deployment"),
        ("quota-admits-pods", "model-llama-70b-deployment"),
        ("quota-admits-pods", "platform-tenancy-support-resourcequota-tenant-quota"),
    ],
}


def synth_exit_code(stack: str) -> int:
    """`aifactory synth` exits 1 on mandatory policy violations."""
    return 1 if TODAY_POLICY[stack] else 0
