"""Observability backends' values: Prometheus selectors, retention and volumes, Alertmanager routing, Grafana
sidecar, Loki on S3 (AWS) or one volume, Alloy positions, Jaeger v2 on Badger, the Collector release, its
rollouts and ServiceMonitor, control-plane targets per cluster kind, and secure defaults in the values."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest
import yaml

from components.k8s import mesh, versions
from components.k8s import observability as obs
from components.k8s.otel_config import collector_config
from components.k8s.storage import cache_storage_class_name
from infra.config import ConfigError
from infra.synth import read_stack_config, run_program, stack_file
from tests.support.stacks import stack_config as stack_cfg
from tests.support.stacks import stack_raw


def with_obs(stack: str, **observability: Any) -> Any:
    """A shipped stack's config with keys of its `observability` section replaced."""
    raw = stack_raw(stack)
    return stack_cfg(stack, observability={**raw.get("observability", {}), **observability})


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
    # folderAnnotation: without it the sidecar gets no FOLDER_ANNOTATION env and every dashboard lands in General;
    # foldersFromFilesStructure: the provider makes folders of the sidecar's subdirectories (grafana chart 11.2.0,
    # templates/_pod.tpl FOLDER_ANNOTATION; values.yaml sidecar.dashboards.provider, default false)
    assert grafana["sidecar"] == {"dashboards": {"enabled": True, "label": "grafana_dashboard", "labelValue": "1",
                                                 "searchNamespace": "ALL", "folderAnnotation": "grafana_folder",
                                                 "provider": {"foldersFromFilesStructure": True}}}
    assert [(d["uid"], d["url"]) for d in grafana["additionalDataSources"]] == [
        ("loki", "http://loki-gateway.monitoring.svc.cluster.local"),
        ("jaeger", "http://jaeger.monitoring.svc.cluster.local:16686")]


def grafana_provisioned(value: str) -> str:
    """A jsonData string as Grafana reads it from a provisioning file: split on `$$`, each part through os.ExpandEnv,
    joined with `$` (grafana/grafana pkg/services/provisioning/values/values.go interpolateValue). The kit writes no
    environment variable: a part with a `$` left would be expanded (to nothing, the variable being unset)."""
    parts = value.split("$$")
    assert not any("$" in part for part in parts), value
    return "$".join(parts)


def test_loki_and_jaeger_datasources_link_a_trace_id_both_ways() -> None:
    """Loki -> Jaeger: a derived field on the gateway access log's trace_id whose internal link queries the Jaeger
    datasource with the matched id; Jaeger -> Loki: tracesToLogsV2 with a custom query for the gateway's lines that
    carry the trace id (Grafana 12.4.0, the grafana chart 11.2.0 of kube-prometheus-stack 82.4.0, whose
    templates/grafana/configmaps-datasources.yaml writes additionalDataSources into the provisioned datasource.yaml)."""
    [loki, jaeger] = obs.kube_prometheus_stack_values(stack_cfg("prod"))["grafana"]["additionalDataSources"]
    assert loki["jsonData"] == {"derivedFields": [{
        "name": "TraceID", "matcherType": "regex", "matcherRegex": '"trace_id":"([0-9a-f]{32})"',
        "datasourceUid": "jaeger", "url": "$${__value.raw}", "urlDisplayLabel": "Trace"}]}
    assert jaeger["jsonData"] == {"tracesToLogsV2": {
        "datasourceUid": "loki", "customQuery": True,
        "query": '{namespace="aifactory-gateway"} |= "$${__trace.traceId}"',
        "spanStartTimeShift": "-1m", "spanEndTimeShift": "1m"}}
    assert (loki["uid"], jaeger["uid"]) == ("loki", "jaeger")
    # what Grafana reads: Grafana's own variables, untouched by its environment expansion
    assert grafana_provisioned(loki["jsonData"]["derivedFields"][0]["url"]) == "${__value.raw}"
    assert grafana_provisioned(jaeger["jsonData"]["tracesToLogsV2"]["query"]) == \
        '{namespace="aifactory-gateway"} |= "${__trace.traceId}"'
    # the chart passes the list through `tpl`: nothing in it may read as a Go template action
    assert "{{" not in json.dumps([loki, jaeger])


def test_alloy_daemonset_ships_node_pod_logs_to_loki() -> None:
    values = obs.alloy_values(stack_cfg("dev"))
    assert (values["controller"]["type"], values["controller"]["tolerations"]) == (
        "daemonset", [{"operator": "Exists"}])
    assert values["alloy"]["mounts"]["varlog"] is True
    content = values["alloy"]["configMap"]["content"]
    assert 'url = "http://loki-gateway.monitoring.svc.cluster.local/loki/api/v1/push"' in content
    assert '"__meta_kubernetes_pod_label_aifactory_io_tenant"]\n    target_label  = "tenant"' in content
    assert 'replacement   = "/var/log/pods/*$1/*.log"' in content
    assert content.count("{") == content.count("}")


def test_collector_release_runs_the_kit_config_as_a_gateway() -> None:
    cfg = stack_cfg("staging")
    values = obs.collector_values(cfg)
    assert (values["mode"], values["replicaCount"], values["configMap"]) == (
        "deployment", 2, {"create": False, "existingName": "otel-collector-config"})
    assert values["ports"]["prometheus"] == {"enabled": True, "containerPort": 8889, "servicePort": 8889,
                                             "protocol": "TCP"}
    # the Collector's own telemetry reader listens on 8888; the chart's Service omits it unless enabled
    # (opentelemetry-collector 0.143.0 values.yaml ports.metrics.enabled: false)
    assert values["ports"]["metrics"] == {"enabled": True, "containerPort": 8888, "servicePort": 8888,
                                          "protocol": "TCP"}
    assert collector_config(cfg)["service"]["telemetry"]["metrics"]["readers"][0]["pull"]["exporter"][
        "prometheus"]["port"] == 8888
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
        "endpoints": [{"port": "prometheus", "interval": "15s"}, {"port": "metrics", "interval": "30s"}]}


# --- 1. Jaeger ---------------------------------------------------------------------------------


def test_jaeger_pin_receives_otlp_on_every_interface_and_keeps_traces_on_badger() -> None:
    """jaeger chart 4.0.0 deployed jaegertracing/jaeger:2.0.0-rc2 (its Chart.yaml appVersion), whose built-in
    config (cmd/jaeger/internal/all-in-one.yaml at v2.0.0-rc2) declares `otlp: protocols: grpc:, http:` with no
    endpoint, which the collector core binds to localhost: the Collector's exports were refused. Chart 4.11.1
    deploys 2.19.0 and passes the kit's config as `--config` (`userconfig`, templates/jaeger/jaeger-deploy.yaml);
    that config names 0.0.0.0 for every listener and Badger (internal/storage/v1/badger/config.go: directories,
    ephemeral, ttl.spans) on the mounted volume."""
    assert (versions.JAEGER.chart, versions.JAEGER.version) == ("jaeger", "4.11.1")
    cfg = stack_cfg("prod")
    values = obs.jaeger_values(cfg)
    assert "allInOne" not in values and "storage" not in values  # 4.0.0's keys; 4.11.1 reads `jaeger`
    conf = values["userconfig"]
    assert conf["receivers"] == {"otlp": {"protocols": {"grpc": {"endpoint": "0.0.0.0:4317"},
                                                        "http": {"endpoint": "0.0.0.0:4318"}}}}
    assert conf["extensions"]["healthcheckv2"] == {"use_v2": True, "http": {"endpoint": "0.0.0.0:13133"}}
    assert conf["extensions"]["jaeger_query"]["http"] == {"endpoint": "0.0.0.0:16686"}
    assert conf["extensions"]["jaeger_storage"] == {"backends": {"badger_main": {"badger": {
        "directories": {"keys": "/badger/keys", "values": "/badger/values"}, "ephemeral": False,
        "ttl": {"spans": "168h"}}}}}
    assert conf["service"]["pipelines"] == {"traces": {"receivers": ["otlp"], "processors": ["batch"],
                                                       "exporters": ["jaeger_storage_exporter"]}}
    assert conf["exporters"] == {"jaeger_storage_exporter": {"trace_storage": "badger_main"}}
    pod = values["jaeger"]
    assert pod["replicas"] == 1
    assert pod["extraVolumes"] == [{"name": "badger", "persistentVolumeClaim": {"claimName": "jaeger-badger"}}]
    assert pod["extraVolumeMounts"] == [{"name": "badger", "mountPath": "/badger"}]
    assert pod["podSecurityContext"]["fsGroup"] == 10001  # the image's user writes the volume
    # prod: 2000 spans/s x 0.2 kept x 86,400 s x 7 d x 1,024 B = 247.7 GB, x 1.3 headroom = 300 GiB
    assert obs.jaeger_volume_claim(cfg)["spec"] == {
        "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "300Gi"}},
        "storageClassName": "aifactory-gp3"}
    assert obs.jaeger_volume_claim(cfg)["metadata"]["annotations"] == {"pulumi.com/skipAwait": "true"}


def test_trace_retention_is_badgers_ttl() -> None:
    cfg = with_obs("dev", traceRetention="3d")
    assert obs.jaeger_config(cfg)["extensions"]["jaeger_storage"]["backends"]["badger_main"]["badger"]["ttl"] == {
        "spans": "72h"}


def test_collector_and_grafana_reach_jaegers_one_service() -> None:
    """4.x charts after 4.0 serve OTLP (4317) and the UI (16686) from one Service named after fullnameOverride
    (jaeger chart 4.11.1 templates/jaeger/jaeger-service.yaml)."""
    cfg = stack_cfg("dev")
    assert collector_config(cfg)["exporters"]["otlp/jaeger"]["endpoint"] == \
        "jaeger.monitoring.svc.cluster.local:4317"
    urls = {d["uid"]: d["url"] for d in obs.kube_prometheus_stack_values(cfg)["grafana"]["additionalDataSources"]}
    assert urls["jaeger"] == "http://jaeger.monitoring.svc.cluster.local:16686"


# --- 2. Loki ----------------------------------------------------------------------------------

BUCKET = obs.LokiBucket(bucket="aifactory-prod-logs-bucket-1", region="us-east-1",
                        role_arn="arn:aws:iam::123456789012:role/loki")


def test_loki_on_aws_stores_in_the_kits_bucket_through_irsa() -> None:
    values = obs.loki_values(stack_cfg("prod"), BUCKET)
    assert values["deploymentMode"] == "SimpleScalable"
    assert values["minio"] == {"enabled": False}
    assert values["loki"]["storage"] == {
        "type": "s3", "s3": {"region": "us-east-1"},
        "bucketNames": {"chunks": BUCKET.bucket, "ruler": BUCKET.bucket, "admin": BUCKET.bucket}}
    assert values["serviceAccount"] == {"create": True, "name": "loki", "annotations": {
        "eks.amazonaws.com/role-arn": "arn:aws:iam::123456789012:role/loki"}}
    assert values["loki"]["schemaConfig"]["configs"] == [{
        "from": "2024-04-01", "store": "tsdb", "object_store": "s3", "schema": "v13",
        "index": {"prefix": "loki_index_", "period": "24h"}}]
    assert values["loki"]["limits_config"]["retention_period"] == "720h"
    assert [values[t]["replicas"] for t in ("read", "write", "backend")] == [3, 3, 3]
    assert values["write"]["persistence"] == {"size": "10Gi", "storageClass": "aifactory-gp3", **RETAIN_CLAIMS}
    assert values["loki"]["commonConfig"] == {"replication_factor": 3}


def test_loki_single_binary_on_aws_also_uses_the_bucket() -> None:
    values = obs.loki_values(stack_cfg("dev"), BUCKET)
    assert (values["deploymentMode"], values["singleBinary"]["replicas"], values["read"]["replicas"]) == (
        "SingleBinary", 1, 0)
    assert values["loki"]["storage"]["type"] == "s3"
    assert values["loki"]["limits_config"] == {"retention_period": "72h", "allow_structured_metadata": True}


def test_loki_on_an_existing_cluster_is_one_binary_on_a_volume_sized_from_ingest() -> None:
    cfg = stack_cfg("onprem")
    values = obs.loki_values(cfg)
    assert (values["deploymentMode"], values["singleBinary"]["replicas"], values["minio"]) == (
        "SingleBinary", 1, {"enabled": False})
    assert values["loki"]["storage"] == {"type": "filesystem"}
    assert values["loki"]["commonConfig"] == {"replication_factor": 1}
    assert "annotations" not in values["serviceAccount"]
    # 20 GiB/day / 5 (compression) x 15 d = 60 GiB, x 1.3 = 78 GiB
    assert values["singleBinary"]["persistence"]["size"] == "78Gi"
    assert values["singleBinary"]["persistence"].get("storageClass") == cache_storage_class_name(cfg)


RETAIN_CLAIMS = {"enableStatefulSetAutoDeletePVC": False}


@pytest.mark.parametrize("stack", ["onprem", "prod"])
def test_loki_keeps_its_claims_when_its_statefulsets_go(stack: str) -> None:
    """The loki 6.53.0 chart defaults `enableStatefulSetAutoDeletePVC: true` with `whenDeleted: Delete` and
    `whenScaled: Delete` for singleBinary, write and backend (production/helm/loki/values.yaml at tag
    helm-loki-6.53.0), and its StatefulSet templates render `persistentVolumeClaimRetentionPolicy` from them
    when the flag is on: deleting or scaling down one binary in filesystem mode would delete every log. With the
    flag off no policy is rendered (Kubernetes then retains claims); whenDeleted/whenScaled would be dead keys
    (templates/write/statefulset-write.yaml hard-codes Delete when the flag is on)."""
    values = obs.loki_values(stack_cfg(stack), None if stack == "onprem" else BUCKET)
    for target in ("singleBinary", "write", "backend"):
        persistence = values[target]["persistence"]
        assert {k: persistence[k] for k in RETAIN_CLAIMS} == RETAIN_CLAIMS, target


def test_pinned_volume_sizes_stop_following_retention_and_retention_size_follows_the_pin() -> None:
    """A StatefulSet's volumeClaimTemplates cannot be updated, and prometheus-operator does not resize an
    existing claim when storageSpec changes (prometheus-operator docs, "Resizing volumes"): with the sizes
    pinned, doubling the retention changes neither template, and retentionSize stays 85% of the disk that
    exists (126 GiB -> 107 GB), not of the 252 GiB a 60d retention would ask for."""
    pins = {"prometheusGiB": 126, "lokiGiB": 78, "jaegerGiB": 40}
    prod = with_obs("prod", retention="60d", traceRetention="14d", volumes=pins)
    spec = obs.kube_prometheus_stack_values(prod)["prometheus"]["prometheusSpec"]
    assert spec["storageSpec"]["volumeClaimTemplate"]["spec"]["resources"] == {"requests": {"storage": "126Gi"}}
    assert spec["retentionSize"] == "107GB"
    assert obs.jaeger_volume_claim(prod)["spec"]["resources"] == {"requests": {"storage": "40Gi"}}
    onprem = with_obs("onprem", retention="30d", volumes=pins)
    assert obs.loki_values(onprem)["singleBinary"]["persistence"]["size"] == "78Gi"
    # unpinned, the template follows the retention: 20,000 x 86,400 x 60 d x 2 B x 1.3 = 251 GiB -> 252 GiB
    unpinned = obs.kube_prometheus_stack_values(with_obs("prod", retention="60d"))["prometheus"]["prometheusSpec"]
    assert unpinned["storageSpec"]["volumeClaimTemplate"]["spec"]["resources"] == {"requests": {"storage": "252Gi"}}


def test_a_pinned_volume_size_must_be_a_whole_number_of_gib() -> None:
    with pytest.raises(ConfigError) as err:
        with_obs("prod", volumes={"prometheusGiB": 0, "lokiGb": 5})
    assert [str(p) for p in err.value.problems] == [
        "observability.volumes.lokiGb: unknown key (did you mean 'lokiGiB'?); allowed keys: prometheusGiB, lokiGiB, "
        "jaegerGiB",
        "observability.volumes.prometheusGiB: 0 is below the minimum 1"]


def test_simple_scalable_loki_needs_the_aws_bucket() -> None:
    with pytest.raises(ConfigError) as err:
        with_obs("onprem", lokiMode="simple-scalable")
    assert [str(p) for p in err.value.problems] == [
        "observability.lokiMode: 'simple-scalable' needs object storage, which the kit creates on provider aws "
        "only; use 'single-binary' (one replica on its volume) on provider existing"]


@pytest.fixture(scope="module")
def prod_resources() -> list:
    return run_program("prod", read_stack_config(stack_file("prod"))).resources


def _one(resources: list, typ: str) -> Any:
    (found,) = [r for r in resources if r.type == typ]
    return found


def test_log_bucket_is_private_encrypted_tls_only_and_expires_after_retention(prod_resources: list) -> None:
    bucket = _one(prod_resources, "aws:s3/bucket:Bucket")
    name, arn = bucket.outputs["bucket"], bucket.outputs["arn"]
    pab = _one(prod_resources, "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock")
    assert {k: pab.inputs[k] for k in ("bucket", "blockPublicAcls", "blockPublicPolicy", "ignorePublicAcls",
                                       "restrictPublicBuckets")} == {
        "bucket": name, "blockPublicAcls": True, "blockPublicPolicy": True, "ignorePublicAcls": True,
        "restrictPublicBuckets": True}
    sse = _one(prod_resources, "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration")
    assert sse.inputs["rules"] == [{"applyServerSideEncryptionByDefault": {"sseAlgorithm": "AES256"}}]
    policy = json.loads(_one(prod_resources, "aws:s3/bucketPolicy:BucketPolicy").inputs["policy"])
    assert policy["Statement"] == [{"Sid": "DenyInsecureTransport", "Effect": "Deny", "Principal": "*",
                                    "Action": "s3:*", "Resource": [arn, f"{arn}/*"],
                                    "Condition": {"Bool": {"aws:SecureTransport": "false"}}}]
    lifecycle = _one(prod_resources, "aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration")
    # Only Loki's chunks (tenant `fake` with auth_enabled false: grafana/loki v3.6.x pkg/util/fakeauth; chunk keys
    # `<tenant>/<fingerprint>/...`, pkg/storage/config/schema_config.go newerExternalKey) and its TSDB index tables
    # (`index/loki_index_<period>/`) expire, 31 days = retention 30d + one day of grace. The ruler's `rules/`
    # (pkg/ruler/rulestore/bucketclient, rulesPrefix) and the compactor's `index/delete_requests/`
    # (compactor.delete-request-store.key-prefix default "index/") match neither prefix.
    assert lifecycle.inputs["rules"] == [
        {"id": "expire-chunks", "status": "Enabled", "filter": {"prefix": "fake/"}, "expiration": {"days": 31}},
        {"id": "expire-index", "status": "Enabled", "filter": {"prefix": "index/loki_index_"},
         "expiration": {"days": 31}},
        # the bucket is versioned (issue 45): overwritten or deleted objects' old versions go after 7 days, and
        # a delete marker left with no versions behind it goes too; current objects are untouched
        {"id": "expire-noncurrent-versions", "status": "Enabled", "filter": {},
         "noncurrentVersionExpiration": {"noncurrentDays": 7}, "expiration": {"expiredObjectDeleteMarker": True}},
        {"id": "abort-incomplete-uploads", "status": "Enabled", "filter": {},
         "abortIncompleteMultipartUpload": {"daysAfterInitiation": 1}}]
    kept = ("rules/fake/aifactory/cost.yaml", "index/delete_requests/delete_requests.gz")
    expiring = [r["filter"]["prefix"] for r in lifecycle.inputs["rules"] if "days" in r.get("expiration", {})]
    assert not [key for key in kept if any(key.startswith(p) for p in expiring)]


def test_loki_irsa_role_trusts_lokis_service_account_and_reaches_only_its_bucket(prod_resources: list) -> None:
    arn = _one(prod_resources, "aws:s3/bucket:Bucket").outputs["arn"]
    (role,) = [r for r in prod_resources if r.type == "aws:iam/role:Role" and r.name == "aifactory-prod-logs-irsa"]
    trust = json.loads(role.inputs["assumeRolePolicy"])["Statement"][0]["Condition"]["StringEquals"]
    assert sorted(trust.values()) == ["sts.amazonaws.com", "system:serviceaccount:monitoring:loki"]
    (inline,) = [r for r in prod_resources if r.type == "aws:iam/rolePolicy:RolePolicy"
                 and r.name == "aifactory-prod-logs-irsa-bucket"]
    assert json.loads(inline.inputs["policy"])["Statement"] == [
        {"Sid": "ListBucket", "Effect": "Allow", "Action": ["s3:ListBucket"], "Resource": [arn]},
        {"Sid": "Objects", "Effect": "Allow", "Action": ["s3:GetObject", "s3:PutObject", "s3:DeleteObject"],
         "Resource": [f"{arn}/*"]}]
    (loki,) = [r for r in prod_resources if r.type == "kubernetes:helm.sh/v3:Release" and r.inputs["name"] == "loki"]
    assert loki.inputs["values"]["serviceAccount"]["annotations"] == {
        "eks.amazonaws.com/role-arn": role.outputs["arn"]}
    assert loki.inputs["values"]["loki"]["storage"]["bucketNames"]["chunks"] == \
        _one(prod_resources, "aws:s3/bucket:Bucket").outputs["bucket"]


# --- 3. Prometheus and Alertmanager storage ------------------------------------------------------


def test_prometheus_and_alertmanager_keep_data_on_volumes_sized_from_ingest() -> None:
    """Prometheus' sizing formula: retention seconds x samples/s x bytes/sample, 1-2 bytes per sample
    (prometheus.io/docs/prometheus/latest/storage/, "Operational aspects"); retentionSize units are powers of 2."""
    values = obs.kube_prometheus_stack_values(stack_cfg("prod"))
    spec = values["prometheus"]["prometheusSpec"]
    # 20,000 samples/s x 86,400 s x 30 d x 2 B = 103.68 GB; x 1.3 = 134.78e9 B = 125.5 GiB -> 126 GiB
    assert spec["storageSpec"] == {"volumeClaimTemplate": {"spec": {
        "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "126Gi"}},
        "storageClassName": "aifactory-gp3"}}}
    assert spec["retentionSize"] == "107GB"  # 85% of the volume: old blocks go before the disk fills
    assert values["alertmanager"]["alertmanagerSpec"]["storage"] == {"volumeClaimTemplate": {"spec": {
        "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}},
        "storageClassName": "aifactory-gp3"}}}
    # dev: 3,000 x 86,400 x 3 d x 2 B x 1.3 = 2.0 GB: the 10 GiB floor
    dev = obs.kube_prometheus_stack_values(stack_cfg("dev"))["prometheus"]["prometheusSpec"]
    assert dev["storageSpec"]["volumeClaimTemplate"]["spec"]["resources"] == {"requests": {"storage": "10Gi"}}


def test_existing_cluster_volumes_use_the_kits_storage_class_choice() -> None:
    cfg = stack_cfg("onprem")
    spec = obs.kube_prometheus_stack_values(cfg)["prometheus"]["prometheusSpec"]["storageSpec"]
    assert spec["volumeClaimTemplate"]["spec"].get("storageClassName") == cache_storage_class_name(cfg)
    # 15,000 x 86,400 x 15 d x 2 B x 1.3 = 50.5e9 B = 47.1 GiB -> 48 GiB
    assert spec["volumeClaimTemplate"]["spec"]["resources"] == {"requests": {"storage": "48Gi"}}


# --- 4. Alert routing -------------------------------------------------------------------------


def test_alertmanager_routes_by_severity_to_receivers_reading_secrets_from_files() -> None:
    values = obs.kube_prometheus_stack_values(stack_cfg("prod"))["alertmanager"]
    config = values["config"]
    assert config["route"]["routes"] == [
        {"receiver": "deadman-switch", "matchers": ['alertname = "Watchdog"'], "group_wait": "0s",
         "group_interval": "1m", "repeat_interval": "5m"},
        {"receiver": "oncall-pagerduty", "matchers": ['severity = "critical"'], "continue": True},
        {"receiver": "platform-slack", "matchers": ['severity = "critical"']},
        {"receiver": "platform-slack", "matchers": ['severity = "warning"'], "routes": [
            {"matchers": [f'alertname = "{name}"'], "group_by": ["namespace", "alertname", "pod"]}
            for name in ("GatewayDrainCutsRequests", "TokenBudgetDrainCutsStreams")]},
        {"receiver": "platform-email", "matchers": ['severity = "info"']}]
    receivers = {r["name"]: r for r in config["receivers"]}
    assert receivers["oncall-pagerduty"]["pagerduty_configs"][0]["routing_key_file"] == \
        "/etc/alertmanager/secrets/alertmanager-pagerduty/routing-key"
    assert receivers["platform-slack"]["slack_configs"][0]["api_url_file"] == \
        "/etc/alertmanager/secrets/alertmanager-slack/webhook-url"
    assert receivers["platform-email"]["email_configs"][0]["auth_password_file"] == \
        "/etc/alertmanager/secrets/alertmanager-smtp/password"
    # kube-prometheus-stack mounts each listed Secret at /etc/alertmanager/secrets/<name>/ (values.yaml)
    assert values["alertmanagerSpec"]["secrets"] == ["alertmanager-pagerduty", "alertmanager-slack",
                                                     "alertmanager-smtp"]
    assert "runbook_url" in values["templateFiles"]["aifactory.tmpl"]
    assert config["templates"] == ["/etc/alertmanager/config/*.tmpl"]


def test_webhook_token_is_a_bearer_credentials_file() -> None:
    config = obs.alertmanager_config(stack_cfg("staging"))
    (hook,) = [r for r in config["receivers"] if r["name"] == "incident-webhook"]
    token = "/etc/alertmanager/secrets/alertmanager-webhook/token"
    assert hook["webhook_configs"] == [{"url": "https://hooks.example.com/aifactory/staging", "send_resolved": True,
                                        "http_config": {"authorization": {"type": "Bearer",
                                                                          "credentials_file": token}}}]


def test_watchdog_is_a_dead_mans_switch_when_a_heartbeat_is_configured() -> None:
    """kube-prometheus-stack's Watchdog alert always fires (its general.rules: "ensure that the entire alerting
    pipeline is functional"); sent to a heartbeat receiver every repeatInterval, its absence pages. Alertmanager
    re-sends only at group_interval ticks (alertmanager docs, configuration, <route>), hence 1m there."""
    staging = with_obs("staging", alerting={**stack_raw("staging")["observability"]["alerting"],
                                            "heartbeat": {"receiver": "incident-webhook", "repeatInterval": "2m"}})
    assert obs.watchdog_route(staging) == {"receiver": "incident-webhook", "matchers": ['alertname = "Watchdog"'],
                                           "group_wait": "0s", "group_interval": "1m", "repeat_interval": "2m"}
    assert obs.watchdog_route(stack_cfg("dev")) == {"receiver": "null", "matchers": ['alertname = "Watchdog"']}


def test_a_heartbeat_names_a_receiver_and_an_interval_in_minutes_or_hours() -> None:
    assert _problems(alerting={"receivers": {"hb": {"type": "webhook", "url": "https://hb.example.com/x"}},
                               "heartbeat": {"receiver": "nobody", "repeatInterval": "30s"}}) == [
        "observability.alerting.heartbeat.repeatInterval: '30s' is not an interval of whole minutes or hours "
        "such as 5m or 1h",
        "observability.alerting.heartbeat.receiver: 'nobody' is not a receiver; receivers: hb"]


def test_the_prometheus_release_waits_for_every_receiver_secret_it_mounts(prod_resources: list) -> None:
    """Alertmanager mounts each receiver Secret as a volume (kube-prometheus-stack values.yaml,
    `alertmanagerSpec.secrets`): a missing one leaves its pod ContainerCreating while the release succeeds. The
    program reads each Secret (`Secret.get`, an `external` resource in the state), so `pulumi up` stops on the
    missing Secret's name before the release, which records the reads as dependencies."""
    reads = {r.id: r for r in prod_resources if r.external}
    assert sorted(reads) == ["monitoring/alertmanager-pagerduty", "monitoring/alertmanager-slack",
                             "monitoring/alertmanager-smtp"]
    assert {r.type for r in reads.values()} == {"kubernetes:core/v1:Secret"}
    (kps,) = [r for r in prod_resources if r.name == "platform-observability-kube-prometheus-stack"]
    assert {r.urn for r in reads.values()} <= set(kps.dependencies)


def test_receiver_secret_reads_are_external_in_the_stack_export_and_never_manifests() -> None:
    """A read resource is `external: true` in `pulumi stack export` (the engine's resource state) and is not an
    object the kit applies."""
    from infra.synth import state_export
    from infra.writers.kubernetes import kubernetes_objects

    result = run_program("prod", read_stack_config(stack_file("prod")))
    exported = [r for r in state_export(result)["deployment"]["resources"] if r.get("external")]
    assert sorted((r["type"], r["id"], str(r["inputs"])) for r in exported) == [
        ("kubernetes:core/v1:Secret", f"monitoring/{name}", "{}")
        for name in ("alertmanager-pagerduty", "alertmanager-slack", "alertmanager-smtp")]
    assert [o for o in kubernetes_objects(result.resources) if o.get("kind") == "Secret"] == []


def _problems(**observability: Any) -> list[str]:
    with pytest.raises(ConfigError) as err:
        with_obs("dev", **observability)
    return [str(p) for p in err.value.problems]


def test_plain_text_credentials_and_unknown_receivers_are_refused() -> None:
    assert _problems(alerting={"receivers": {"s": {"type": "slack", "channel": "#a", "apiUrl": "https://x"}},
                               "routes": {"critical": ["s", "nobody"]}}) == [
        "observability.alerting.receivers.s.apiUrl: credentials never go into the stack config; store it in a "
        "Kubernetes Secret and reference it with secret: {name, key}",
        "observability.alerting.receivers.s.secret: is required: {name: <Secret in the observability namespace>, "
        "key: <its key>}",
        "observability.alerting.routes.critical[1]: 'nobody' is not a receiver; receivers: s"]
    assert _problems(alerting={"routes": {"page": []}}) == [
        "observability.alerting.routes.page: unknown key; allowed keys: critical, warning, info"]


def test_a_receiver_of_an_unknown_type_is_one_problem_not_also_one_per_route_and_heartbeat_naming_it() -> None:
    """The routes and the heartbeat name the receiver the stack file gives; its bad type is reported once, at its
    key."""
    assert _problems(alerting={"receivers": {"chat": {"type": "teams", "channel": "#a"}},
                               "routes": {"critical": ["chat", "nobody"]}, "heartbeat": {"receiver": "chat"}}) == [
        "observability.alerting.receivers.chat.type: 'teams' is not allowed; choose one of: slack, pagerduty, email, "
        "webhook",
        "observability.alerting.routes.critical[1]: 'nobody' is not a receiver; receivers: chat"]


def test_each_receiver_type_requires_its_keys_and_refuses_the_keys_of_other_types() -> None:
    assert _problems(alerting={"receivers": {
        "mail": {"type": "email", "to": "ops@example.com", "channel": "#a"},
        "hook": {"type": "webhook", "secret": {"name": "hook", "key": "token"}},
        "pd": {"type": "pagerduty"}}}) == [
        "observability.alerting.receivers.mail.channel: unknown key for type 'email'; allowed keys: type, to, from, "
        "smarthost, username, secret",
        "observability.alerting.receivers.mail.from: is required",
        "observability.alerting.receivers.mail.smarthost: is required",
        "observability.alerting.receivers.hook.url: is required",
        "observability.alerting.receivers.pd.secret: is required: {name: <Secret in the observability namespace>, "
        "key: <its key>}"]


# --- 5. Control-plane targets -------------------------------------------------------------------


def test_no_cluster_scrapes_the_control_plane_unless_asked() -> None:
    """EKS exposes neither controller manager, scheduler nor etcd, and its kube-proxy add-on binds metrics to
    127.0.0.1:10249 (aws/containers-roadmap#657, terraform-aws-eks#742); kubeadm binds the controller manager's
    and scheduler's metrics (--bind-address) and etcd's (--listen-metrics-urls) to 127.0.0.1 (kubeadm's
    static-pod manifests, "kubeadm init" phases control-plane/etcd). Scraping them only fires *Down alerts
    (critical) forever, so the targets are opt-in everywhere."""
    off = {"enabled": False}
    parts = ("kubeControllerManager", "kubeScheduler", "kubeEtcd", "kubeProxy")
    for stack in ("prod", "onprem"):
        values = obs.kube_prometheus_stack_values(stack_cfg(stack))
        assert [values[k] for k in parts] == [off] * 4, stack
    forced = obs.kube_prometheus_stack_values(with_obs("onprem", controlPlaneMetrics=True))
    assert [forced[k] for k in parts] == [{"enabled": True}] * 4


# --- 6. Collector rollouts ----------------------------------------------------------------------


def test_a_collector_config_change_rolls_the_pods() -> None:
    """The chart's checksum/config hashes its own ConfigMap template, a constant with configMap.create=false
    (opentelemetry-collector 0.143.0 templates/_helpers.tpl): the kit annotates the pod with its config's hash."""
    before = obs.collector_values(stack_cfg("staging"))["podAnnotations"]
    again = obs.collector_values(stack_cfg("staging"))["podAnnotations"]
    after = obs.collector_values(with_obs("staging", traceSampleRatio=0.5))["podAnnotations"]
    data = obs.collector_configmap(stack_cfg("staging"))["data"]
    assert before == again == {"checksum/aifactory-config": hashlib.sha256(
        json.dumps(data, sort_keys=True).encode()).hexdigest()}
    assert after["checksum/aifactory-config"] != before["checksum/aifactory-config"]


# --- 7. Alloy positions -------------------------------------------------------------------------


def test_alloy_keeps_its_positions_on_the_node() -> None:
    """alloy chart 1.4.0 values.yaml: `alloy.storagePath` (default /tmp/alloy, lost on restart) is passed as
    --storage.path; loki.source.file keeps its positions file under it."""
    values = obs.alloy_values(stack_cfg("dev"))
    assert values["alloy"]["storagePath"] == "/var/lib/alloy"
    assert values["alloy"]["mounts"]["extra"] == [{"name": "alloy-storage", "mountPath": "/var/lib/alloy"}]
    assert values["controller"]["volumes"] == {"extra": [{"name": "alloy-storage", "hostPath": {
        "path": "/var/lib/aifactory/alloy", "type": "DirectoryOrCreate"}}]}


# --- 11. Mesh trace sampling --------------------------------------------------------------------


def test_mesh_samples_one_percent_by_default_and_what_the_stack_says() -> None:
    """Istio's own default sampling rate is 1%; the kit's used to be 100%, every request a trace."""
    for stack in ("dev", "staging", "prod", "onprem"):
        assert mesh.tracing_telemetry(stack_cfg(stack))["spec"]["tracing"] == [
            {"providers": [{"name": "otel"}], "randomSamplingPercentage": 1.0}]
    assert mesh.tracing_telemetry(with_obs("prod", meshTraceSamplingPercent=5))["spec"]["tracing"][0][
        "randomSamplingPercentage"] == 5.0
    assert _problems(meshTraceSamplingPercent=150) == [
        "observability.meshTraceSamplingPercent: 150.0 is above the maximum 100"]


def test_a_jaeger_config_change_rolls_its_pod() -> None:
    """jaeger chart 4.11.1 renders `jaeger.podLabels` into the pod template and no config checksum of its own."""
    base = obs.jaeger_values(stack_cfg("prod"))["jaeger"]["podLabels"]
    assert base == obs.jaeger_values(stack_cfg("prod"))["jaeger"]["podLabels"]
    assert list(base) == ["aifactory.io/config-hash"] and len(base["aifactory.io/config-hash"]) == 16
    assert obs.jaeger_values(with_obs("prod", traceRetention="14d"))["jaeger"]["podLabels"] != base


def test_every_sidecar_of_the_meshed_namespaces_is_scraped_for_istio_metrics(prod_resources: list) -> None:
    """Without a scrape of the sidecars nothing carries istio_requests_total and the Mesh dashboard and the
    workload:istio_* rules stay empty. istio-proxy serves Envoy's stats (Istio's standard metrics among them) on
    its container port `http-envoy-prom` 15090, which the injector excludes from inbound capture (Istio 1.28.3
    manifests/charts/istio-control/istio-discovery/files/injection-template.yaml), so the scrape is plain HTTP;
    the injector labels every pod it gives a sidecar `security.istio.io/tlsMode`."""
    cfg = stack_cfg("prod")
    pm = obs.sidecar_pod_monitor(cfg)
    assert (pm["kind"], pm["metadata"]["namespace"]) == ("PodMonitor", "monitoring")
    assert pm["spec"] == {
        "namespaceSelector": {"matchNames": ["aifactory-gateway", "assistant", "finance", "research", "search"]},
        "selector": {"matchExpressions": [{"key": "security.istio.io/tlsMode", "operator": "Exists"}]},
        "podMetricsEndpoints": [{"port": "http-envoy-prom", "path": "/stats/prometheus", "interval": "15s",
                                 "relabelings": [{"targetLabel": "job", "replacement": "envoy-stats"}]}]}
    (monitor,) = [r for r in prod_resources if r.name == "platform-observability-sidecar-monitor"]
    (kps,) = [r for r in prod_resources if r.name == "platform-observability-kube-prometheus-stack"]
    assert kps.urn in monitor.dependencies, "the PodMonitor CRD comes with kube-prometheus-stack"


def test_the_meshed_namespaces_admit_prometheus_on_the_sidecar_stats_port() -> None:
    from components.k8s import tenancy
    from components.k8s.gateway import network as gateway

    assert 15090 in tenancy.PROMETHEUS_SCRAPE_PORTS and 15090 in gateway.SIDECAR_METRICS_PORTS


def test_loki_exports_its_own_metrics_once_the_servicemonitor_crd_exists(prod_resources: list) -> None:
    """README's ingest calibration reads loki_distributor_bytes_received_total: the chart scrapes Loki only with
    monitoring.serviceMonitor.enabled (default false), and renders the ServiceMonitor only when the CRD is
    already there (loki 6.53.0 templates/monitoring/servicemonitor.yaml: .Capabilities.APIVersions.Has), so the
    release must come after kube-prometheus-stack or it silently has none."""
    values = obs.loki_values(stack_cfg("prod"), BUCKET)
    assert values["monitoring"] == {"serviceMonitor": {"enabled": True, "metricsInstance": {"enabled": False}}}
    (loki,) = [r for r in prod_resources if r.name == "platform-observability-loki"]
    (kps,) = [r for r in prod_resources if r.name == "platform-observability-kube-prometheus-stack"]
    assert kps.urn in loki.dependencies


def test_the_telemetry_pipeline_is_scraped_itself(prod_resources: list) -> None:
    """Issue 28 item 9: Jaeger's own telemetry (otelcol_* on 8888) and Alloy's (loki_write_*) were not scraped, so no
    rule could see them drop spans or log lines. Jaeger: the chart makes no ServiceMonitor; its one Service exposes
    8888 as port `internal-metrics` with the chart's selector labels and component all-in-one (jaeger chart 4.11.1
    templates/jaeger/jaeger-service.yaml, _helpers.tpl). Alloy: `serviceMonitor.enabled` defaults to false and the
    chart renders the ServiceMonitor without checking for the CRD (alloy chart 1.4.0 values.yaml,
    templates/servicemonitor.yaml), so the release comes after kube-prometheus-stack."""
    cfg = stack_cfg("prod")
    telemetry = obs.jaeger_config(cfg)["service"]["telemetry"]["metrics"]["readers"]
    assert telemetry == [{"pull": {"exporter": {"prometheus": {"host": "0.0.0.0", "port": 8888}}}}]
    assert obs.jaeger_service_monitor(cfg) == {
        "apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor",
        "metadata": {"name": "jaeger", "namespace": "monitoring",
                     "labels": {"app.kubernetes.io/managed-by": "aifactory"}},
        "spec": {"selector": {"matchLabels": {"app.kubernetes.io/name": "jaeger",
                                              "app.kubernetes.io/instance": "jaeger",
                                              "app.kubernetes.io/component": "all-in-one"}},
                 "endpoints": [{"port": "internal-metrics", "interval": "30s"}]}}
    assert obs.alloy_values(cfg)["serviceMonitor"] == {"enabled": True}
    (kps,) = [r for r in prod_resources if r.name == "platform-observability-kube-prometheus-stack"]
    (alloy,) = [r for r in prod_resources if r.name == "platform-observability-alloy"]
    (monitor,) = [r for r in prod_resources if r.name == "platform-observability-jaeger-monitor"]
    assert kps.urn in alloy.dependencies and kps.urn in monitor.dependencies
    assert (monitor.inputs["kind"], monitor.inputs["metadata"]["name"]) == ("ServiceMonitor", "jaeger")
