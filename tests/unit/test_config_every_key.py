"""Every documented stack config key is accepted and reaches the validated config, and the checks around them
report the key path, the value and what is allowed (found by `make mutate --sample` on infra/config.py: a
misspelt key in an allowed-keys list, or a key read under another name, fell back to its default unnoticed).

Expected values are the ones each test writes into the raw config, and the messages are the house rule's
(key path, value, what is allowed), written out here.
"""

from __future__ import annotations

from typing import Any

import pytest

from components.k8s.settings import AlertReceiver, InfinibandSettings, NodeCheck, SecretRef, Taint, VolumeSizes
from infra.config import ConfigError, parse
from infra.stack.cluster import Target
from infra.stack.messages import did_you_mean
from tests.support.stacks import stack_raw


def _parse(raw: dict[str, Any], stack: str = "onprem") -> Any:
    return parse(raw, stack=stack)


def _problems(raw: dict[str, Any], stack: str = "onprem") -> list[str]:
    with pytest.raises(ConfigError) as err:
        parse(raw, stack=stack)
    return [str(p) for p in err.value.problems]


def test_kubernetes_version_reaches_the_config_and_a_bad_one_is_refused() -> None:
    raw = stack_raw("onprem")
    assert _parse({**raw, "kubernetesVersion": "1.32"}).kubernetes_version == "1.32"
    assert _problems({**raw, "kubernetesVersion": "1.30"}) == [
        "kubernetesVersion: '1.30' is not allowed; choose one of: 1.31, 1.32, 1.33, 1.34, 1.35, 1.36"]


def test_every_node_check_key_reaches_the_pool() -> None:
    raw = stack_raw("onprem")
    raw["nodePools"]["h100-ib"]["nodeCheck"] = {
        "driverMinVersion": "570.86.15", "minTflopsFraction": 0.8, "minBandwidthFraction": 0.75,
        "burnInSeconds": 30, "dcgmExporterUrl": "http://10.0.0.5:9400/metrics", "minBusBandwidthFraction": 0.65,
        "fabricTestSeconds": 120}
    assert _parse(raw).node_pools["h100-ib"].node_check == NodeCheck(
        driver_min_version="570.86.15", min_tflops_fraction=0.8, min_bandwidth_fraction=0.75, burn_in_seconds=30,
        dcgm_exporter_url="http://10.0.0.5:9400/metrics", min_bus_bandwidth_fraction=0.65, fabric_test_seconds=120)


def test_every_infiniband_key_reaches_the_config() -> None:
    raw = stack_raw("onprem")
    raw["infiniband"] = {
        "network": "sriov", "interfaces": [f"ibp{i}s0" for i in range(8)], "ipRange": "10.200.0.0/22",
        "hcaDeviceIds": ["1021"], "rdmaResourceName": "rdma_ib_rails", "rdmaHcaMax": 16, "hostsHaveOfed": True,
        "hcas": [f"mlx5_{i}" for i in range(8)]}
    assert _parse(raw).infiniband == InfinibandSettings(
        network="sriov", interfaces=tuple(f"ibp{i}s0" for i in range(8)), ip_range="10.200.0.0/22",
        hca_device_ids=("1021",), rdma_resource_name="rdma_ib_rails", rdma_hca_max=16, hosts_have_ofed=True,
        hcas=tuple(f"mlx5_{i}" for i in range(8)))


def test_a_bad_rdma_device_name_is_reported_under_infiniband_hcas() -> None:
    raw = stack_raw("onprem")
    raw["infiniband"]["hcas"] = ["mlx5_0", "MLX5-1"] + [f"mlx5_{i}" for i in range(2, 8)]
    assert _problems(raw)[0] == "infiniband.hcas[1]: 'MLX5-1' is not an RDMA device name such as mlx5_0"


def test_every_existing_cluster_target_key_reaches_the_config() -> None:
    raw = stack_raw("onprem")
    raw["target"] = {"provider": "existing", "kubeconfig": "~/.kube/site.yaml", "context": "site-admin",
                     "hostsHaveDrivers": True, "storageClass": "local-nvme", "installMetricsServer": False}
    assert _parse(raw).target == Target("existing", kubeconfig="~/.kube/site.yaml", context="site-admin",
                                        hosts_have_drivers=True, storage_class="local-nvme",
                                        install_metrics_server=False)


def test_existing_cluster_keys_on_an_aws_target_are_each_refused() -> None:
    raw = stack_raw("dev")
    raw["target"] = {**raw["target"], "kubeconfig": "k", "context": "c", "hostsHaveDrivers": True,
                     "storageClass": "gp3", "installMetricsServer": False}
    assert _problems(raw, "dev") == [f"target.{k}: only applies to provider 'existing'" for k in
                                     ("kubeconfig", "context", "hostsHaveDrivers", "storageClass",
                                      "installMetricsServer")]


def test_too_many_zones_are_shown_with_the_limit() -> None:
    raw = stack_raw("dev")
    raw["target"].update({"region": "us-east-1", "availabilityZones": [f"us-east-1{c}" for c in "abcdefg"]})
    assert _problems(raw, "dev") == [  # the list shown up to 80 characters
        'target.availabilityZones: ["us-east-1a", "us-east-1b", "us-east-1c", "us-east-1d", "us-east-1e", "us-ea... '
        "must list 2 to 6 zones (EKS needs two)"]


def test_taints_keep_their_value_and_effect() -> None:
    raw = stack_raw("onprem")
    raw["nodePools"]["h100-ib"]["taints"] = [{"key": "dedicated", "value": "training", "effect": "NoExecute"},
                                             {"key": "gpu", "effect": "NoSchedule"}]
    assert _parse(raw).node_pools["h100-ib"].taints == (Taint("dedicated", "NoExecute", "training"),
                                                        Taint("gpu", "NoSchedule", ""))


def test_each_bad_taint_is_reported_at_its_index_once_and_the_good_ones_kept() -> None:
    raw = stack_raw("onprem")
    raw["nodePools"]["h100-ib"]["taints"] = [{"key": "a", "effect": "NoSchedule"}, "gpu=true:NoSchedule",
                                             {"effect": "Never"}]
    at = "nodePools.h100-ib.taints"
    # a string where a taint belongs is one problem: its keys are not also reported as required
    assert _problems(raw) == [f"{at}[1]: expected a mapping, got a string 'gpu=true:NoSchedule'",
                              f"{at}[2].key: is required",
                              f"{at}[2].effect: 'Never' is not allowed; choose one of: NoSchedule, PreferNoSchedule, "
                              "NoExecute"]
    raw["nodePools"]["h100-ib"]["taints"] = "gpu"
    assert _problems(raw) == [f"{at}: expected a list, got a string 'gpu'"]
    raw["nodePools"]["h100-ib"]["taints"] = []  # none: the GPU taint is not added
    assert _parse(raw).node_pools["h100-ib"].taints == ()


@pytest.mark.parametrize(("value", "problem"), [
    ("fp4", "'fp4' is not allowed; choose one of: none, fp8, awq, gptq, int8"),
    (8, "8 is not allowed; choose one of: none, fp8, awq, gptq, int8"),
])
def test_quantizations_short_form_is_checked_and_reported_at_its_own_key(value: Any, problem: str) -> None:
    raw = stack_raw("onprem")
    raw["models"]["llama-70b"]["quantization"] = value
    assert _problems(raw) == [f"models.llama-70b.quantization: {problem}"]


def test_a_tenants_cpu_and_memory_quota_are_kept_as_written() -> None:
    raw = stack_raw("onprem")
    raw["tenants"]["ml-platform"].update({"cpuQuota": "1000", "memoryQuota": "9Ti"})
    tenant = _parse(raw).tenants["ml-platform"]
    assert (tenant.cpu_quota, tenant.memory_quota) == ("1000", "9Ti")


def test_the_system_pools_instance_type_is_read() -> None:
    raw = stack_raw("dev")
    raw.setdefault("cluster", {})["systemPool"] = {"instanceType": "m7i.4xlarge"}
    assert _parse(raw, "dev").cluster.system_pool.instance_type == "m7i.4xlarge"
    raw["cluster"]["systemPool"] = {"instanceType": "p5.48xlarge"}
    assert _problems(raw, "dev") == ["cluster.systemPool.instanceType: 'p5.48xlarge' is not an AWS CPU type; "
                                     "use e.g. m7i.2xlarge"]


def test_a_bad_cluster_name_is_reported_under_cluster_name() -> None:
    raw = stack_raw("dev")
    raw["cluster"]["name"] = "9lives"
    assert _problems(raw, "dev") == ["cluster.name: '9lives' is not a valid EKS cluster name"]


def test_a_deployer_in_the_vpc_is_read_and_lets_the_endpoint_be_private() -> None:
    raw = stack_raw("dev")
    raw["cluster"] = {k: v for k, v in raw["cluster"].items() if k != "publicAccessCidrs"}
    raw["cluster"].update({"apiAccess": "private", "deployerInVpc": True})
    cluster = _parse(raw, "dev").cluster
    assert (cluster.api_access, cluster.deployer_in_vpc) == ("private", True)


@pytest.mark.parametrize("days", [400, 545, 731])
def test_flow_log_retention_takes_cloudwatch_logs_retention_values(days: int) -> None:
    # CloudWatch Logs API reference, PutRetentionPolicy: retentionInDays is one of 1, 3, 5, 7, 14, 30, 60, 90,
    # 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922, 3288, 3653.
    raw = stack_raw("dev")
    raw["network"] = {**(raw.get("network") or {}), "flowLogRetentionDays": days}
    assert _parse(raw, "dev").network.flow_log_retention_days == days


def test_a_misspelt_key_suggests_the_one_closest_spelling() -> None:
    # difflib ranks "burst" before "batchBurst" for "bursst"; the hint names one key, not a list
    assert did_you_mean("bursst", ("requestsPerSecond", "burst", "batchBurst")) == " (did you mean 'burst'?)"
    assert did_you_mean("Burst", ("requestsPerSecond", "burst", "batchBurst")) == " (did you mean 'burst'?)"


def _onprem_with(name: str, **keys: Any) -> dict[str, Any]:
    raw = stack_raw("onprem")
    raw["models"][name].update(keys)
    return raw


@pytest.mark.parametrize(("model", "keys", "problem"), [
    # the kit's refusal as stated (whether TensorRT-LLM's W4A16 GPTQ could serve it is not checked here)
    ("classifier", {"quantization": "gptq"},
     "models.classifier.quantization: 'gptq' is not supported by engine 'triton'; choose one of: none, fp8, awq, "
     "int8"),
    ("llama-70b", {"quantization": "fp4"},
     "models.llama-70b.quantization: 'fp4' is not allowed; choose one of: none, fp8, awq, gptq, int8"),
    ("llama-70b", {"speculative": {"method": "medusa", "draftModel": "org/draft"}},
     "models.llama-70b.speculative.method: 'medusa' is not allowed; choose one of: eagle3, eagle, ngram"),
    ("llama-70b", {"speculative": {"method": "ngram", "numSpeculativeTokens": 17}},
     "models.llama-70b.speculative.numSpeculativeTokens: 17 is above the maximum 16"),
    ("classifier", {"speculative": {"method": "ngram"}},
     "models.classifier.speculative: speculative decoding is not available with engine 'triton'; remove it or use "
     "engine 'vllm' or 'sglang'"),
    ("classifier", {"replicas": {"min": 3, "max": 2}}, "models.classifier.replicas.min: 3 is greater than max 2"),
    ("classifier", {"replicas": {"min": 2, "max": 7, "targetQueueDepth": 0}},
     "models.classifier.replicas.targetQueueDepth: 0 is below the minimum 1"),
])
def test_a_models_bad_setting_is_reported_at_its_key(model: str, keys: dict[str, Any], problem: str) -> None:
    assert _problems(_onprem_with(model, **keys)) == [problem]


def test_a_models_replica_settings_are_read() -> None:
    raw = _onprem_with("classifier", replicas={"min": 2, "max": 7, "targetQueueDepth": 9, "targetQueueTimeMs": 250})
    replicas = _parse(raw).models["classifier"].replicas
    assert (replicas.min, replicas.max, replicas.target_queue_depth, replicas.target_queue_time_ms) == (2, 7, 9, 250)


def test_a_quantization_method_alone_means_a_pre_quantized_checkpoint_except_vllm_fp8() -> None:
    # vLLM quantizes BF16 weights on load to FP8 only (vLLM docs, quantization/fp8: dynamic FP8 at load time);
    # AWQ needs an AWQ checkpoint (quantization/auto_awq)
    models = _parse(_onprem_with("llama-70b", quantization="awq")).models
    assert (models["llama-70b"].quantization, models["llama-70b"].quantized_checkpoint) == ("awq", True)
    models = _parse(_onprem_with("llama-70b", quantization="fp8")).models
    assert (models["llama-70b"].quantization, models["llama-70b"].quantized_checkpoint) == ("fp8", False)


def _two_variants(first: dict[str, Any], second: dict[str, Any]) -> dict[str, Any]:
    raw = stack_raw("onprem")
    for name, variant in (("llama-70b", first), ("llama-405b", second)):
        raw["models"][name].update({"workload": "chat", "variant": variant})
    return raw


def test_variant_settings_are_read() -> None:
    models = _parse(_two_variants({"costPerRequest": 0.01}, {"requestsPerSecond": 1, "maxRequests": 64})).models
    assert (models["llama-70b"].variant.cost_per_request, models["llama-70b"].variant.max_requests) == (0.01, None)
    assert (models["llama-405b"].variant.requests_per_second, models["llama-405b"].variant.max_requests) == (1.0, 64)


def test_a_variant_without_a_cost_says_which_keys_give_one() -> None:
    assert _problems(_two_variants({}, {"requestsPerSecond": 1})) == [
        "models.llama-70b.variant.requestsPerSecond: is required to derive the cost per request (pool GPU price x "
        "GPUs per replica / throughput); or give costPerRequest"]


def test_a_variants_request_cap_must_be_an_integer() -> None:
    assert _problems(_two_variants({"requestsPerSecond": 2, "maxRequests": "10"}, {"requestsPerSecond": 1})) == [
        "models.llama-70b.variant.maxRequests: expected an integer, got a string '10'"]


@pytest.mark.parametrize(("model", "keys", "problem"), [
    ("llama-70b", {"pool": "h200"}, "models.llama-70b.pool: 'h200' is not a node pool; pools: a100-mig, cpu, h100-ib"),
    ("llama-70b", {"gpusPerReplica": 4},
     "models.llama-70b.gpusPerReplica: 4 must equal tensorParallel x pipelineParallel (8)"),
])
def test_a_models_pool_and_shape_problems_name_what_is_allowed(model: str, keys: dict[str, Any],
                                                                problem: str) -> None:
    assert _problems(_onprem_with(model, **keys)) == [problem]


def test_a_bad_mig_profile_names_the_form_of_one() -> None:
    # NVIDIA MIG user guide: profiles are named <slices>g.<memory>gb (1g.10gb on an A100 40GB)
    assert _problems(_onprem_with("classifier", migProfile="1g-10gb"))[0] == \
        "models.classifier.migProfile: '1g-10gb' is not a MIG profile such as 1g.10gb"


def test_no_huge_pages_is_a_valid_setting() -> None:
    raw = stack_raw("onprem")
    raw["nodePools"]["cpu"]["hugepagesMiB"] = 0
    assert _parse(raw).node_pools["cpu"].hugepages_mib == 0


def test_a_taint_value_must_be_a_string() -> None:
    # Kubernetes Taint.value is a string (core/v1 Taint)
    raw = stack_raw("onprem")
    raw["nodePools"]["cpu"]["taints"] = [{"key": "k", "value": 5, "effect": "NoSchedule"}]
    assert _problems(raw) == ["nodePools.cpu.taints[0].value: expected a string, got an integer 5"]


def test_an_unknown_node_check_key_is_named_with_the_allowed_ones() -> None:
    raw = stack_raw("onprem")
    raw["nodePools"]["cpu"]["nodeCheck"] = {"burnInSecs": 5}
    assert _problems(raw) == [
        "nodePools.cpu.nodeCheck.burnInSecs: unknown key (did you mean 'burnInSeconds'?); allowed keys: "
        "driverMinVersion, minTflopsFraction, minBandwidthFraction, burnInSeconds, dcgmExporterUrl, "
        "minBusBandwidthFraction, fabricTestSeconds"]


def test_infiniband_on_a_type_without_it_lists_the_types_with_it() -> None:
    # the catalog's on-prem servers with InfiniBand compute ports (NVIDIA DGX A100 / DGX H100 user guides: eight
    # ConnectX-6 HDR / ConnectX-7 NDR ports) are named in order; the CPU server has none
    raw = stack_raw("onprem")
    raw["nodePools"]["cpu"]["fabric"] = "infiniband"
    assert _problems(raw)[0] == ("nodePools.cpu.fabric: 'infiniband' is not available on cpu-server; InfiniBand "
                                 "types: dgx-a100, dgx-h100, hgx-h200")


def test_a_checkpoint_named_quantized_is_refused_for_load_time_quantization_even_without_an_org() -> None:
    # vLLM (config/model.py, ModelConfig._verify_quantization) refuses a --quantization that contradicts the
    # checkpoint's own quantization_config; a model id may be a bare repository name
    raw = _onprem_with("llama-70b", model="Llama-3.3-70B-Instruct-FP8", quantization="fp8")
    assert _problems(raw) == [
        "models.llama-70b.quantization: 'Llama-3.3-70B-Instruct-FP8' is a quantized checkpoint (FP8 in its name) "
        "but quantization 'fp8' quantizes on load, and vLLM refuses a --quantization that contradicts the "
        "checkpoint: set quantization: {method: fp8, checkpoint: pre-quantized}"]


def test_the_onprem_receivers_are_read_as_written_in_its_stack_file() -> None:
    receivers = _parse(stack_raw("onprem")).observability.alerting.receivers  # stacks/Pulumi.onprem.yaml
    assert receivers["oncall-webhook"] == AlertReceiver(
        "oncall-webhook", "webhook", SecretRef("alertmanager-webhook", "token"),
        url="https://alerts.onprem.example.com/hooks/aifactory")
    assert receivers["ops-email"] == AlertReceiver("ops-email", "email", None, to="gpu-ops@example.com",
                                                   sender="alertmanager@example.com",
                                                   smarthost="smtp.onprem.example.com:25")


@pytest.mark.parametrize(("receiver", "key", "value", "problem"), [
    ("oncall-webhook", "url", "alerts.example.com/hook",
     "observability.alerting.receivers.oncall-webhook.url: 'alerts.example.com/hook' is not an http(s):// URL"),
    # Alertmanager configuration docs: email_config smarthost is host:port
    ("ops-email", "smarthost", "smtp.example.com",
     "observability.alerting.receivers.ops-email.smarthost: 'smtp.example.com' is not host:port such as "
     "smtp.example.com:587"),
])
def test_a_bad_receiver_setting_is_reported_at_its_key(receiver: str, key: str, value: str, problem: str) -> None:
    raw = stack_raw("onprem")
    raw["observability"]["alerting"]["receivers"][receiver][key] = value
    assert _problems(raw) == [problem]


def test_a_receivers_secret_is_a_secret_name_and_key_each_reported_at_its_key() -> None:
    raw = stack_raw("onprem")
    raw["observability"]["alerting"]["receivers"]["oncall-webhook"]["secret"] = {"name": "Hook_Token", "key": "a b",
                                                                                 "path": "/x"}
    at = "observability.alerting.receivers.oncall-webhook.secret"
    assert _problems(raw) == [
        f"{at}.path: unknown key; allowed keys: name, key",
        f"{at}.name: 'Hook_Token' is not a DNS label (lowercase letters, digits and '-', at most 63 characters)",
        f"{at}.key: 'a b' is not a Secret key (letters, digits, '-', '_' and '.')"]
    raw["observability"]["alerting"]["receivers"]["oncall-webhook"]["secret"] = {"name": "hook"}
    assert _problems(raw) == [f"{at}.key: is required"]


def test_an_unknown_heartbeat_key_is_named_with_the_allowed_ones() -> None:
    raw = stack_raw("onprem")
    raw["observability"]["alerting"]["heartbeat"] = {"receiver": "oncall-webhook", "interval": "1m"}
    assert _problems(raw) == ["observability.alerting.heartbeat.interval: unknown key; allowed keys: receiver, "
                              "repeatInterval"]


def test_pinned_volume_sizes_are_read() -> None:
    raw = stack_raw("onprem")
    raw["observability"]["volumes"] = {"prometheusGiB": 300, "lokiGiB": 200, "jaegerGiB": 100}
    assert _parse(raw).observability.volumes == VolumeSizes(prometheus_gib=300, loki_gib=200, jaeger_gib=100)


def test_an_issuers_tenants_are_read_and_checked_at_their_path() -> None:
    raw = stack_raw("onprem")
    raw["gateway"]["auth"]["issuers"][0]["tenants"] = ["ml-platform"]
    assert _parse(raw).gateway.auth.issuers[0].tenants == ("ml-platform",)
    raw["gateway"]["auth"]["issuers"][0]["tenants"] = ["ml-platform", 5]
    assert _problems(raw) == ["gateway.auth.issuers[0].tenants[1]: expected a string, got an integer 5"]


def test_the_tenant_claim_defaults_to_tenant() -> None:
    # docs/gateway.md, gateway.auth: "tenantClaim: tenant  # default: tenant"
    raw = stack_raw("onprem")
    del raw["gateway"]["auth"]["tenantClaim"]
    assert _parse(raw).gateway.auth.tenant_claim == "tenant"


def test_the_max_token_lifetime_defaults_to_a_day_and_is_bounded() -> None:
    # docs/gateway.md, gateway.auth: "maxTokenLifetimeSeconds: 86400  # default: 86400 (24 h)"
    raw = stack_raw("onprem")
    assert _parse(raw).gateway.auth.max_token_lifetime_seconds == 86400
    raw["gateway"]["auth"]["maxTokenLifetimeSeconds"] = 3600
    assert _parse(raw).gateway.auth.max_token_lifetime_seconds == 3600
    raw["gateway"]["auth"]["maxTokenLifetimeSeconds"] = 10 * 365 * 86400
    assert _problems(raw) == ["gateway.auth.maxTokenLifetimeSeconds: 315360000 is above the maximum 2.592e+06"]
    raw["gateway"]["auth"]["maxTokenLifetimeSeconds"] = "1d"
    assert _problems(raw) == ["gateway.auth.maxTokenLifetimeSeconds: expected an integer, got a string '1d'"]


def test_an_issuer_with_no_tenants_is_refused() -> None:
    raw = stack_raw("onprem")
    raw["gateway"]["auth"]["issuers"][0]["tenants"] = []
    assert _problems(raw) == ["gateway.auth.issuers[0].tenants: is empty: its tokens could call nothing; list the "
                              "tenants it may name, or leave tenants out (any tenant)"]


def test_observability_settings_are_read() -> None:
    raw = stack_raw("onprem")
    raw["observability"].update(meshTraceSamplingPercent=5, traceRetention="2d",
                                workflows={"triage": {"latencySeconds": 12}})
    obs = _parse(raw).observability
    assert (obs.mesh_trace_sampling_percent, obs.trace_retention) == (5.0, "2d")
    assert obs.workflows["triage"].latency_seconds == 12.0


@pytest.mark.parametrize(("key", "value", "problem"), [
    # Loki's simple scalable mode needs object storage (Grafana Loki docs, deployment modes)
    ("lokiMode", "simple-scalable",
     "observability.lokiMode: 'simple-scalable' needs object storage, which the kit creates on provider aws only; "
     "use 'single-binary' (one replica on its volume) on provider existing"),
    ("traceRetention", "3 days", "observability.traceRetention: '3 days' is not a retention such as 7d or 168h"),
])
def test_a_bad_observability_setting_on_an_existing_cluster_is_reported_at_its_key(key: str, value: str,
                                                                                  problem: str) -> None:
    raw = stack_raw("onprem")
    raw["observability"][key] = value
    assert _problems(raw) == [problem]


def test_a_price_for_an_unknown_instance_type_names_the_type() -> None:
    raw = stack_raw("onprem")
    raw["observability"]["prices"]["dgx-h200"] = 1
    assert _problems(raw)[0].startswith("observability.prices.dgx-h200: is not a known instance type; known: ")


def test_a_stack_without_a_gpu_pool_is_refused() -> None:
    raw = stack_raw("onprem")
    raw["nodePools"] = {"cpu": raw["nodePools"]["cpu"]}
    raw["models"] = {}
    assert _problems(raw) == ["nodePools: needs at least one GPU pool"]


def test_infiniband_settings_on_aws_are_refused() -> None:
    raw = stack_raw("dev")
    raw["infiniband"] = {"network": "ipoib"}
    assert _problems(raw, "dev") == ["infiniband: only applies to provider 'existing'"]


@pytest.mark.parametrize(("end", "ok"), [("2026-12-01T12:30:00Z", False), ("2026-12-01T12:31:00Z", True)])
def test_a_capacity_block_must_last_more_than_the_drain_by_the_minute(end: str, ok: bool) -> None:
    # the pool scales to zero drainMinutes (60) before the block ends (EKS user guide, Capacity Blocks for ML), so a
    # block of exactly 60 minutes leaves no time at all and one of 61 minutes leaves one minute
    raw = stack_raw("prod")
    raw["nodePools"]["h100-block"]["capacity"].update(startTime="2026-12-01T11:30:00Z", endTime=end, drainMinutes=60)
    if ok:
        assert _parse(raw, "prod").node_pools["h100-block"].capacity.end_time == end
    else:
        assert _problems(raw, "prod") == [
            f"nodePools.h100-block.capacity.endTime: '{end}' must be more than 60 minutes after startTime "
            "'2026-12-01T11:30:00Z' (the pool scales to zero drainMinutes=60 before the block ends)"]


@pytest.mark.parametrize(("rate", "burst"), [({"requestsPerSecond": 20}, 100), ({"requestsPerSecond": 500}, 500),
                                             ({"requestsPerSecond": 20, "burst": 30}, 30)])
def test_a_tenants_burst_defaults_to_the_larger_of_the_declared_burst_and_its_rate(rate: dict[str, Any],
                                                                                  burst: int) -> None:
    """RateLimit.burst is derived (components/k8s/settings/tenants.py: 100, or requestsPerSecond when larger) and
    the batch bucket's burst follows it."""
    raw = stack_raw("onprem")
    raw["tenants"]["analytics"]["rateLimit"] = rate
    limit = _parse(raw).tenants["analytics"].rate_limit
    assert (limit.burst, limit.batch_burst) == (burst, burst)


def _assistant_on_the_block_only() -> dict[str, Any]:
    """prod as it shipped before assistant-steady: the assistant's interactive requests served by assistant-fast alone,
    on the capacity block's pool."""
    raw = stack_raw("prod")
    del raw["models"]["assistant-steady"]
    del raw["models"]["assistant-fast"]["variant"]
    del raw["gateway"]["routing"]["assistant"]
    raw["models"]["embed-rerank"]["callers"].remove("assistant-steady")
    return raw


BLOCK_ONLY_WARNING = (
    "models: workload 'assistant' is served interactively only from capacity blocks (assistant-fast on h100-block "
    "(2026-12-01T11:30:00Z to 2026-12-15T11:30:00Z)): outside a block's window its pool has no nodes and the "
    "gateway answers every interactive request to 'assistant' with 503; give the workload an interactive model "
    "on another pool (as a variant), or have its clients send x-priority: batch outside the window")


def test_a_workload_served_interactively_only_from_capacity_blocks_is_warned_about() -> None:
    """Outside its window a block's pool has no nodes, and the gateway sends a workload's interactive requests only to
    its interactive models: with assistant-fast alone the assistant answers 503 then (infra/stack/checks.py). The
    shipped stacks have none: prod's assistant has an on-demand variant, assistant-steady."""
    from infra.stack.checks import capacity_block_only_workloads
    from tests.support.stacks import stack_config

    cfg = _parse(_assistant_on_the_block_only(), "prod")
    assert capacity_block_only_workloads(cfg.models, cfg.node_pools) == [BLOCK_ONLY_WARNING]
    for stack in ("dev", "staging", "prod", "onprem"):
        cfg = stack_config(stack)
        assert capacity_block_only_workloads(cfg.models, cfg.node_pools) == [], stack


def test_synth_prints_the_capacity_block_warning(caplog: pytest.LogCaptureFixture) -> None:
    """The program (what synth, preview and up run) logs each warning as a Pulumi warning (under synth's mocks: the
    root logger's warnings, which the CLI prints)."""
    import json

    from infra.synth import read_stack_config, run_program, stack_file

    values = {**read_stack_config(stack_file("prod")),
              **{f"aifactory:{k}": json.dumps(v) for k, v in _assistant_on_the_block_only().items()
                 if k in ("models", "gateway")}}
    run_program("prod", values)
    assert BLOCK_ONLY_WARNING in [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]


def test_a_mistake_that_others_follow_from_is_reported_once() -> None:
    """Receivers written as a list: the routes and heartbeat naming receivers are not also told each name is not a
    receiver; a bad capacity type: its reservationId and window are not also checked against the default type."""
    raw = stack_raw("onprem")
    raw["observability"]["alerting"]["receivers"] = ["oncall-webhook", "ops-email"]
    assert _problems(raw) == ["observability.alerting.receivers: expected a mapping, got a list "
                              '["oncall-webhook", "ops-email"]']
    prod = stack_raw("prod")
    prod["nodePools"]["h100-block"]["capacity"]["type"] = "block"
    assert _problems(prod, stack="prod") == [
        "nodePools.h100-block.capacity.type: 'block' is not allowed; choose one of: on-demand, odcr, capacity-block"]


def test_labels_taints_and_zones_the_kubelet_or_aws_would_refuse_are_refused() -> None:
    """kubernetes@v1.34.0: label keys and values (apimachinery validation IsQualifiedName, IsValidLabelValue), the
    kubelet's reserved namespaces (cmd/kubelet/app/options/options.go ValidateKubeletFlags); one taint per key and
    effect; a pool's zone once; the public endpoint of an IPv4 cluster takes IPv4 CIDRs."""
    prod = stack_raw("prod")
    pool = prod["nodePools"]["l40s"]
    pool["labels"] = {"bad key!": "x", "team": "t" * 64, "app.kubernetes.io/name": "x", "node.kubernetes.io/role": "ok",
                      "example.com/tier": "gold"}
    pool["taints"] = [{"key": "a b", "value": "v" * 64, "effect": "NoSchedule"},
                      {"key": "dedicated", "effect": "NoSchedule"}, {"key": "dedicated", "effect": "NoSchedule"}]
    pool["availabilityZones"] = ["us-east-1a", "us-east-1a"]
    prod["cluster"]["publicAccessCidrs"] = ["2001:db8::/32"]
    prod["cluster"]["apiAccess"] = "public-and-private"
    at = "nodePools.l40s"
    problems = _problems(prod, stack="prod")
    assert problems == [
        "cluster.publicAccessCidrs[0]: '2001:db8::/32' is an IPv6 network: the kit's EKS cluster is IPv4, whose "
        "public endpoint takes IPv4 CIDRs only",
        f"{at}.labels.bad key!: is not a label key: an optional DNS-subdomain prefix and '/', then at most 63 letters, "
        "digits, '-', '_' or '.', starting and ending with a letter or digit",
        f"{at}.taints[0].key: 'a b' is not a label key: an optional DNS-subdomain prefix and '/', then at most 63 "
        "letters, digits, '-', '_' or '.', starting and ending with a letter or digit",
        f"{at}.taints[0].value: '{'v' * 64}' is not a label value: at most 63 letters, digits, '-', '_' or '.', "
        "starting and ending with a letter or digit",
        f"{at}.availabilityZones: [\"us-east-1a\", \"us-east-1a\"] lists a zone twice",
        f"{at}.labels.team: '{'t' * 64}' is not a label value: at most 63 letters, digits, '-', '_' or '.', "
        "starting and ending with a letter or digit",
        f"{at}.labels.app.kubernetes.io/name: is in a namespace Kubernetes reserves (kubernetes.io, k8s.io): the "
        "kubelet refuses to start with it; use your own prefix, or node.kubernetes.io/ or kubelet.kubernetes.io/",
        f"{at}.taints: taint dedicated:NoSchedule is listed twice (a node has one taint per key and effect)"]
