"""What the exporters really emit, written from their upstream sources at the kit's pinned versions.

Synthetic data for the NVLink, GPU capacity and Triton TensorRT-LLM token panels is built
from these records, never from telemetry/names.py: a wrong name, type, label or unit in the kit is then
wrong on one side only, and the known-answer tests catch it. Each record names the file it was read from.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ExporterMetric", "NVLINK_BANDWIDTH_TOTAL", "NVLINK_BYTES_PER_UNIT", "NODE_CAPACITY", "POD_PHASE",
           "POD_PHASES", "POD_READY", "CONTAINER_READY", "POD_DELETED", "ENVOY_RQ_ACTIVE", "RECONCILE_ERRORS",
           "LBC_CONTROLLERS", "TRTLLM_OUTPUT_TOKENS", "TRTLLM_INPUT_TOKENS", "TRTLLM_TOKEN_BUCKETS",
           "TRTLLM_OUTPUT_TOKENS_TYPE", "TRTLLM_INPUT_TOKENS_TYPE"]


@dataclass(frozen=True, slots=True)
class ExporterMetric:
    name: str
    type: str  # gauge | counter | histogram, as the value behaves (see `source` where the exporter says otherwise)
    labels: tuple[str, ...]  # labels the exporter itself sets (the scrape adds job, instance, pod...)
    source: str


# DCGM 4.4.2 (bundled in dcgm-exporter 4.4.2-4.7.0, the image gpu-operator v25.10.1 deploys:
# deployments/gpu-operator/values.yaml dcgmExporter.version). Field 449 is computed in
# dcgmlib/src/DcgmCacheManager.cpp ReadAndCacheNvLinkBandwidth(): NVML's cumulative NVLink RX + TX data
# counters (NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX/TX, "in KiB", sdk/nvidia/nvml/nvml.h) are differenced
# against the previous sample, divided by the seconds between them, then by 1000 ("KiB/sec -> MiB/sec"); the
# field's unit is DCGM_FIELD_UNIT_BW_MBPS (dcgmlib/src/dcgm_fields.cpp). So the value is the current
# throughput, up and down together, in units of 1000 KiB/s, and it rises and falls like any gauge.
# dcgm-exporter's etc/default-counters.csv (4.4.2-4.7.0) still declares it `counter`; the exporter copies
# that into `# TYPE`, which changes nothing about the value.
NVLINK_BANDWIDTH_TOTAL = ExporterMetric(
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "gauge",
    ("gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname", "DCGM_FI_DRIVER_VERSION"),
    "NVIDIA/DCGM v4.4.2 dcgmlib/src/DcgmCacheManager.cpp ReadAndCacheNvLinkBandwidth; "
    "NVIDIA/dcgm-exporter 4.4.2-4.7.0 etc/default-counters.csv")
NVLINK_BYTES_PER_UNIT = 1000 * 1024  # one unit of field 449: 1000 KiB/s

# kube-state-metrics: docs/metrics/cluster/node-metrics.md, kube_node_status_capacity (gauge; labels node,
# resource, unit). Extended resources are sanitised to Prometheus label values: nvidia.com/gpu ->
# nvidia_com_gpu, unit "integer".
NODE_CAPACITY = ExporterMetric("kube_node_status_capacity", "gauge", ("node", "resource", "unit"),
                               "kubernetes/kube-state-metrics docs/metrics/cluster/node-metrics.md")
# kube-state-metrics docs/metrics/workload/pod-metrics.md: one series per phase, 1 for the pod's current one.
POD_PHASE = ExporterMetric("kube_pod_status_phase", "gauge", ("namespace", "pod", "uid", "phase"),
                           "kubernetes/kube-state-metrics docs/metrics/workload/pod-metrics.md")
POD_PHASES = ("Pending", "Running", "Succeeded", "Failed", "Unknown")
# kube-state-metrics v2.18.0 (kube-prometheus-stack 82.4.0's kube-state-metrics chart 7.1.0, appVersion 2.18.0):
# docs/metrics/workload/pod-metrics.md and internal/store/pod.go. kube_pod_status_ready: one series per condition
# status (true, false, unknown), 1 for the pod's Ready condition's; kube_pod_container_status_ready: 1 while the
# container passes its readiness probe; kube_pod_deletion_timestamp: exported only once the pod has a deletion
# timestamp. No series carries a readiness gate's condition.
POD_READY = ExporterMetric("kube_pod_status_ready", "gauge", ("namespace", "pod", "uid", "condition"),
                           "kubernetes/kube-state-metrics@v2.18.0 internal/store/pod.go")
CONTAINER_READY = ExporterMetric("kube_pod_container_status_ready", "gauge", ("namespace", "pod", "uid", "container"),
                                 "kubernetes/kube-state-metrics@v2.18.0 internal/store/pod.go")
POD_DELETED = ExporterMetric("kube_pod_deletion_timestamp", "gauge", ("namespace", "pod", "uid"),
                             "kubernetes/kube-state-metrics@v2.18.0 internal/store/pod.go")
# Envoy v1.40.0: every HTTP connection manager keeps the gauge `http.<stat_prefix>.downstream_rq_active` (requests in
# flight: source/common/http/conn_manager_config.h ALL_HTTP_CONN_MAN_STATS); its Prometheus output moves the stat
# prefix into a tag (source/common/config/well_known_names.cc, HTTP_CONN_MANAGER_PREFIX: the real Envoy's scrape in
# tests/artifacts/test_upstream_metric_names.py), and Prometheus adds the scraped pod's namespace, pod and job.
ENVOY_RQ_ACTIVE = ExporterMetric("envoy_http_downstream_rq_active", "gauge", ("envoy_http_conn_manager_prefix",),
                                 "envoyproxy/envoy@v1.40.0 source/common/http/conn_manager_config.h")
# The AWS Load Balancer Controller v3.5.0 (go.mod: controller-runtime v0.24.1) serves controller-runtime's metrics
# registry on :8080 (pkg/config/runtime_config.go defaultMetricsAddr); each controller counts the reconciles that
# returned an error under the name it was built with (Named(controllerName): controllers/service/
# service_controller.go "service", controllers/elbv2/targetgroupbinding_controller.go "targetGroupBinding").
RECONCILE_ERRORS = ExporterMetric("controller_runtime_reconcile_errors_total", "counter", ("controller",),
                                  "kubernetes-sigs/controller-runtime@v0.24.1 pkg/internal/controller/metrics/"
                                  "metrics.go")
LBC_CONTROLLERS = ("service", "targetGroupBinding")

# TensorRT-LLM's Triton backend, triton_backend/inflight_batcher_llm/src/custom_metrics_reporter/
# custom_metrics_reporter.cc (NVIDIA/TensorRT-LLM, read at a stored main-branch version; the token counts came
# with "Add support for input output token counts", NVIDIA/TensorRT-LLM#5445, merged June 2025, before the 1.0
# release that tensorrtllm_backend v1.0.0 pins): histograms created with TRITONSERVER_METRIC_KIND_HISTOGRAM and
# buckets {10, 50, 100, 500, 1000}, labels model and version (the repository model: tensorrt_llm) plus
# response_metric_type. Each observation is the tokens of one response (#5445: in streaming, each response's
# tokens), so _sum counts every token.
TRTLLM_OUTPUT_TOKENS = ExporterMetric(
    "nv_llm_output_token_len", "histogram", ("model", "version", "response_metric_type"),
    "NVIDIA/TensorRT-LLM triton_backend/inflight_batcher_llm/src/custom_metrics_reporter/custom_metrics_reporter.cc")
TRTLLM_INPUT_TOKENS = ExporterMetric(
    "nv_llm_input_token_len", "histogram", ("model", "version", "response_metric_type"),
    TRTLLM_OUTPUT_TOKENS.source)
TRTLLM_TOKEN_BUCKETS = (10.0, 50.0, 100.0, 500.0, 1000.0)
TRTLLM_OUTPUT_TOKENS_TYPE = "total_output_tokens"  # response_metric_type of nv_llm_output_token_len
TRTLLM_INPUT_TOKENS_TYPE = "total_input_tokens"
