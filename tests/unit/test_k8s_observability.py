"""Observability backends' values: Prometheus selectors and retention, Grafana sidecar, Loki modes, Alloy,
Jaeger v2, the Collector release and its ServiceMonitor, and secure defaults in the values."""

from __future__ import annotations

import yaml

from components.k8s import observability as obs
from components.k8s.otel_config import collector_config
from tests.support.stacks import stack_config as stack_cfg


def test_prometheus_selects_everything_and_keeps_configured_retention() -> None:
    spec = obs.kube_prometheus_stack_values(stack_cfg("prod"))["prometheus"]["prometheusSpec"]
    assert {k: v for k, v in spec.items() if k.endswith("NilUsesHelmValues")} == {
        "ruleSelectorNilUsesHelmValues": False, "serviceMonitorSelectorNilUsesHelmValues": False,
        "podMonitorSelectorNilUsesHelmValues": False, "probeSelectorNilUsesHelmValues": False,
        "scrapeConfigSelectorNilUsesHelmValues": False}
    assert spec["retention"] == "30d"
    assert spec["securityContext"] == {"runAsNonRoot": True, "runAsUser": 1000, "runAsGroup": 1000,
                                       "seccompProfile": {"type": "RuntimeDefault"}, "fsGroup": 2000}
    assert spec["resources"] == {"requests": {"cpu": "1", "memory": "4Gi"}, "limits": {"cpu": "4", "memory": "16Gi"}}


def test_kube_state_metrics_exports_the_labels_cost_rules_join_on() -> None:
    ksm = obs.kube_prometheus_stack_values(stack_cfg("dev"))["kube-state-metrics"]
    assert ksm["metricLabelsAllowlist"] == ["nodes=[aifactory.io/pool]",
                                            "pods=[aifactory.io/model,aifactory.io/tenant]"]


def test_prometheus_joins_the_mesh_for_scrapes_only() -> None:
    values = obs.kube_prometheus_stack_values(stack_cfg("dev"))["prometheus"]
    assert values["serviceAccount"] == {"create": True, "name": "prometheus"}
    spec = values["prometheusSpec"]
    assert spec["podMetadata"]["labels"] == {"sidecar.istio.io/inject": "true"}
    assert spec["podMetadata"]["annotations"] == {
        "traffic.sidecar.istio.io/includeInboundPorts": "",
        "traffic.sidecar.istio.io/includeOutboundIPRanges": "",
        "proxy.istio.io/config": '{"proxyMetadata": {"OUTPUT_CERTS": "/etc/istio-output-certs"}}',
        "sidecar.istio.io/userVolumeMount": '[{"name": "istio-certs", "mountPath": "/etc/istio-output-certs"}]'}
    assert spec["volumeMounts"] == [{"name": "istio-certs", "mountPath": "/etc/prom-certs", "readOnly": True}]


def test_grafana_sidecar_watches_dashboard_label_in_all_namespaces() -> None:
    grafana = obs.kube_prometheus_stack_values(stack_cfg("dev"))["grafana"]
    assert grafana["sidecar"] == {"dashboards": {"enabled": True, "label": "grafana_dashboard", "labelValue": "1",
                                                 "searchNamespace": "ALL"}}
    assert [(d["uid"], d["url"]) for d in grafana["additionalDataSources"]] == [
        ("loki", "http://loki-gateway.monitoring.svc.cluster.local"),
        ("jaeger", "http://jaeger-query.monitoring.svc.cluster.local:16686")]


GP3 = {"persistence": {"storageClass": "aifactory-gp3"}}


def test_loki_single_binary_and_simple_scalable() -> None:
    single = obs.loki_values(stack_cfg("dev"))
    assert (single["deploymentMode"], single["singleBinary"]["replicas"], single["read"]["replicas"],
            single["minio"]) == ("SingleBinary", 1, 0, {"enabled": False, **GP3})
    # Every claim names the kit's class (EKS 1.30+ has no default class): loki 6.53.0 renders the singleBinary,
    # write and backend volumeClaimTemplates with persistence.storageClass, minio 5.4.0 its PVC likewise.
    assert [single[t].get("persistence") for t in ("singleBinary", "write", "backend")] == [GP3["persistence"]] * 3
    assert single["loki"]["storage"] == {"type": "filesystem"}
    assert single["loki"]["limits_config"] == {"retention_period": "72h", "allow_structured_metadata": True}
    scalable = obs.loki_values(stack_cfg("prod"))
    assert (scalable["deploymentMode"], scalable["singleBinary"]["replicas"],
            [scalable[t]["replicas"] for t in ("read", "write", "backend")], scalable["minio"]) == (
        "SimpleScalable", 0, [3, 3, 3], {"enabled": True, **GP3})
    assert scalable["loki"]["schemaConfig"]["configs"] == [{
        "from": "2024-04-01", "store": "tsdb", "object_store": "s3", "schema": "v13",
        "index": {"prefix": "loki_index_", "period": "24h"}}]
    assert scalable["loki"]["limits_config"]["retention_period"] == "720h"


def test_alloy_daemonset_ships_node_pod_logs_to_loki() -> None:
    values = obs.alloy_values(stack_cfg("dev"))
    assert values["controller"] == {"type": "daemonset", "tolerations": [{"operator": "Exists"}]}
    assert values["alloy"]["mounts"] == {"varlog": True}
    content = values["alloy"]["configMap"]["content"]
    assert 'url = "http://loki-gateway.monitoring.svc.cluster.local/loki/api/v1/push"' in content
    assert '"__meta_kubernetes_pod_label_aifactory_io_tenant"]\n    target_label  = "tenant"' in content
    assert 'replacement   = "/var/log/pods/*$1/*.log"' in content
    assert content.count("{") == content.count("}")


def test_jaeger_is_v2_all_in_one() -> None:
    values = obs.jaeger_values()
    assert (values["allInOne"]["enabled"], values["agent"], values["collector"], values["query"],
            values["provisionDataStore"], values["storage"]) == (
        True, {"enabled": False}, {"enabled": False}, {"enabled": False}, {"cassandra": False}, {"type": "memory"})


def test_collector_release_runs_the_kit_config_as_a_gateway() -> None:
    cfg = stack_cfg("staging")
    values = obs.collector_values(cfg)
    assert (values["mode"], values["replicaCount"], values["configMap"]) == (
        "deployment", 2, {"create": False, "existingName": "otel-collector-config"})
    assert values["ports"]["prometheus"] == {"enabled": True, "containerPort": 8889, "servicePort": 8889,
                                             "protocol": "TCP"}
    assert values["securityContext"] == {"allowPrivilegeEscalation": False, "privileged": False,
                                         "readOnlyRootFilesystem": True, "runAsNonRoot": True,
                                         "capabilities": {"drop": ["ALL"]},
                                         "seccompProfile": {"type": "RuntimeDefault"}}
    cm = obs.collector_configmap(cfg)
    assert (cm["metadata"]["name"], list(cm["data"])) == ("otel-collector-config", ["relay"])
    assert yaml.safe_load(cm["data"]["relay"]) == collector_config(cfg)
    assert obs.collector_service_monitor(cfg)["spec"] == {
        "selector": {"matchLabels": {"app.kubernetes.io/name": "opentelemetry-collector",
                                     "app.kubernetes.io/instance": "otel-collector"}},
        "endpoints": [{"port": "prometheus", "interval": "15s"}]}
