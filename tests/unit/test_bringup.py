"""A first real `pulumi up`: what the API server, controllers and engine would reject or wait on (issue 12).

Each test reads the program's synthesized state (the same registrations `aifactory synth` exports) or the
validated config, and checks the upstream rule it cites. Expected numbers are worked out by hand from the
catalog's instance facts and the cited upstream defaults, never taken from the code under test.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra import cli
from infra.config import ConfigError, parse
from infra.mocks import Registration
from infra.synth import read_stack_config, run_program, stack_file
from tests.support.stacks import stack_config, stack_raw

RELEASE = "kubernetes:helm.sh/v3:Release"
ADDON = "aws:eks/addon:Addon"
NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"
STORAGE_CLASS = "kubernetes:storage.k8s.io/v1:StorageClass"
WORKLOAD = "kubernetes:apps/v1:StatefulSet"  # a single-node model's pods (serving.workload)
QUOTA = "kubernetes:core/v1:ResourceQuota"
NODE_PATCH = "kubernetes:core/v1:NodePatch"
# pulumi-kubernetes: a Release waits 300 s unless `timeout` is set (provider/pkg/provider/helm_release.go,
# defaultTimeoutSeconds = 300); a Deployment 10 minutes unless `pulumi.com/timeoutSeconds` is
# (provider/pkg/await/deployment.go DefaultDeploymentTimeoutMins = 10; metadata/annotations.go).
HELM_DEFAULT_TIMEOUT_S = 300
DEPLOYMENT_DEFAULT_TIMEOUT_S = 600
TIMEOUT_ANNOTATION = "pulumi.com/timeoutSeconds"


@cache
def synth(stack: str) -> tuple[Registration, ...]:
    return tuple(run_program(stack, read_stack_config(stack_file(stack))).resources)


def of(stack: str, typ: str) -> list[Registration]:
    return [r for r in synth(stack) if r.type == typ]


def by_urn(stack: str) -> dict[str, Registration]:
    return {r.urn: r for r in synth(stack)}


def problems(raw: dict[str, Any], stack: str = "t") -> list[str]:
    with pytest.raises(ConfigError) as err:
        parse(raw, stack=stack)
    return [str(p) for p in err.value.problems]


def containers_of(obj: dict[str, Any]) -> list[dict[str, Any]]:
    return obj["spec"]["template"]["spec"]["containers"]


# --- 1. the API endpoint answers the deployer ---------------------------------------------------------

def test_api_access_is_required_on_aws_with_the_allowed_values() -> None:
    raw = stack_raw("dev")
    del raw["cluster"]["apiAccess"]
    assert problems(raw) == [
        "cluster.apiAccess: is required: 'public-and-private' (the deployer reaches the public endpoint from "
        "cluster.publicAccessCidrs) or 'private' (the deployer runs inside the VPC or a network connected to it; "
        "set cluster.deployerInVpc: true)"]
    raw["cluster"]["apiAccess"] = "public"
    assert problems(raw) == ["cluster.apiAccess: 'public' is not allowed; choose one of: public-and-private, private"]


@pytest.mark.parametrize(("cluster", "expected"), [
    ({"apiAccess": "public-and-private"},
     ["cluster.publicAccessCidrs: is required (non-empty) for apiAccess 'public-and-private': list the networks "
      "the deployer and admins reach the API from"]),
    ({"apiAccess": "private"},
     ["cluster.deployerInVpc: false: apiAccess 'private' answers only inside the VPC; set true when the deployer "
      "runs there (or in a connected network), else use apiAccess 'public-and-private' with publicAccessCidrs"]),
    ({"apiAccess": "private", "deployerInVpc": True, "publicAccessCidrs": ["203.0.113.0/24"]},
     ["cluster.publicAccessCidrs: only applies to apiAccess 'public-and-private'"]),
])
def test_api_access_contradictions_name_the_key(cluster: dict[str, Any], expected: list[str]) -> None:
    raw = stack_raw("dev")
    raw["cluster"] = cluster
    assert problems(raw) == expected


def test_a_stack_without_api_access_exits_2_naming_the_key(tmp_path: Path, capsys) -> None:
    doc = yaml.safe_load(stack_file("dev").read_text())
    del doc["config"]["aifactory:cluster"]["apiAccess"]
    (tmp_path / "Pulumi.x.yaml").write_text(yaml.safe_dump(doc))
    assert cli.main(["validate", "x", "--stacks-dir", str(tmp_path)]) == cli.EXIT_USAGE
    assert "cluster.apiAccess: is required" in capsys.readouterr().err


@pytest.mark.parametrize(("stack", "public", "cidrs"), [
    ("dev", True, ["203.0.113.0/24"]), ("staging", True, ["203.0.113.0/24"]), ("prod", True, ["198.51.100.0/28"])])
def test_shipped_aws_stacks_open_the_endpoint_only_to_their_deployer(stack: str, public: bool,
                                                                     cidrs: list[str]) -> None:
    (eks,) = of(stack, "aws:eks/cluster:Cluster")
    assert eks.inputs["vpcConfig"]["endpointPublicAccess"] is public
    assert eks.inputs["vpcConfig"]["publicAccessCidrs"] == cidrs


# --- 2. tenant quotas admit the tenant's model pods ---------------------------------------------------

def _quota(stack: str, namespace: str) -> dict[str, str]:
    (q,) = [r for r in of(stack, QUOTA) if r.inputs["metadata"]["namespace"] == namespace]
    return q.inputs["spec"]["hard"]


def _cores(q: str) -> float:
    return float(q[:-1]) / 1000 if q.endswith("m") else float(q)


def _gib(q: str) -> float:
    return {"Gi": 1.0, "Mi": 1 / 1024}[q[-2:]] * float(q[:-2])


def test_staging_search_quota_is_what_8_gpus_imply_on_p5_and_admits_llama_70b_at_max_replicas() -> None:
    """p5.48xlarge: 192 vCPUs, 2048 GiB, 8 H100s, so 8 GPUs imply 192 cores and 2048 GiB. Quota admission
    counts limits too: llama-70b (4 GPUs per pod, replicas.max 2) with its Istio sidecar must fit."""
    hard = _quota("staging", "search")
    assert hard == {"requests.nvidia.com/gpu": "8", "requests.cpu": "192", "limits.cpu": "192",
                    "requests.memory": "2048Gi", "limits.memory": "2048Gi"}
    (dep,) = [d for d in of("staging", WORKLOAD) if d.inputs["metadata"]["name"] == "llama-70b"]
    (engine,) = containers_of(dep.inputs)
    istiod = next(r for r in of("staging", RELEASE) if r.inputs["name"] == "istiod")
    sidecar = istiod.inputs["values"]["global"]["proxy"]["resources"]["limits"]
    pods = 2
    cpu = pods * (_cores(engine["resources"]["limits"]["cpu"]) + _cores(sidecar["cpu"]))
    mem = pods * (_gib(engine["resources"]["limits"]["memory"]) + _gib(sidecar["memory"]))
    assert cpu <= _cores(hard["limits.cpu"]) and mem <= _gib(hard["limits.memory"])
    assert (cpu, mem) == (2 * (76 + 1), 2 * (819 + 0.5))  # 80% of half a node, the sidecar's 1 core / 512Mi


def test_onprem_mig_slices_are_quota_d_per_profile_and_analytics_cpu_follows_its_slices() -> None:
    """analytics: gpuQuota 0, classifier scales to 7 slices of 1g.10gb (1/7 GPU each) on dgx-a100 (256 vCPUs,
    1024 GiB, 8 GPUs: 32 cores and 128 GiB per GPU): 7 slices are one GPU's share. ml-platform uses no slice."""
    assert _quota("onprem", "analytics-ai") == {
        "requests.nvidia.com/gpu": "0", "requests.nvidia.com/mig-1g.10gb": "7", "requests.cpu": "32",
        "limits.cpu": "32", "requests.memory": "128Gi", "limits.memory": "128Gi"}
    assert _quota("onprem", "ml-platform")["requests.nvidia.com/mig-1g.10gb"] == "0"


def test_quotas_below_what_the_gpu_quota_implies_are_rejected() -> None:
    raw = stack_raw("staging")
    raw["tenants"]["search"] |= {"cpuQuota": "64", "memoryQuota": "512Gi"}
    raw["tenants"]["support"]["migQuota"] = {"1g.10gb": -1}
    assert problems(raw, "staging") == [
        "tenants.support.migQuota.1g.10gb: expected a slice count (an integer >= 0), got -1",
        "tenants.search.cpuQuota: '64' is less than the 192 cores its GPU quota implies on its pools; pods the GPU "
        "quota admits would be rejected: raise it or remove it (default: derived)",
        "tenants.search.memoryQuota: '512Gi' is less than the 2048Gi its GPU quota implies on its pools; pods the "
        "GPU quota admits would be rejected: raise it or remove it (default: derived)"]
    raw = stack_raw("onprem")
    raw["tenants"]["analytics"]["migQuota"] = {"1g.10gb": 3}
    assert problems(raw, "onprem") == [
        "tenants.analytics.migQuota.1g.10gb: 3 is less than the 7 slices its models can scale to (replicas.max); "
        "raise it to at least 7"]


def test_a_mig_quota_for_a_profile_no_pool_offers_is_kept_not_a_crash() -> None:
    """staging has no MIG pool: a tenant's migQuota for 1g.10gb used to raise KeyError (a traceback) while the
    derived quotas were computed; a quota for a resource no node offers admits nothing and harms nothing."""
    raw = stack_raw("staging")
    raw["tenants"]["support"]["migQuota"] = {"1g.10gb": 2}
    assert parse(raw, stack="staging").tenants["support"].mig_quota == {"1g.10gb": 2}


# --- 3. every claim names a class that exists -----------------------------------------------------------

def _claim_classes(stack: str) -> set[str | None]:
    out: set[str | None] = set()
    for dep in of(stack, WORKLOAD):
        for vol in dep.inputs["spec"]["template"]["spec"].get("volumes", []):
            if "ephemeral" in vol:
                out.add(vol["ephemeral"]["volumeClaimTemplate"]["spec"].get("storageClassName"))
    loki = _named(stack, RELEASE, "loki").inputs["values"]
    assert loki["minio"] == {"enabled": False}  # no demo store, so no MinIO claim
    out |= {loki[t]["persistence"]["storageClass"] for t in ("singleBinary", "write", "backend")}
    kps = _named(stack, RELEASE, "kube-prometheus-stack").inputs["values"]
    out.add(kps["prometheus"]["prometheusSpec"]["storageSpec"]["volumeClaimTemplate"]["spec"]["storageClassName"])
    out.add(kps["alertmanager"]["alertmanagerSpec"]["storage"]["volumeClaimTemplate"]["spec"]["storageClassName"])
    # (claims pre-bound to a kit PersistentVolume, the node-local model caches on NVMe pools, name class "" on
    # purpose: a static binding needs no class and no provisioner)
    out |= {c.inputs["spec"].get("storageClassName") for c in of(stack, "kubernetes:core/v1:PersistentVolumeClaim")
            if "volumeName" not in c.inputs["spec"]}
    return out


@pytest.mark.parametrize("stack", ["dev", "staging", "prod"])
def test_aws_claims_name_the_kit_class_which_is_the_default_and_follows_ebs_csi(stack: str) -> None:
    """EKS 1.30+ has no default StorageClass (EKS user guide, "Storage classes"): a claim without a class stays
    Pending. The general class exists, is the default for chart claims that cannot name one; the model caches' fast
    class (issue 45: too fast for a 1 GiB claim) is no default; both wait for EBS CSI."""
    sc, fast = of(stack, STORAGE_CLASS)
    assert (sc.inputs["metadata"]["name"], fast.inputs["metadata"]["name"]) == ("aifactory-gp3", "aifactory-gp3-fast")
    assert sc.inputs["metadata"]["annotations"] == {"storageclass.kubernetes.io/is-default-class": "true"}
    assert "annotations" not in fast.inputs["metadata"]
    assert _claim_classes(stack) <= {"aifactory-gp3", "aifactory-gp3-fast"}
    assert "aifactory-gp3" in _claim_classes(stack)
    ebs = next(a for a in of(stack, ADDON) if a.inputs["addonName"] == "aws-ebs-csi-driver")
    assert ebs.urn in sc.dependencies and ebs.urn in fast.dependencies


def test_existing_cluster_claims_name_target_storage_class_which_is_required() -> None:
    assert _claim_classes("onprem") == {"ceph-rbd"}
    raw = stack_raw("onprem")
    del raw["target"]["storageClass"]
    assert problems(raw) == [
        "target.storageClass: is required for provider 'existing': name the StorageClass every claim the kit "
        "creates uses (model caches, Loki, Prometheus); `kubectl get storageclass` lists them"]


# --- 4. platform releases wait for nodes, DNS and storage, with timeouts that fit ----------------------

@pytest.mark.parametrize("stack", ["dev", "staging", "prod"])
def test_every_release_waits_for_system_nodes_coredns_ebs_csi_and_the_storage_class(stack: str) -> None:
    addons = {a.inputs["addonName"]: a.urn for a in of(stack, ADDON)}
    (system,) = [n for n in of(stack, NODE_GROUP) if n.name.endswith("-system-ng")]
    sc = of(stack, STORAGE_CLASS)[0]  # the general class the releases' claims name
    need = {system.urn, addons["coredns"], addons["aws-ebs-csi-driver"], sc.urn}
    missing = {r.inputs["name"]: sorted(need - set(r.dependencies)) for r in of(stack, RELEASE)
               if not need <= set(r.dependencies) and r.inputs["name"] != "cluster-autoscaler"}
    assert missing == {}


@pytest.mark.parametrize("stack", ["dev", "staging", "prod", "onprem"])
def test_every_release_has_a_timeout_longer_than_helms_default(stack: str) -> None:
    short = {r.inputs["name"]: r.inputs.get("timeout") for r in of(stack, RELEASE)
             if (r.inputs.get("timeout") or HELM_DEFAULT_TIMEOUT_S) <= HELM_DEFAULT_TIMEOUT_S}
    assert short == {}
    slow = {r.inputs["name"]: r.inputs["timeout"] for r in of("staging", RELEASE)
            if r.inputs["name"] in ("loki", "kube-prometheus-stack", "gpu-operator")}
    assert slow == {"loki": 1200, "kube-prometheus-stack": 1200, "gpu-operator": 1200}


def test_models_wait_for_their_own_gpu_pool() -> None:
    pools = {n.name: n.urn for n in of("staging", NODE_GROUP)}
    (dep,) = [d for d in of("staging", WORKLOAD) if d.inputs["metadata"]["name"] == "llama-70b"]
    assert pools["aifactory-staging-h100-ng"] in dep.dependencies


# --- 5. the engine waits as long as a model may take to start ------------------------------------------

def test_model_deployments_are_awaited_for_their_start_up_budget_not_ten_minutes() -> None:
    """staging llama-70b: hf:// (the engine downloads inside its start-up budget, default 1800 s), replicas.max 2
    rolled one at a time: 2 x (600 s image pull + 1800 s probe) = 4800 s. llama-8b-trt: s3:// synced first by
    an init container (up to the budget again), 8 replicas: 8 x (600 + 1800 + 1800) = 33600 s."""
    deps = {d.inputs["metadata"]["name"]: d.inputs for d in of("staging", WORKLOAD)
            if "model-" in d.name}
    timeouts = {n: int(d["metadata"]["annotations"][TIMEOUT_ANNOTATION]) for n, d in deps.items()}
    assert timeouts == {"llama-70b": 4800, "llama-8b-trt": 33600}
    for name, d in deps.items():
        probe = containers_of(d)[0]["startupProbe"]
        budget = probe.get("initialDelaySeconds", 0) + probe["periodSeconds"] * probe["failureThreshold"]
        assert budget == 1800 and timeouts[name] >= budget + 600 > DEPLOYMENT_DEFAULT_TIMEOUT_S


def test_a_slow_model_pod_is_not_reported_as_a_stuck_rollout() -> None:
    """A StatefulSet has no progress deadline (apps/v1 StatefulSetSpec; a Deployment's was 600 s by default): a
    stuck pod is reported when pulumi-kubernetes' await times out (provider/pkg/await/statefulset.go). One model pod
    may take its image pull (600 s) plus its start-up budget (1800 s), plus the budget again for an s3:// sync, and a
    rolling update replaces up to replicas.max pods one at a time: the await allows each its whole start."""
    cfg = stack_config("staging")
    sets = {d.inputs["metadata"]["name"]: d.inputs for d in of("staging", WORKLOAD) if "model-" in d.name}
    assert not [n for n, d in sets.items() if "progressDeadlineSeconds" in d["spec"]]
    assert {n: int(d["metadata"]["annotations"]["pulumi.com/timeoutSeconds"]) for n, d in sets.items()} == {
        "llama-70b": cfg.models["llama-70b"].replicas.max * (600 + 1800),
        "llama-8b-trt": cfg.models["llama-8b-trt"].replicas.max * (600 + 1800 + 1800)}


def test_models_on_a_capacity_block_are_not_awaited_outside_its_window() -> None:
    """prod assistant-fast runs on h100-block (a capacity block, no nodes outside its window): `pulumi up` must
    not hang on it; the pods start when the scheduled action scales the pool up."""
    annotations = {d.inputs["metadata"]["name"]: d.inputs["metadata"]["annotations"]
                   for d in of("prod", WORKLOAD) if "model-" in d.name}
    assert annotations["assistant-fast"] == {TIMEOUT_ANNOTATION: str(4 * (600 + 1800 + 1800)),
                                             "pulumi.com/skipAwait": "true"}
    assert "pulumi.com/skipAwait" not in annotations["embed-rerank"]


def test_a_models_own_start_up_budget_drives_its_probe_and_its_await() -> None:
    values = read_stack_config(stack_file("dev"))
    models = json.loads(values["aifactory:models"])
    models["chat"]["startupBudgetSeconds"] = 3605  # rounded up to whole probe periods: 361 x 10 s
    values["aifactory:models"] = json.dumps(models)
    (dep,) = [r for r in run_program("dev", values).resources if r.type == WORKLOAD and "model-" in r.name]
    probe = containers_of(dep.inputs)[0]["startupProbe"]
    assert (probe["periodSeconds"], probe["failureThreshold"]) == (10, 361)
    assert dep.inputs["metadata"]["annotations"][TIMEOUT_ANNOTATION] == str(2 * (600 + 3610))


# --- 6. onprem MIG layouts reach the pool's nodes --------------------------------------------------------

def test_onprem_mig_pool_nodes_are_labelled_with_their_layout() -> None:
    patches = {p.inputs["metadata"]["name"]: p.inputs["metadata"]["labels"] for p in of("onprem", NODE_PATCH)}
    assert patches == {"dgx-a100-01": {"aifactory.io/pool": "a100-mig", "nvidia.com/mig.config": "all-1g.10gb"}}
    assert of("dev", NODE_PATCH) == []  # EKS node groups carry the label themselves


def test_onprem_mig_pool_without_nodes_is_a_precondition_error() -> None:
    raw = stack_raw("onprem")
    del raw["nodePools"]["a100-mig"]["nodes"]
    assert problems(raw) == [
        "nodePools.a100-mig.nodes: is required for a MIG pool on provider 'existing': list the pool's node names "
        "(kubectl get nodes -l aifactory.io/pool=a100-mig); the kit labels them nvidia.com/mig.config=all-1g.10gb "
        "so the GPU operator's MIG manager partitions them"]


# --- 7. metrics-server feeds the gateway's CPU HPA --------------------------------------------------------

@pytest.mark.parametrize("stack", ["dev", "staging", "prod", "onprem"])
def test_metrics_server_is_installed(stack: str) -> None:
    (ms,) = [r for r in of(stack, RELEASE) if r.inputs["name"] == "metrics-server"]
    assert (ms.inputs["chart"], ms.inputs["version"], ms.inputs["namespace"]) == \
        ("metrics-server", "3.13.1", "aifactory-system")
    assert ms.inputs["repositoryOpts"] == {"repo": "https://kubernetes-sigs.github.io/metrics-server"}
    assert ms.inputs["values"]["replicas"] == 2


def test_an_existing_cluster_with_its_own_metrics_server_gets_none() -> None:
    values = read_stack_config(stack_file("onprem"))
    target = json.loads(values["aifactory:target"]) | {"installMetricsServer": False}
    values["aifactory:target"] = json.dumps(target)
    assert [r for r in run_program("onprem", values).resources
            if r.type == RELEASE and r.inputs["name"] == "metrics-server"] == []


# --- 8. capacity blocks -------------------------------------------------------------------------------------

def test_capacity_block_window_is_required_and_must_outlast_the_drain() -> None:
    raw = stack_raw("prod")
    block = raw["nodePools"]["h100-block"]["capacity"]
    block["endTime"] = "2026-12-01T12:15:00Z"
    assert problems(raw) == [
        "nodePools.h100-block.capacity.endTime: '2026-12-01T12:15:00Z' must be more than 60 minutes after "
        "startTime '2026-12-01T11:30:00Z' (the pool scales to zero drainMinutes=60 before the block ends)"]
    block["startTime"] = "1 December"
    del block["endTime"]
    assert problems(raw) == [
        "nodePools.h100-block.capacity.startTime: '1 December' is not a UTC time such as 2026-12-01T11:30:00Z",
        "nodePools.h100-block.capacity.endTime: is required for capacity type 'capacity-block': the block's end "
        "(UTC, e.g. 2026-12-01T11:30:00Z, as `aws ec2 describe-capacity-reservations` shows it)"]


def test_capacity_block_drain_is_more_than_thirty_minutes_and_configurable() -> None:
    """EKS user guide, "Capacity Blocks for ML" (managed node groups): scale the node group to zero *more than*
    30 minutes before the block's end time; EC2 begins terminating the block's instances 30 minutes before it."""
    raw = stack_raw("prod")
    raw["nodePools"]["h100-block"]["capacity"]["drainMinutes"] = 30
    assert problems(raw) == [
        "nodePools.h100-block.capacity.drainMinutes: 30 must be more than 30: EKS asks to scale a capacity-block "
        "node group to zero more than 30 minutes before the block ends"]
    raw["nodePools"]["h100-block"]["capacity"]["drainMinutes"] = 90
    assert parse(raw, stack="t").node_pools["h100-block"].capacity.drain_minutes == 90
    raw = stack_raw("prod")
    raw["nodePools"]["h200"]["capacity"] = {"type": "on-demand", "drainMinutes": 60}
    assert "nodePools.h200.capacity.drainMinutes: only applies to capacity type 'capacity-block'" in problems(raw)


def _block_spec(**capacity: Any) -> Any:
    from components.aws.node_pool import pool_spec
    return pool_spec("b", {"cluster_name": "c", "vpc_id": "v", "cluster_security_group_id": "sg",
                           "availability_zones": ["us-east-1a"], "subnet_ids": ["s"],
                           "instance_type": "p5.48xlarge", "fabric": "efa", "min_size": 0, "max_size": 4,
                           "capacity": {"type": "capacity-block", "reservation_id": "cr-0a1b2c3d4e5f60718",
                                        "start_time": "2026-12-01T11:30:00Z", "end_time": "2026-12-02T00:00:00Z",
                                        **capacity}})


def _utc(value: str) -> Any:
    import datetime
    return datetime.datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.UTC)


def test_capacity_block_desired_size_is_left_to_the_schedule() -> None:
    from components.aws import nodes
    spec = _block_spec()
    before = _utc("2026-11-22T00:00:00Z")
    assert nodes.block_schedule(spec, now=before) == [("block-start", "2026-12-01T11:30:00Z", 4),
                                                      ("block-end", "2026-12-01T23:00:00Z", 0)]
    assert nodes.block_schedule(_block_spec(drain_minutes=45), now=before)[1] == \
        ("block-end", "2026-12-01T23:15:00Z", 0)
    assert nodes._autoscaled_options(spec).ignore_changes == ["scalingConfig.desiredSize"]


def test_capacity_block_schedules_only_what_is_still_ahead() -> None:
    """AWS rejects a one-time scheduled action whose start time is in the past, and deletes a one-time action
    after it runs (EC2 Auto Scaling API reference, PutScheduledUpdateGroupAction, StartTime: "If you try to
    schedule your action in the past, Amazon EC2 Auto Scaling returns an error message"; user guide, "Scheduled
    scaling"). A group created inside the window starts at the reserved count; after the drain, at 0."""
    from components.aws import nodes
    spec = _block_spec()
    assert nodes.block_schedule(spec, now=_utc("2026-12-01T11:30:00Z")) == [("block-end", "2026-12-01T23:00:00Z", 0)]
    assert nodes.block_desired_size(spec, now=_utc("2026-12-01T11:30:00Z")) == 4
    assert nodes.block_desired_size(spec, now=_utc("2026-12-01T11:29:59Z")) == 0
    assert nodes.block_schedule(spec, now=_utc("2026-12-01T23:00:00Z")) == []
    assert nodes.block_desired_size(spec, now=_utc("2026-12-01T23:00:00Z")) == 0


def _prod_at(now: str) -> list[Registration]:
    from infra.program import program
    return run_program("prod", read_stack_config(stack_file("prod")), lambda cfg: program(cfg, now=now)).resources


def test_prod_after_the_block_started_creates_no_past_action_and_retains_the_ones_that_ran() -> None:
    """prod's block: 2026-12-01T11:30Z to 2026-12-15T11:30Z. A refresh+up, a fresh stack or a node-group
    replacement after the start must not ask AWS for the start action again; the drain (60 minutes before the
    end) is still ahead. Pulumi never deletes an action itself: one that ran is already gone on AWS."""
    schedules = [r for r in _prod_at("2026-12-03T00:00:00Z") if r.type == "aws:autoscaling/schedule:Schedule"]
    assert [(r.name, r.inputs["startTime"], r.inputs["desiredCapacity"], r.retain_on_delete) for r in schedules] == [
        ("aifactory-prod-h100-block-block-end", "2026-12-15T10:30:00Z", 0, True)]
    (ng,) = [r for r in _prod_at("2026-12-03T00:00:00Z") if r.type == "aws:eks/nodeGroup:NodeGroup"
             and r.name == "aifactory-prod-h100-block-ng"]
    assert ng.inputs["scalingConfig"] == {"minSize": 0, "maxSize": ng.inputs["scalingConfig"]["maxSize"],
                                          "desiredSize": ng.inputs["scalingConfig"]["maxSize"]}
    before = sorted((r.name, r.inputs["startTime"]) for r in _prod_at("2026-11-22T00:00:00Z")
                    if r.type == "aws:autoscaling/schedule:Schedule")
    assert before == [("aifactory-prod-h100-block-block-end", "2026-12-15T10:30:00Z"),
                      ("aifactory-prod-h100-block-block-start", "2026-12-01T11:30:00Z")]
    assert [r for r in _prod_at("2026-12-15T10:30:00Z") if r.type == "aws:autoscaling/schedule:Schedule"] == []


def test_capacity_block_pool_is_not_in_autoscaler_discovery() -> None:
    """cluster-autoscaler discovers the Auto Scaling groups that carry every tag of its
    --node-group-auto-discovery=asg:tag=... list (cluster-autoscaler AWS cloudprovider README, "Auto-Discovery
    Setup"; the chart builds it from autoDiscovery.tags) and builds a scale-from-zero node from the node-template
    tags: on a block pool it would launch into the block outside its window and scale the pool back up after the
    drain. EKS itself tags EVERY managed node group's ASG with k8s.io/cluster-autoscaler/enabled and
    k8s.io/cluster-autoscaler/<cluster> (EKS user guide, "Managed node groups"), and copies no node group tag to
    it: what the autoscaler sees is those two plus the aws:autoscaling/tag:Tag resources of the stack."""
    resources = _prod_at("2026-11-22T00:00:00Z")
    cluster = "aifactory-prod"
    groups = [r.name.removesuffix("-ng") for r in resources if r.type == "aws:eks/nodeGroup:NodeGroup"]
    seen = {g: {"k8s.io/cluster-autoscaler/enabled": "true", f"k8s.io/cluster-autoscaler/{cluster}": "owned"}
            for g in groups}
    for r in resources:
        if r.type == "aws:autoscaling/tag:Tag":
            group = next(g for g in groups if r.name.startswith(f"{g}-asg-"))
            seen[group][r.inputs["tag"]["key"]] = r.inputs["tag"]["value"]
    (release,) = [r for r in resources if r.type == "kubernetes:helm.sh/v3:Release"
                  and r.inputs.get("name") == "cluster-autoscaler"]
    wanted = release.inputs["values"]["autoDiscovery"]["tags"]
    discovered = sorted(g for g in groups if all(t in seen[g] for t in wanted))
    assert "aifactory-prod-h100-block" in groups and "aifactory-prod-h100-block" not in discovered
    assert discovered == sorted(g for g in groups if g != "aifactory-prod-h100-block")
    assert not [k for k in seen["aifactory-prod-h100-block"] if "node-template" in k]
    # and its IAM role may not resize the block's group even by hand: every condition tag must match
    (policy,) = [r for r in resources if r.type == "aws:iam/rolePolicy:RolePolicy" and "autoscaler" in r.name]
    condition = json.loads(policy.inputs["policy"])["Statement"][1]["Condition"]["StringEquals"]
    may_scale = sorted(g for g in groups if all(seen[g].get(k.removeprefix("aws:ResourceTag/")) == v
                                               for k, v in condition.items()))
    assert may_scale == discovered


# --- 10. destroy order: custom resources record the controllers they need --------------------------------

def _named(stack: str, typ: str, name: str) -> Registration:
    return next(r for r in synth(stack) if r.type == typ and r.inputs.get("name") == name)


def test_model_custom_resources_record_keda_lws_prometheus_operator_and_istio() -> None:
    """The engine creates children after their parent, but `pulumi destroy` deletes in reverse recorded
    dependency order only: a ScaledObject, ServiceMonitor or LeaderWorkerSet that records no dependency on its
    controller's release may outlive its CRD's release and be stuck (or orphaned) on destroy."""
    releases = {r.inputs["name"]: r.urn for r in of("prod", RELEASE)}
    kinds = {"ScaledObject": "keda", "ServiceMonitor": "kube-prometheus-stack", "LeaderWorkerSet": "lws"}
    seen = set()
    for r in synth("prod"):
        kind = r.inputs.get("kind")
        if r.custom and "ModelDeployment" in r.urn and kind in kinds:
            assert releases[kinds[kind]] in r.dependencies, r.name
            if kind == "LeaderWorkerSet":  # its pods get their sidecar from istiod's injection webhook
                assert releases["istiod"] in r.dependencies, r.name
            seen.add(kind)
    assert seen == set(kinds)
    for name in ("keda", "lws"):  # ServingControllers' releases record the namespace they install into
        assert any(d.endswith("::platform-system-ns") for d in _named("prod", RELEASE, name).dependencies), name
