"""Node pools (`nodePools`) and the InfiniBand fabric (`infiniband`)."""

from __future__ import annotations

import dataclasses
import datetime
import ipaddress
import re
from collections.abc import Mapping
from typing import Any

from components import catalog
from components.k8s.defaults import (
    CAPACITY_BLOCK_DRAIN_MINUTES,
    IPAM_BLOCK_SIZE,
)
from components.k8s.settings import (
    LABEL_VALUE_PATTERN,
    MIG_LAYOUTS,
    NOT_A_LABEL_VALUE,
    NOT_A_UTC_TIME,
    Capacity,
    InfinibandSettings,
    NodePool,
    Taint,
)
from components.nodes import DEFAULT_CPU_ROOT_VOLUME_GIB, DEFAULT_EFA_HUGEPAGES_MIB, DEFAULT_GPU_ROOT_VOLUME_GIB
from components.vocabulary import GPU_TAINT_KEY, POOL_LABEL, SYSTEM_POOL
from infra.stack.cluster import Target, _sizes
from infra.stack.common import (
    MIN_CAPACITY_BLOCK_DRAIN_MINUTES,
    _cidr,
    _known_type,
)
from infra.stack.reader import (
    _given,
    _Reader,
    _show,
)

LABEL_VALUE = re.compile(LABEL_VALUE_PATTERN)
_KUBERNETES_NAMESPACES = ("kubernetes.io", "k8s.io")
_KUBELET_PREFIXES = ("node.kubernetes.io", "kubelet.kubernetes.io")


def _in(namespace: str, domains: tuple[str, ...]) -> bool:
    """Whether a label key's prefix is one of `domains` or a subdomain of one (as the kubelet reads it)."""
    return any(namespace == d or namespace.endswith(f".{d}") for d in domains)



def _node_pool(r: _Reader, name: str, d: dict[str, Any], target: Target | None) -> NodePool | None:
    path = f"nodePools.{name}"
    if name == SYSTEM_POOL and target is not None and target.is_aws:
        r.fail(path, f"{name!r} is reserved on AWS for the kit's own system node group (cluster.systemPool): its "
                     f"nodes carry {POOL_LABEL}={SYSTEM_POOL}, which the kit's own controllers select (the AWS Load "
                     "Balancer Controller's pods); rename the pool (and the models' `pool` that name it), or size the "
                     "system nodes with cluster.systemPool")
    v = r.fields(NodePool, d, path)
    itype = v.pop("instance_type")
    if itype is not None and (problem := _known_type(itype)) is not None:
        r.fail(f"{path}.instanceType", f"{_show(itype)} {problem}")
        itype = None
    if itype is None:
        return None
    inst = catalog.get(itype)
    aws = target is not None and target.is_aws
    if target is not None and inst.onprem == aws:
        kinds = [n for n, t in catalog.CATALOG.items() if t.onprem != aws]
        r.fail(f"{path}.instanceType", f"{itype!r} is not available for provider {target.provider!r}; "
                                       f"choose one of: {', '.join(sorted(kinds))}")
    block = isinstance(d.get("capacity"), dict) and d["capacity"].get("type") == "capacity-block"
    if not r.is_set(d, path, "minSize"):
        v["min_size"] = 0 if block else 1
    if not r.is_set(d, path, "desiredSize"):
        v["desired_size"] = v["min_size"]
    if not r.is_set(d, path, "maxSize"):
        v["max_size"] = max(v["min_size"], v["desired_size"])
    lo, hi, want = v["min_size"], v["max_size"], v["desired_size"]
    _sizes(r, path, lo, hi, want)

    fabric = v["fabric"]
    if fabric == "efa":
        if not inst.supports_efa:
            r.fail(f"{path}.fabric", f"'efa' is not available on {itype}; EFA types: {', '.join(catalog.efa_types())}")
        if target is not None and not aws:
            r.fail(f"{path}.fabric", "'efa' needs provider 'aws'; existing clusters use 'infiniband'")
    if fabric == "infiniband":
        if inst.ib_ports == 0:
            ib = sorted(n for n, t in catalog.CATALOG.items() if t.ib_ports)
            r.fail(f"{path}.fabric", f"'infiniband' is not available on {itype}; InfiniBand types: {', '.join(ib)}")
        if aws:
            r.fail(f"{path}.fabric", "'infiniband' needs provider 'existing'; AWS pools use 'efa'")
    if fabric != "none" and not inst.has_gpu:
        r.fail(f"{path}.fabric", f"{fabric!r} is for GPU pools; {itype} has no GPU")

    target_azs = target.availability_zones if target is not None else ()
    azs = v.pop("availability_zones")  # derived: the pool's zones (below)
    if "availabilityZones" in d:
        if not aws:
            r.fail(f"{path}.availabilityZones", "only applies to provider 'aws'")
        for i, az in enumerate(azs):
            if target_azs and az not in target_azs:
                r.fail(f"{path}.availabilityZones[{i}]", f"{az!r} is not one of target.availabilityZones "
                                                         f"({', '.join(target_azs)})")
        if not azs:
            r.fail(f"{path}.availabilityZones", "must list at least one zone")
    elif aws:
        azs = target_azs[:1] if fabric == "efa" else target_azs
    if len(set(azs)) != len(azs):
        r.fail(f"{path}.availabilityZones", f"{_show(list(azs))} lists a zone twice")
    if fabric == "efa" and len(azs) > 1:
        r.fail(f"{path}.availabilityZones", f"{_show(list(azs))}: an EFA pool must be in exactly one zone "
                                            "(EFA traffic does not cross zones)")

    cap_raw = d.get("capacity")
    capacity = v.pop("capacity")
    if cap_raw is not None:
        cp = f"{path}.capacity"
        cd = {k: x for k, x in cap_raw.items() if x is not None} if isinstance(cap_raw, dict) else {}
        ctype = capacity.type
        typed = not r.problems_at(f"{cp}.type")  # a bad type is one problem: the keys that go with a type are not
        if typed and ctype != "on-demand" and _given(cd, "reservationId") is False:  # checked against its default
            r.fail(f"{cp}.reservationId", f"is required for capacity type {ctype!r}")
        if typed and ctype == "on-demand" and _given(cd, "reservationId"):
            r.fail(f"{cp}.reservationId", "only applies to capacity types 'odcr' and 'capacity-block'")
        if not aws and target is not None:
            r.fail(cp, "only applies to provider 'aws'")
        if capacity.drain_minutes < MIN_CAPACITY_BLOCK_DRAIN_MINUTES:
            r.fail(f"{cp}.drainMinutes", f"{capacity.drain_minutes} must be more than 30: EKS asks to scale a "
                                         "capacity-block node group to zero more than 30 minutes before the block "
                                         "ends")
            capacity = dataclasses.replace(capacity, drain_minutes=CAPACITY_BLOCK_DRAIN_MINUTES)
        if typed and ctype != "capacity-block" and _given(cd, "drainMinutes"):
            r.fail(f"{cp}.drainMinutes", "only applies to capacity type 'capacity-block'")
        capacity = _block_window(r, cd, cp, capacity, typed=typed)
        if aws and ctype != "on-demand" and len(azs) != 1 and not r.problems_at(f"{path}.availabilityZones"):
            # ODCRs and capacity blocks are zonal (EKS user guide, capacity blocks: give the node group only the
            # subnet of the reservation's zone): other zones have nothing reserved to launch into
            r.fail(f"{path}.availabilityZones", f"{_show(list(azs))}: a {ctype} reservation is in one zone; list "
                                                "exactly that zone")
        if ctype == "odcr" and not (lo == hi == want):
            r.fail(f"{path}.desiredSize", f"an ODCR reservation fixes the node count: set minSize, maxSize and "
                                          f"desiredSize equal to the reserved count (got {lo}, {hi}, {want})")
        if ctype == "capacity-block" and (lo, want) != (0, 0):
            r.fail(f"{path}.desiredSize", f"a capacity block runs nodes only inside its window: set minSize and "
                                          f"desiredSize to 0 and maxSize to the reserved count (got {lo}, {hi}, "
                                          f"{want}); scheduled actions scale the pool at the block's start and end")
    if not r.is_set(d, path, "placementGroup"):
        v["placement_group"] = fabric == "efa" and not capacity.reserved
    pg = v["placement_group"]
    if pg and capacity.reserved:
        r.fail(f"{path}.placementGroup", f"true conflicts with capacity type {capacity.type!r}: the reservation "
                                         "fixes placement itself; remove placementGroup")
    if pg and not aws and target is not None:
        r.fail(f"{path}.placementGroup", "only applies to provider 'aws'")

    if not r.is_set(d, path, "rootVolumeGiB"):
        v["root_volume_gib"] = DEFAULT_GPU_ROOT_VOLUME_GIB if inst.has_gpu else DEFAULT_CPU_ROOT_VOLUME_GIB
    if not r.is_set(d, path, "hugepagesMiB"):
        v["hugepages_mib"] = DEFAULT_EFA_HUGEPAGES_MIB if fabric == "efa" else 0
    elif v["hugepages_mib"] % 2:
        r.fail(f"{path}.hugepagesMiB", f"{v['hugepages_mib']} must be a multiple of 2 (2 MiB pages)")
        v["hugepages_mib"] = DEFAULT_EFA_HUGEPAGES_MIB if fabric == "efa" else 0
    for key, value in v["labels"].items():
        prefix = key.rpartition("/")[0]
        if key == POOL_LABEL or key.startswith("nvidia.com/"):
            r.fail(f"{path}.labels.{key}", "is set by the kit; choose another key")
        elif _in(prefix, _KUBERNETES_NAMESPACES) and not _in(prefix, _KUBELET_PREFIXES):
            # kubernetes@v1.34.0 cmd/kubelet/app/options/options.go ValidateKubeletFlags: the kubelet does not start
            # with such a label in --node-labels (pkg/kubelet/apis/well_known_labels.go: its own prefixes)
            r.fail(f"{path}.labels.{key}", f"is in a namespace Kubernetes reserves ({', '.join(_KUBERNETES_NAMESPACES)}"
                                           f"): the kubelet refuses to start with it; use your own prefix, or "
                                           f"{' or '.join(p + '/' for p in _KUBELET_PREFIXES)}")
        if not LABEL_VALUE.match(value):
            r.fail(f"{path}.labels.{key}", f"{_show(value)} {NOT_A_LABEL_VALUE}")

    taints = tuple(t for t in v.pop("taints") if t.key and t.effect)  # one reported incomplete is left out
    for i, t in enumerate(taints):
        if (t.key, t.effect) in {(o.key, o.effect) for o in taints[:i]}:
            r.fail(f"{path}.taints", f"taint {t.key}:{t.effect} is listed twice (a node has one taint per key and "
                                     "effect)")
    if "taints" not in d and inst.has_gpu:  # derived: a GPU pool gets the GPU taint
        taints = (Taint(GPU_TAINT_KEY, "NoSchedule", "true"),)

    mig = v.pop("mig")
    if mig is not None and (inst.gpu is None or not inst.gpu.mig_capable):
        mig_types = [n for n, t in catalog.CATALOG.items() if t.gpu is not None and t.gpu.mig_capable]
        r.fail(f"{path}.mig", f"{itype} GPUs do not support MIG; MIG types: {', '.join(sorted(mig_types))}")
    elif mig is not None and inst.gpu is not None and mig in catalog.MIG_LAYOUT_DEVICES and \
            catalog.mig_devices_per_gpu(mig, inst.gpu) is None:
        fitting = [lay for lay in MIG_LAYOUTS if catalog.mig_devices_per_gpu(lay, inst.gpu) is not None
                   or lay not in catalog.MIG_LAYOUT_DEVICES]
        r.fail(f"{path}.mig", f"{mig!r} does not fit {itype}'s {inst.gpu.name} ({inst.gpu.memory_gib} GB): the GPU "
                              f"operator's MIG manager would fail to apply it; layouts for it: {', '.join(fitting)}")

    nodes = v["nodes"]  # provider existing only
    if "nodes" in d and aws:
        r.fail(f"{path}.nodes", "only applies to provider 'existing' (EKS labels the nodes it launches)")
    if mig is not None and target is not None and not aws and not nodes:
        r.fail(f"{path}.nodes", f"is required for a MIG pool on provider 'existing': list the pool's node names "
                                f"(kubectl get nodes -l {POOL_LABEL}={name}); the kit labels them "
                                f"nvidia.com/mig.config={mig} so the GPU operator's MIG manager partitions them")
    if len(set(nodes)) != len(nodes):
        r.fail(f"{path}.nodes", f"{_show(list(nodes))} lists a node twice")
    return NodePool(name=name, instance_type=itype, availability_zones=tuple(azs), capacity=capacity,
                    taints=taints, mig=mig, **v)


def _block_window(r: _Reader, cd: dict[str, Any], path: str, capacity: Capacity, *, typed: bool) -> Capacity:
    """A capacity block's start and end (UTC): the pool scales up at the start and to zero `drainMinutes` before
    the end (EKS user guide, capacity-blocks: "scale to zero more than 30 minutes before the ... end time")."""
    times = {"startTime": capacity.start_time, "endTime": capacity.end_time}
    for key, value in times.items():
        if value is not None and _utc(value) is None:
            r.fail(f"{path}.{key}", f"{_show(value)} {NOT_A_UTC_TIME}")
            times[key] = None
        if not typed:
            continue
        if capacity.type == "capacity-block" and key not in cd:
            r.fail(f"{path}.{key}", f"is required for capacity type 'capacity-block': the block's {key[:-4]} "
                                    "(UTC, e.g. 2026-12-01T11:30:00Z, as `aws ec2 describe-capacity-reservations` "
                                    "shows it)")
        elif capacity.type != "capacity-block" and key in cd:
            r.fail(f"{path}.{key}", "only applies to capacity type 'capacity-block'")
    start, end = times["startTime"], times["endTime"]
    drain_minutes = capacity.drain_minutes
    if start is not None and end is not None:
        s, e = _utc(start), _utc(end)
        if s is not None and e is not None and (e - s).total_seconds() <= drain_minutes * 60:
            r.fail(f"{path}.endTime", f"{end!r} must be more than {drain_minutes} minutes after startTime {start!r} "
                                      f"(the pool scales to zero drainMinutes={drain_minutes} before the block ends)")
    return dataclasses.replace(capacity, start_time=start, end_time=end)


def _utc(value: str) -> datetime.datetime | None:
    try:
        return datetime.datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.UTC)
    except ValueError:
        return None


def _infiniband(r: _Reader, raw: Any) -> InfinibandSettings:
    path = "infiniband"
    v = r.fields(InfinibandSettings, raw, path)
    d = raw if isinstance(raw, dict) else {}
    if r.is_set(d, path, "ipRange") and (problem := _cidr(v["ip_range"])) is not None:
        r.fail(f"{path}.ipRange", f"{_show(v['ip_range'])} {problem}")
        v["ip_range"] = InfinibandSettings().ip_range
    return InfinibandSettings(**v)


def _ib_rails(r: _Reader, ib: InfinibandSettings, raw: Any, pools: Mapping[str, NodePool]) -> InfinibandSettings:
    """Every compute rail of the InfiniBand pools' servers: interfaces and HCAs default to the catalog's rails
    (catalog.IB_RAILS); fewer than the catalog's ports would leave rails idle, so that is refused."""
    d = raw if isinstance(raw, dict) else {}
    ib_pools = [p for p in pools.values() if p.fabric == "infiniband"]
    types = sorted({p.instance_type for p in ib_pools})
    rails = {catalog.IB_RAILS.get(t, ()) for t in types}
    known = next(iter(rails)) if len(rails) == 1 else ()
    interfaces = ib.interfaces if _given(d, "interfaces") else tuple(x.netdev for x in known) or ib.interfaces
    hcas = ib.hcas if _given(d, "hcas") else () if _given(d, "interfaces") else tuple(x.hca for x in known)
    for t in types:
        ports = catalog.get(t).ib_ports
        if len(interfaces) < ports:
            hint = (f"the catalog's rails: {', '.join(x.netdev for x in catalog.IB_RAILS[t])}"
                    if t in catalog.IB_RAILS else f"list all {ports} compute ports (IPoIB netdevs)")
            r.fail("infiniband.interfaces", f"{_show(list(interfaces))} uses {len(interfaces)} of the {ports} "
                                            f"InfiniBand rails of {t}: cross-node traffic would get "
                                            f"{len(interfaces)}/{ports} of the bandwidth; remove it for {hint}")
    if hcas and len(hcas) != len(interfaces):
        r.fail("infiniband.hcas", f"{_show(list(hcas))} names {len(hcas)} RDMA devices for {len(interfaces)} "
                                  "interfaces: give one per interface, in the same order")
    return dataclasses.replace(ib, interfaces=interfaces, hcas=hcas)


def _ip_range_fits(r: _Reader, ib: InfinibandSettings, pools: Mapping[str, NodePool]) -> None:
    nodes = sum(p.max_size for p in pools.values() if p.fabric == "infiniband")
    have = ipaddress.ip_network(ib.ip_range).num_addresses
    if have < IPAM_BLOCK_SIZE * nodes:
        prefix = 32 - max(1, (IPAM_BLOCK_SIZE * nodes - 1).bit_length())
        r.fail("infiniband.ipRange", f"{ib.ip_range!r} has {have} addresses, too few for {nodes} InfiniBand nodes x "
                                     f"{IPAM_BLOCK_SIZE} per node; use a /{prefix} or larger")
