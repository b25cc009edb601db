"""Issue #16: serving that runs as configured on the real fabric, and cold-starts fast.

Multi-node replicas under STRICT mTLS, pre-quantized checkpoints, EFA/InfiniBand really used (image, env, a
start-up guard over NCCL's own log), all InfiniBand rails, locked memory on the node, NVMe model caches and load
time vs start-up budget, and the engine features (expert parallelism, KV offload, prefix caching)."""

from __future__ import annotations

import base64
import dataclasses
import email
import json
import os
import re
import shlex
import shutil
import signal
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from components.aws.node_pool import GpuNodePool
from components.k8s import serving, storage, tenancy
from components.k8s.serving import cache_volume, model_cold_start, vllm_args, workload
from infra.component_args import tenancy_args
from infra.config import ConfigError, PlatformConfig, parse
from tests.support.stacks import stack_config, stack_raw
from tests.unit.test_aws_node_pool import LT, one, pool_args, register

RECORDINGS = Path(__file__).resolve().parents[1] / "node" / "recordings"
DGX_H100_HCAS = ["mlx5_0", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_9", "mlx5_10", "mlx5_11"]


def templates(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    lwt = obj["spec"]["leaderWorkerTemplate"]
    return {"leader": lwt["leaderTemplate"], "worker": lwt["workerTemplate"]}


def engine(template: dict[str, Any]) -> dict[str, Any]:
    return template["spec"]["containers"][0]


def env(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container["env"] if "value" in e}


def problems(raw: dict[str, Any], stack: str = "unit") -> list[str]:
    with pytest.raises(ConfigError) as err:
        parse(raw, stack=stack)
    return [f"{p.path}: {p.message}" for p in err.value.problems]


def onprem_with(**model: Any) -> dict[str, Any]:
    raw = stack_raw("onprem")
    return {**raw, "models": {**raw["models"], "x": {"engine": "vllm", "tenant": "ml-platform", "pool": "h100-ib",
                                                      "model": "org/x", "toolCallParser": "none",
                                                      "uri": "pvc://model-store/x", **model}}}


# --- 1. multi-node replicas under STRICT mTLS -----------------------------------------------------

# Every `ray start` option that sets a listening port (Ray docs, "Cluster Management CLI" / ray start; Ray
# python/ray/scripts/scripts.py): unset, each is a random port (workers: 10002-19999).
RAY_START_PORT_OPTIONS = ("--port", "--node-manager-port", "--object-manager-port", "--runtime-env-agent-port",
                          "--dashboard-agent-grpc-port", "--dashboard-agent-listen-port", "--metrics-export-port",
                          "--min-worker-port", "--max-worker-port", "--ray-client-server-port", "--dashboard-port")
HEAD_ONLY = {"--port", "--ray-client-server-port", "--dashboard-port"}


def _ray_flags(command: list[str]) -> dict[str, str]:
    """`ray start` options the multi-node-serving.sh call passes on (vllm-project/vllm
    examples/online_serving/multi-node-serving.sh: --ray_port=N becomes `ray start --head --port=N`; every other
    unknown argument is forwarded to `ray start`)."""
    start = shlex.split(command[-1].split(" && exec ")[0])
    flags = dict(a.split("=", 1) for a in start[2:] if a.startswith("--"))
    if "--ray_port" in flags:
        flags["--port"] = flags.pop("--ray_port")
    return flags


@pytest.mark.parametrize(("stack", "model"), [("prod", "deep-research"), ("onprem", "llama-405b")])
def test_every_port_the_leader_and_workers_open_is_pinned_and_left_out_of_the_sidecar(stack: str, model: str) -> None:
    cfg = stack_config(stack)
    lws = workload(cfg, cfg.models[model])
    gcs = _ray_flags(engine(templates(lws)["leader"])["command"])["--port"]
    for role, t in templates(lws).items():
        flags = _ray_flags(engine(t)["command"])
        want = set(RAY_START_PORT_OPTIONS) - (set() if role == "leader" else HEAD_ONLY)
        if role == "worker":  # the port it dials (the leader's GCS), not one it listens on
            assert flags.pop("--port") == gcs
        if role == "leader":  # the dashboard head is not started at all, so it opens no port
            assert flags.pop("--include-dashboard") == "false"
            want.discard("--dashboard-port")
        # the script's own options (not passed on to `ray start`)
        assert set(flags) - {"--ray_cluster_size", "--ray_address", "--ray_init_timeout"} == want, role
        pinned = {int(v) for k, v in flags.items() if k in want and k != "--max-worker-port"}
        low, high = int(flags["--min-worker-port"]), int(flags["--max-worker-port"])
        pinned |= set(range(low, high + 1))
        vllm_port = int(env(engine(t))["VLLM_PORT"])  # vLLM's get_open_port() counts up from VLLM_PORT
        pinned |= set(range(vllm_port, vllm_port + 16))
        ann = t["metadata"]["annotations"]
        # inbound: the sidecar (and STRICT mTLS) keeps only the model's HTTP port; every peer port bypasses it,
        # ephemeral NCCL/gloo listeners included
        assert ann["traffic.sidecar.istio.io/includeInboundPorts"] == "8000"
        assert 8000 not in pinned
        # outbound: every pinned peer port bypasses the sender's sidecar
        assert pinned <= {int(p) for p in ann["traffic.sidecar.istio.io/excludeOutboundPorts"].split(",")}, role
    # what stays outside mTLS is reachable only from the same model's pods (default-deny + allow-peers)
    tenant = cfg.tenant_of(cfg.models[model])
    spec = tenancy.tenancy_spec("tenancy", tenancy_args(cfg))
    peers = {p["metadata"]["name"]: p for p in tenancy.network_policies(spec, tenant)}[f"allow-peers-{model}"]
    same_model = [{"podSelector": {"matchLabels": {"aifactory.io/model": model}}}]
    assert peers["spec"]["podSelector"] == {"matchLabels": {"aifactory.io/model": model}}
    assert peers["spec"]["ingress"] == [{"from": same_model}]


def test_single_node_pods_keep_full_sidecar_capture() -> None:
    cfg = stack_config("prod")
    dep = workload(cfg, cfg.models["assistant-batch"])
    annotations = dep["spec"]["template"]["metadata"]["annotations"]
    assert not [a for a in annotations if a.startswith("traffic.sidecar.istio.io/")]


# --- 2. pre-quantized checkpoints -----------------------------------------------------------------


def test_a_pre_quantized_fp8_checkpoint_gets_no_quantization_flag() -> None:
    model = stack_config("prod").models["deep-research"]
    assert (model.quantization, model.quantized_checkpoint) == ("fp8", True)
    assert "--quantization" not in vllm_args(model)


@pytest.mark.parametrize(("pool", "quantization", "message"), [
    # FP8 W8A8 needs compute capability 8.9+ (vLLM v0.11.0 docs/features/quantization/fp8.md); A100 is 8.0
    ("a100-mig", "fp8", "models.x.quantization: 'fp8' needs compute capability 8.9 or newer (Ada Lovelace, Hopper, "
                        "Blackwell); pool 'a100-mig' has NVIDIA A100-SXM4-80GB (Ampere, 8.0): use a Hopper pool, or "
                        "an awq/gptq/int8 checkpoint"),
    ("h100-ib", {"method": "awq", "checkpoint": "load-time"},
     "models.x.quantization.checkpoint: 'load-time' is not possible for 'awq': vLLM quantizes on load only to fp8; "
     "awq needs a pre-quantized checkpoint"),
])
def test_quantization_is_validated_against_method_and_gpu_generation(pool: str, quantization: Any,
                                                                     message: str) -> None:
    extra = {"migProfile": "1g.10gb"} if pool == "a100-mig" else {}
    assert message in problems(onprem_with(pool=pool, quantization=quantization, **extra), "onprem")


def test_triton_engines_are_always_pre_quantized() -> None:
    raw = stack_raw("prod")
    fast = {**raw["models"]["assistant-fast"], "quantization": {"method": "fp8", "checkpoint": "load-time"}}
    assert ("models.assistant-fast.quantization.checkpoint: 'load-time' is not possible with engine 'triton': it "
            "does not quantize fp8 weights as it loads them; use checkpoint: pre-quantized") in problems(
        {**raw, "models": {**raw["models"], "assistant-fast": fast}}, "prod")


# --- 3. EFA and InfiniBand really used --------------------------------------------------------------


def test_efa_multi_node_pods_run_the_efa_image_with_nccl_and_libfabric_env() -> None:
    cfg = stack_config("prod")
    for role, t in templates(workload(cfg, cfg.models["deep-research"])).items():
        c = engine(t)
        # AWS's vLLM DLC: vllm/vllm-openai v0.27.1 + EFA installer 1.47.0 (aws/deep-learning-containers
        # .github/config/image/vllm/ec2-ubuntu.yml, docker/vllm/Dockerfile), in the stack's region
        assert c["image"] == "763104351884.dkr.ecr.us-east-1.amazonaws.com/vllm:0.27-gpu-py312-ec2"
        assert {k: v for k, v in env(c).items() if k.startswith(("NCCL_", "FI_"))} == {
            "NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET", "NCCL_SOCKET_IFNAME": "eth0",
            "FI_PROVIDER": "efa", "FI_EFA_USE_DEVICE_RDMA": "1"}, role
    single = workload(cfg, cfg.models["assistant-batch"])["spec"]["template"]["spec"]["containers"][0]
    assert single["image"] == "vllm/vllm-openai:v0.33.0"  # NVLink only: the stock image


def test_a_pool_can_name_its_own_vllm_image() -> None:
    raw = stack_raw("prod")
    pools = {**raw["nodePools"], "h200": {**raw["nodePools"]["h200"], "vllmImage": "registry.example.com/vllm:efa-1"}}
    cfg = stack_config("prod", nodePools=pools)
    assert {engine(t)["image"] for t in templates(workload(cfg, cfg.models["deep-research"])).values()} == {
        "registry.example.com/vllm:efa-1"}
    assert ("nodePools.h200.vllmImage: 'vllm' is not an image reference with a tag or digest (registry/repo:tag)"
            in problems({**raw, "nodePools": {**pools, "h200": {**pools["h200"], "vllmImage": "vllm"}}}, "prod"))


def test_infiniband_pods_name_every_rail_for_nccl() -> None:
    cfg = stack_config("onprem")
    for t in templates(workload(cfg, cfg.models["llama-405b"])).values():
        c = engine(t)
        assert env(c)["NCCL_IB_HCA"] == "=" + ",".join(DGX_H100_HCAS)  # '=': exact names, mlx5_1 != mlx5_10
        assert c["image"] == "vllm/vllm-openai:v0.33.0"  # NCCL's own IB transport: libibverbs is in the image


def _guard(fabric: str, lines: str) -> subprocess.CompletedProcess[str]:
    """The leader's real guard (taken from the rendered command) around a child that prints `lines`."""
    cfg = stack_config("prod")
    serve = engine(templates(workload(cfg, cfg.models["deep-research"]))["leader"])["command"][-1]
    argv = shlex.split(serve.split(" && exec ")[1])
    assert argv[:2] == ["python3", "-c"] and argv[4] == "--"
    child = [sys.executable, "-c", "import sys; sys.stdout.write(sys.stdin.read())"]
    return subprocess.run([sys.executable, "-c", argv[2], fabric, "--", *child], input=lines, capture_output=True,
                          text=True, timeout=60, check=False)


READY = "INFO:     Application startup complete.\n"


@pytest.mark.parametrize(("fabric", "recording", "rc", "message"), [
    # NCCL INFO logs of nccl-tests runs on the fabrics (tests/node/recordings/README.md, "NCCL runs")
    ("efa", "p5.48xlarge/healthy", 0, "aifactory nccl-guard: NCCL uses network Libfabric "
                                      "(Libfabric (aws-ofi-nccl) with provider efa expected)"),
    ("efa", "p5.48xlarge/nccl-socket", 3, "aifactory nccl-guard: FATAL: NCCL uses network 'Socket', expected "
                                          "Libfabric (aws-ofi-nccl) with provider efa: cross-node traffic is not on "
                                          "the efa fabric; stopping the engine"),
    ("infiniband", "dgx-h100/healthy", 0, "aifactory nccl-guard: NCCL uses network IB (IB expected)"),
    ("infiniband", "p5.48xlarge/healthy", 3, "aifactory nccl-guard: FATAL: NCCL uses network 'Libfabric', "
                                             "expected IB"),
])
def test_the_leader_stops_loudly_when_nccl_does_not_use_the_fabric(fabric: str, recording: str, rc: int,
                                                                   message: str) -> None:
    log = (RECORDINGS / recording / "nccl-all-reduce.txt").read_text()
    done = _guard(fabric, log + READY)
    assert done.returncode == rc
    assert message in done.stdout + done.stderr
    if rc == 0:
        assert done.stdout.startswith(log)  # the engine's output passes through unchanged


@pytest.mark.parametrize(("fabric", "lines", "rc"), [
    # aws-ofi-nccl 1.x: "Selected Provider is %s (found %d nics)"; current: "Selected provider is %s, fabric is %s
    # (found %d nics)" (nccl_net_ofi_query_provider_capabilities): both name the provider the same way
    ("efa", ["NCCL INFO NET/OFI Selected provider is tcp, fabric is 172.31.0.0/16 (found 1 nics)",
             "NCCL INFO Using network Libfabric"], 3),
    ("efa", ["NCCL INFO NET/OFI Selected provider is efa, fabric is efa-direct (found 32 nics)",
             "NCCL INFO Using network Libfabric"], 0),
    ("efa", ["NCCL INFO NET/OFI Selected Provider is efa (found 32 nics)", "NCCL INFO Using network AWS Libfabric"], 0),
    # NCCL's verbs transport registers as IBext when the SHARP collective plugin is installed
    ("infiniband", ["NCCL INFO Using network IBext"], 0),
])
def test_the_guard_reads_both_aws_ofi_nccl_provider_lines_and_ibext(fabric: str, lines: list[str], rc: int) -> None:
    done = _guard(fabric, "".join(f"node-0:1:1 [0] {line}\n" for line in lines) + READY)
    assert done.returncode == rc, done.stderr


def test_the_leader_stops_when_nccl_printed_no_network_line() -> None:
    done = _guard("efa", "INFO: loading weights\n" + READY)
    assert done.returncode == 3
    assert "printed no 'Using network' line (NCCL_DEBUG=INFO unset?)" in done.stderr


# --- 4. InfiniBand rails -----------------------------------------------------------------------------


def test_one_of_eight_rails_is_refused() -> None:
    raw = stack_raw("onprem")
    assert ('infiniband.interfaces: ["ibs1f0"] uses 1 of the 8 InfiniBand rails of dgx-h100: cross-node traffic '
            "would get 1/8 of the bandwidth; remove it for the catalog's rails: ibp24s0, ibp64s0, ibp79s0, ibp94s0, "
            "ibp154s0, ibp192s0, ibp206s0, ibp220s0") in problems(
        {**raw, "infiniband": {**raw["infiniband"], "interfaces": ["ibs1f0"]}}, "onprem")


# --- 5. locked memory ---------------------------------------------------------------------------------


def _user_data(instance_type: str, **extra: Any) -> email.message.Message:
    res = register(lambda: GpuNodePool("gpu", pool_args(instance_type, **extra)))
    return email.message_from_string(base64.b64decode(one(res, LT).inputs["userData"]).decode())


def test_efa_nodes_raise_containerds_memlock_without_adding_capabilities() -> None:
    parts = _user_data("p5.48xlarge", fabric="efa").get_payload()
    scripts = [p.get_payload() for p in parts if p.get_content_type() == "text/x-shellscript"]
    (memlock,) = [s for s in scripts if "LimitMEMLOCK" in s]
    assert "printf '[Service]\\nLimitMEMLOCK=infinity\\n' > " \
           "/etc/systemd/system/containerd.service.d/90-aifactory-memlock.conf" in memlock
    assert memlock.index("systemctl daemon-reload") < memlock.index("systemctl try-restart containerd.service")
    plain = _user_data("g6e.12xlarge").get_payload()
    assert not [p for p in plain if "LimitMEMLOCK" in p.get_payload()]


# --- 6. cold start -------------------------------------------------------------------------------------


def _node_config(msg: email.message.Message) -> dict[str, Any]:
    part = next(p for p in msg.get_payload() if p.get_content_type() == "application/node.eks.aws")
    return json.loads(part.get_payload().removeprefix("---\n"))


def test_nvme_types_raid0_their_instance_store_and_others_do_not() -> None:
    # nodeadm NodeConfig spec.instance.localStorage.strategy RAID0 (AL2023 nodeadm API)
    assert _node_config(_user_data("p5en.48xlarge", fabric="efa"))["spec"]["instance"] == {
        "localStorage": {"strategy": "RAID0"}}
    assert "instance" not in _node_config(_user_data("g6e.12xlarge"))["spec"]


def test_model_caches_on_nvme_types_are_one_node_local_copy_shared_by_the_nodes_pods() -> None:
    cfg = stack_config("prod")
    model = cfg.models["assistant-batch"]  # TP 4 on 8-GPU p5en nodes: two pods per node, one download
    assert cache_volume(cfg, model) == {"name": "model-cache",
                                        "persistentVolumeClaim": {"claimName": "assistant-batch-node-cache-200gi"}}
    objs = {o["kind"]: o for o in serving.model_objects(cfg, model)}
    pv, pvc = objs["PersistentVolume"], objs["PersistentVolumeClaim"]
    # nodeadm's RAID0 array is mounted at /mnt/k8s-disks/0 (LocalStorageOptions.MountPath default /mnt/k8s-disks/)
    assert pv["spec"]["hostPath"] == {"path": "/mnt/k8s-disks/0/aifactory-models/assistant/assistant-batch",
                                      "type": "Directory"}
    assert pv["spec"]["claimRef"] == {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "namespace": "assistant",
                                      "name": "assistant-batch-node-cache-200gi"}
    assert (pvc["metadata"]["namespace"], pvc["spec"]["volumeName"], pvc["spec"]["storageClassName"]) == (
        "assistant", pv["metadata"]["name"], "")
    # tenant pods mount a claim, never a host path (Pod Security `restricted`)
    spec = workload(cfg, model)["spec"]["template"]["spec"]
    assert not [v for v in spec["volumes"] if "hostPath" in v]
    assert "ephemeral" in cache_volume(cfg, cfg.models["finance-8b"])  # g6e: no instance store, gp3


def test_a_new_cache_size_is_a_new_claim_and_volume_not_a_resize() -> None:
    """Kubernetes refuses to resize a bound claim unless it was dynamically provisioned by a class with
    allowVolumeExpansion (API validation of PersistentVolumeClaim updates; "Expanding Persistent Volumes Claims",
    kubernetes.io/docs/concepts/storage/persistent-volumes): patching the static claim's size would fail
    `pulumi up`. A new size gets new names, so Pulumi creates the pair, rolls the pods onto it, then deletes the
    old pair; the weights stay in the same node directory."""
    cfg = stack_config("prod")
    small, big = cfg.models["assistant-batch"], dataclasses.replace(cfg.models["assistant-batch"], cache_gib=400)
    old = {o["kind"]: o for o in serving.model_objects(cfg, small)}
    new = {o["kind"]: o for o in serving.model_objects(cfg, big)}
    assert (new["PersistentVolumeClaim"]["metadata"]["name"], new["PersistentVolume"]["metadata"]["name"]) == (
        "assistant-batch-node-cache-400gi", "aifactory-cache-assistant-assistant-batch-400gi")
    assert old["PersistentVolumeClaim"]["metadata"]["name"] != new["PersistentVolumeClaim"]["metadata"]["name"]
    assert new["PersistentVolume"]["spec"]["claimRef"]["name"] == "assistant-batch-node-cache-400gi"
    assert new["PersistentVolume"]["spec"]["hostPath"] == old["PersistentVolume"]["spec"]["hostPath"]
    assert cache_volume(cfg, big)["persistentVolumeClaim"] == {"claimName": "assistant-batch-node-cache-400gi"}


def test_the_cache_prep_daemonset_makes_each_models_directory_for_the_pods_uid() -> None:
    cfg = stack_config("prod")
    ds = serving.cache_prep(cfg)
    assert ds is not None and ds["metadata"]["namespace"] == "aifactory-system"
    pod = ds["spec"]["template"]["spec"]
    script = pod["containers"][0]["command"][-1]
    uid = pod_uid = 65532  # the model pods' runAsUser (security.DEFAULT_UID, "nonroot")
    assert workload(cfg, cfg.models["assistant-batch"])["spec"]["template"]["spec"]["securityContext"][
        "runAsUser"] == pod_uid
    for ns, name in (("assistant", "assistant-fast"), ("assistant", "assistant-batch"),
                     ("research", "deep-research")):
        path = f"/mnt/k8s-disks/0/aifactory-models/{ns}/{name}"
        assert f"mkdir -p {path} && chown 0:0 {path} && chmod 0750 {path} && chown {uid}:{uid} {path}" in script
    assert "finance-8b" not in script  # gp3 pool
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [{"matchExpressions": [{"key": "aifactory.io/pool", "operator": "In",
                                            "values": ["h100-block", "h200"]}]}]
    assert pod["containers"][0]["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["CHOWN"]}
    assert serving.cache_prep(stack_config("onprem")) is None


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                    reason="runs the script as root with only CAP_CHOWN, which needs root and util-linux setpriv")
def test_the_cache_prep_script_runs_with_only_cap_chown_and_again_on_restart(tmp_path: Path) -> None:
    """The script as the container runs it: root with every capability but CHOWN dropped (the container's
    securityContext). chmod(2) on a file one does not own needs CAP_FOWNER, so chmod after chown failed there and
    `set -e` stopped the script after the first model; a restart must also pass over directories it made."""
    paths = [str(tmp_path / "cache" / ns / name) for ns, name in (("a", "m1"), ("b", "m2"))]
    ds = storage.cache_prep_daemonset(paths=paths, uid=65532, pool_names=["p"], pool_label="l", tolerations=[],
                                      namespace="s")
    script = ds["spec"]["template"]["spec"]["containers"][0]["command"][-1].replace("exec sleep infinity\n", "")
    for _ in range(2):  # first start, then a restart over the existing directories
        res = subprocess.run(["setpriv", "--bounding-set=-all,+chown", "--inh-caps=-all", "--", "/bin/sh", "-c",
                              script], capture_output=True, text=True, timeout=30, check=False)
        assert res.returncode == 0, res.stderr
        for p in paths:
            st = os.stat(p)
            assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (65532, 65532, 0o750)


@pytest.mark.parametrize(("stack", "model", "seconds"), [
    # 405e9 params x 1 byte (FP8 checkpoint) / (8 NVMe x 1,000 MB/s) = 50.6 s
    ("prod", "deep-research", 51),
    # 70e9 x 2 bytes (BF16 read, FP8 made on load) / 8,000 MB/s = 17.5 s
    ("prod", "assistant-batch", 18),
    # 8e9 x 0.5 byte (AWQ 4-bit) / (1,000 MiB/s = 1,048.6 MB/s) = 3.8 s
    ("prod", "finance-8b", 4),
    # 405e9 x 2 bytes / 500 MB/s (existing cluster's class, assumed) = 1,620 s
    ("onprem", "llama-405b", 1620),
])
def test_expected_load_time_is_size_over_storage_throughput(stack: str, model: str, seconds: int) -> None:
    cfg = stack_config(stack)
    est = model_cold_start(cfg, cfg.models[model])
    assert est is not None and est.load_seconds == seconds
    assert est.budget_seconds == cfg.models[model].startup_budget_seconds


def test_a_budget_shorter_than_the_load_time_is_refused() -> None:
    found = problems(onprem_with(model="meta-llama/Llama-3.1-405B-Instruct", tensorParallel=8, pipelineParallel=2,
                                 startupBudgetSeconds=1200), "onprem")
    assert ("models.x.startupBudgetSeconds: 1200 s is shorter than the expected load time: 754.4 GiB / 500 MB/s "
            "(the cluster's storage class (assumed 500 MB/s)) = 1,620 s; start-up budget 1,200 s; raise it to at "
            "least 1620 s plus download and warm-up (or set weightsGiB if the estimate from the model id is wrong)"
            ) in found


# --- 7. engine features ------------------------------------------------------------------------------------


def small(**model: Any) -> PlatformConfig:
    return stack_config("onprem", models={"m": {"engine": "vllm", "model": "org/m", "toolCallParser": "none",
                                                "tenant": "ml-platform", "pool": "h100-ib", "uri": "pvc://model-store/m",
                                                **model}})


def test_expert_parallelism_and_kv_offload_use_the_pinned_engines_flags() -> None:
    """vLLM v0.33.0: `--enable-expert-parallel` (vllm/engine/arg_utils.py, ParallelConfig.enable_expert_parallel);
    `--kv-offloading-size` in GiB (CacheConfig.kv_offloading_size), from which vLLM builds its native
    OffloadingConnector with `cpu_bytes_to_use` (vllm/config/vllm.py). The `--kv-transfer-config` with
    `num_cpu_blocks` of v0.11.0 would now fail at start-up: vllm/v1/kv_offload/cpu/spec.py raises without
    cpu_bytes_to_use (v0.27.1 too)."""
    args = vllm_args(small(model="mistralai/Mixtral-8x7B-Instruct-v0.1", tensorParallel=4, expertParallel=True,
                           kvOffloadGiB=80).models["m"])
    assert "--enable-expert-parallel" in args
    assert args[args.index("--kv-offloading-size") + 1] == "80"
    assert "--kv-transfer-config" not in args
    assert "--enable-prefix-caching" in args  # offloaded blocks are found by their prefix hashes
    plain = vllm_args(small().models["m"])
    assert "--enable-expert-parallel" not in plain and "--kv-offloading-size" not in plain


@pytest.mark.parametrize(("model", "message"), [
    ({"expertParallel": True}, "models.x.expertParallel: needs tensorParallel > 1: expert parallelism spreads the "
                               "experts over the tensor-parallel GPUs"),
    ({"kvOffloadGiB": 64, "prefixCaching": False},
     "models.x.kvOffloadGiB: needs prefixCaching: offloaded KV blocks are found by their prefix hashes; "
     "remove prefixCaching: false or kvOffloadGiB"),
])
def test_feature_combinations_the_engine_refuses_are_config_errors(model: dict[str, Any], message: str) -> None:
    assert message in problems(onprem_with(**model), "onprem")


def test_prefix_caching_is_on_for_vllm_and_off_where_the_kit_cannot_enable_it() -> None:
    cfg = stack_config("staging")
    assert cfg.models["llama-70b"].prefix_caching is True
    # Triton/TensorRT-LLM reuses KV blocks only with enable_kv_cache_reuse in the model repository's config
    assert cfg.models["llama-8b-trt"].prefix_caching is False
    raw = stack_raw("staging")
    trt = {**raw["models"]["llama-8b-trt"], "prefixCaching": True}
    assert any(p.startswith("models.llama-8b-trt.prefixCaching: engine 'triton' does not reuse KV blocks across "
                            "requests as the kit deploys it (Triton: only when the model repository's tensorrt_llm "
                            "config.pbtxt sets enable_kv_cache_reuse")
               for p in problems({**raw, "models": {**raw["models"], "llama-8b-trt": trt}}, "staging"))


def test_serving_module_documents_its_engine_ports() -> None:
    # the pinned ports do not collide with the engines' own (8000 HTTP, Triton 8001/8002) or each other
    ports = serving.multi_node_ports()
    assert len(ports) == len(set(ports)) and not {8000, 8001, 8002} & set(ports)


def test_docs_cold_start_table_matches_the_estimate() -> None:
    """docs/serving.md's "Cold start" table: each shipped model's load time and budget, as the kit computes them."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "serving.md").read_text()
    rows = re.findall(r"^\| (dev|staging|prod|onprem) ([\w-]+)[^|]*\|[^|]*\|[^|]*\| ([^|]*) \| ([\d,]+) s \|$", text,
                      re.MULTILINE)
    seen = set()
    for stack, name, load, budget in rows:
        cfg = stack_config(stack)
        est = model_cold_start(cfg, cfg.models[name])
        assert int(budget.replace(",", "")) == cfg.models[name].startup_budget_seconds, name
        assert (load == "n/a") if est is None else load.endswith(f"{est.load_seconds:,} s"), (name, load)
        seen.add((stack, name))
    assert seen == {(s, m) for s in ("dev", "staging", "prod", "onprem") for m in stack_config(s).models}


def test_the_guard_survives_kubernetes_command_expansion() -> None:
    """The kubelet expands `$(NAME)` in a container's command (Kubernetes docs, "Define a command and arguments":
    dependent environment variables); the guard's text is passed verbatim, so it must hold no `$(`."""
    assert "$(" not in serving.nccl_guard_script()


def test_the_old_prod_config_of_a_pre_quantized_checkpoint_is_refused_with_the_fix() -> None:
    """`quantization: fp8` on Meta's FP8 checkpoint would become `--quantization fp8`, which vLLM refuses against
    the checkpoint's own fbgemm_fp8 config: the model would crash-loop after a successful `pulumi up`."""
    raw = stack_raw("prod")
    old = {**raw["models"]["deep-research"], "quantization": "fp8"}
    assert ("models.deep-research.quantization: 'meta-llama/Llama-3.1-405B-Instruct-FP8' is a quantized checkpoint "
            "(FP8 in its name) but quantization 'fp8' quantizes on load, and vLLM refuses a --quantization that "
            "contradicts the checkpoint: set quantization: {method: fp8, checkpoint: pre-quantized}") in problems(
        {**raw, "models": {**raw["models"], "deep-research": old}}, "prod")


def test_a_sigterm_while_the_guard_starts_its_engine_reaches_the_engine() -> None:
    """The guard's SIGTERM handler is in place before its engine starts: a SIGTERM that arrives while Popen is still
    starting the engine (here: sent from inside Popen) is passed on to the engine once it exists, so the guard ends
    with its engine (exit 128 + 15 as the guard reports the engine's -15), instead of dying of the signal itself
    while the engine runs on."""
    script = (
        "import os, signal, subprocess, sys\n"
        "import components.k8s.nccl_guard as g\n"
        "real = subprocess.Popen\n"
        "class Popen(real):\n"
        "    def __init__(self, *a, **k):\n"
        "        os.kill(os.getpid(), signal.SIGTERM)\n"
        "        super().__init__(*a, **k)\n"
        "g.subprocess.Popen = Popen\n"
        "sys.exit(g.main(['infiniband', '--', sys.executable, '-c', 'import time; time.sleep(20)']))\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=15,
                          cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == (-signal.SIGTERM) % 256, done
