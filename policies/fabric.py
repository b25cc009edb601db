"""Data-plane fabric correctness on AWS: EFA interface layout, EFA security group, placement, the EFA
device plugin's instance list, and pods that ask libfabric for EFA without getting EFA devices."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pulumi_policy import Severity

from components import catalog
from policies import kube
from policies.base import ADVISORY, MANDATORY, resource_policy, stack_policy
from policies.isolation import POD_TYPES

__all__ = [
    "POLICIES",
    "LAUNCH_TEMPLATE",
    "NODE_GROUP",
    "EFA_RESOURCE",
    "EFA_PLUGIN_CHART",
    "EfaPool",
    "efa_pools",
    "layout_problems",
    "efa_security_groups",
    "self_only_problems",
    "efa_env_problems",
]

LAUNCH_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"
SECURITY_GROUP = "aws:ec2/securityGroup:SecurityGroup"
SG_RULE = "aws:ec2/securityGroupRule:SecurityGroupRule"
VPC_INGRESS = "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"
VPC_EGRESS = "aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule"
SUBNET = "aws:ec2/subnet:Subnet"
PLACEMENT_GROUP = "aws:ec2/placementGroup:PlacementGroup"
EFA_RESOURCE = "vpc.amazonaws.com/efa"
EFA_PLUGIN_CHART = "aws-efa-k8s-device-plugin"
EFA_TYPES = ("efa", "efa-only")
Found = list[tuple[str, str | None]]


@dataclass(frozen=True)
class EfaPool:
    """A launch template with EFA interfaces and the node groups that launch from it."""

    launch_template: Any
    node_groups: tuple[Any, ...]

    @property
    def name(self) -> str:
        return self.launch_template.name

    @property
    def instance_types(self) -> list[str]:
        types = [t for ng in self.node_groups for t in (ng.props.get("instanceTypes") or ())]
        own = self.launch_template.props.get("instanceType")
        return sorted(set(types) | ({own} if own else set()))


def _efa_interfaces(lt_props: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [i for i in lt_props.get("networkInterfaces") or () if isinstance(i, Mapping)
            and i.get("interfaceType") in EFA_TYPES]


def _refers(r: Any, prop: str, target: Any, value: Any) -> bool:
    """Whether `r.props[prop]` refers to `target`: by property dependency, else by its id or name."""
    if any(d.urn == target.urn for d in (r.property_dependencies or {}).get(prop, ())):
        return True
    return value is not None and value in (target.props.get("id"), target.props.get("name"))


def efa_pools(resources: Sequence[Any]) -> list[EfaPool]:
    groups = [r for r in resources if r.resource_type == NODE_GROUP]
    out = []
    for lt in resources:
        if lt.resource_type == LAUNCH_TEMPLATE and _efa_interfaces(lt.props):
            users = tuple(ng for ng in groups
                          if _refers(ng, "launchTemplate", lt, (ng.props.get("launchTemplate") or {}).get("id"))
                          or _refers(ng, "launchTemplate", lt, (ng.props.get("launchTemplate") or {}).get("name")))
            out.append(EfaPool(lt, users))
    return out


def layout_problems(interfaces: Sequence[Mapping[str, Any]], instance_type: str) -> list[str]:
    """The AWS layout for `instance_type`: one interface per network card of the catalog; card 0 the
    primary `efa` interface at device index 0; every other card one `efa-only` interface at device index 0."""
    try:
        cards = catalog.get(instance_type).network_cards
    except KeyError:
        return [f"instance type {instance_type!r} is not in the catalog (components/catalog.py)"]
    out = []
    if len(interfaces) != cards:
        out.append(f"{len(interfaces)} network interfaces; {instance_type} has {cards} network cards, one "
                   "interface each")
    by_card: dict[int, list[Mapping[str, Any]]] = {}
    for i in interfaces:
        by_card.setdefault(int(i.get("networkCardIndex") or 0), []).append(i)
    for card in sorted(by_card):
        items = by_card[card]
        want = "efa" if card == 0 else "efa-only"
        if card >= cards:
            out.append(f"network card {card} does not exist on {instance_type} (cards 0..{cards - 1})")
        elif len(items) > 1:
            out.append(f"network card {card} has {len(items)} interfaces; it takes one")
        elif items[0].get("interfaceType") != want or int(items[0].get("deviceIndex") or 0) != 0:
            out.append(f"network card {card}: {items[0].get('interfaceType')} at device index "
                       f"{items[0].get('deviceIndex') or 0}; expected {want} at device index 0")
    missing = [c for c in range(cards) if c not in by_card]
    if missing and len(interfaces) == cards:
        out.append(f"network cards without an interface: {missing}")
    return out


def _layout(resources: Sequence[Any], _cfg: dict[str, Any]) -> Found:
    out: Found = []
    for pool in efa_pools(resources):
        if not pool.instance_types:
            out.append(("EFA launch template has no instance type and no node group uses it",
                        pool.launch_template.urn))
        for itype in pool.instance_types:
            out.extend((f"{pool.name} ({itype}): {p}", pool.launch_template.urn)
                       for p in layout_problems(_efa_interfaces(pool.launch_template.props), itype))
    return out


def efa_security_groups(lt_props: Mapping[str, Any]) -> list[str]:
    """The groups every EFA interface carries (the fabric's own group; card 0 also has the control plane's)."""
    sets = [set(i.get("securityGroups") or ()) for i in _efa_interfaces(lt_props)]
    return sorted(set.intersection(*sets)) if sets else []


def _rule_is_self(rule: Mapping[str, Any], sg_id: str) -> bool:
    """An inline rule whose only peer is the group itself: `self: true`, or its own id as the one group."""
    others = [k for k in ("cidrBlocks", "ipv6CidrBlocks", "prefixListIds") if rule.get(k)]
    named = list(rule.get("securityGroups") or ())
    groups = [g for g in named if g != sg_id]
    return (rule.get("self") is True or bool(sg_id) and sg_id in named) and not others and not groups


def _all_traffic(rule: Mapping[str, Any]) -> bool:
    return str(rule.get("protocol")) in ("-1", "all")


def self_only_problems(sg: Any, rules: Sequence[Any]) -> list[str]:
    """A group allows only itself: every rule (inline or a separate rule resource) is a self rule, and
    all traffic is allowed in from and out to itself."""
    sg_id = sg.props.get("id") or ""
    out = []
    full = set()
    for direction in ("ingress", "egress"):
        for rule in sg.props.get(direction) or ():
            if not _rule_is_self(rule, sg_id):
                out.append(f"{direction} rule {rule.get('description') or rule.get('protocol')!r} allows "
                           "traffic other than the group itself")
            elif _all_traffic(rule):
                full.add(direction)
    for r in rules:
        p = r.props
        direction = p.get("type") or ("ingress" if r.resource_type == VPC_INGRESS else "egress")
        is_self = p.get("self") is True or sg_id in (p.get("sourceSecurityGroupId"), p.get("referencedSecurityGroupId"))
        open_to = [k for k in ("cidrBlocks", "ipv6CidrBlocks", "prefixListIds", "cidrIpv4", "cidrIpv6", "prefixListId")
                   if p.get(k)]
        if not is_self or open_to:
            out.append(f"{direction} rule {r.name!r} allows traffic other than the group itself")
        elif str(p.get("protocol") or p.get("ipProtocol")) in ("-1", "all"):
            full.add(direction)
    out.extend(f"no {d} rule allows all traffic with itself (EFA needs every protocol)"
               for d in ("ingress", "egress") if d not in full)
    return out


def _security_group(resources: Sequence[Any], _cfg: dict[str, Any]) -> Found:
    sgs = {r.props.get("id"): r for r in resources if r.resource_type == SECURITY_GROUP and r.props.get("id")}
    out: Found = []
    for pool in efa_pools(resources):
        shared = efa_security_groups(pool.launch_template.props)
        if not shared:
            out.append((f"{pool.name}: no security group is shared by every EFA interface", pool.launch_template.urn))
        for sg_id in shared:
            sg = sgs.get(sg_id)
            if sg is None:
                out.append((f"{pool.name}: EFA security group {sg_id} is not managed by this stack, so it cannot "
                            "be checked", pool.launch_template.urn))
                continue
            rules = [r for r in resources if r.resource_type in (SG_RULE, VPC_INGRESS, VPC_EGRESS)
                     and r.props.get("securityGroupId") == sg_id]
            out.extend((f"{pool.name}: security group {sg.name}: {p}", sg.urn) for p in self_only_problems(sg, rules))
    return out


def _zones(ng: Any, subnets: Mapping[str, Any]) -> list[str]:
    ids = list(ng.props.get("subnetIds") or ())
    return sorted({(subnets[s].props.get("availabilityZone") if s in subnets else None) or s for s in ids})


def _single_az(resources: Sequence[Any], _cfg: dict[str, Any]) -> Found:
    subnets = {r.props.get("id"): r for r in resources if r.resource_type == SUBNET and r.props.get("id")}
    out: Found = []
    for pool in efa_pools(resources):
        for ng in pool.node_groups:
            zones = _zones(ng, subnets)
            if len(zones) != 1:
                out.append((f"EFA node group {ng.name} spans {len(zones)} zones/subnets ({', '.join(zones)}); "
                            "EFA traffic stays within one availability zone", ng.urn))
    return out


def _reserved(lt_props: Mapping[str, Any]) -> bool:
    target = (lt_props.get("capacityReservationSpecification") or {}).get("capacityReservationTarget") or {}
    return bool(target.get("capacityReservationId") or target.get("capacityReservationResourceGroupArn"))


def _placement(resources: Sequence[Any], _cfg: dict[str, Any]) -> Found:
    groups = [r for r in resources if r.resource_type == PLACEMENT_GROUP]
    out: Found = []
    for pool in efa_pools(resources):
        lt = pool.launch_template
        if _reserved(lt.props):
            continue
        name = (lt.props.get("placement") or {}).get("groupName")
        placed = [g for g in groups if _refers(lt, "placement", g, name)]
        if not name and not placed:
            out.append((f"{pool.name}: EFA launch template on unreserved capacity has no placement group", lt.urn))
        out.extend((f"{pool.name}: placement group {g.name} has strategy {g.props.get('strategy')!r}, not 'cluster'",
                    lt.urn) for g in placed if g.props.get("strategy") != "cluster")
    return out


def _plugin_instance_types(values: Mapping[str, Any]) -> set[str]:
    out: set[str] = set()
    for key in ("supportedInstanceLabels", "privilegedSupportedInstanceLabels"):
        out.update((values.get(key) or {}).get("values") or ())
    return out


def _plugin_coverage(resources: Sequence[Any], _cfg: dict[str, Any]) -> Found:
    pools = efa_pools(resources)
    needed = sorted({t for p in pools for t in p.instance_types})
    if not needed:
        return []
    plugins = [r for r in resources
               if r.resource_type == kube.HELM_RELEASE and r.props.get("chart") == EFA_PLUGIN_CHART]
    if not plugins:
        return [(f"EFA pools ({', '.join(needed)}) but no {EFA_PLUGIN_CHART} Helm release", None)]
    out: Found = []
    for plugin in plugins:
        missing = [t for t in needed if t not in _plugin_instance_types(plugin.props.get("values") or {})]
        if missing:
            out.append((f"{plugin.name}: supportedInstanceLabels.values lacks {', '.join(missing)}: nodes of those "
                        "pools get no plugin pod and NCCL falls back to TCP", plugin.urn))
    return out


def efa_env_problems(spec: Mapping[str, Any]) -> list[str]:
    out = []
    for c in kube.containers(spec):
        if (kube.env_value(c, "FI_PROVIDER") or "").lower() != "efa":
            continue
        res = c.get("resources") or {}
        asked = [q.get(EFA_RESOURCE) for q in (res.get("requests") or {}, res.get("limits") or {})]
        if not any(kube.quantity(v) not in ("", "0") for v in asked if v is not None):
            out.append(f"container {c.get('name')!r} sets FI_PROVIDER=efa but requests no {EFA_RESOURCE}")
    return out


def _efa_env_check(resource_type: str, props: Mapping[str, Any], _cfg: dict[str, Any]) -> list[str]:
    return [f"{site.where}: {p}" for site in kube.pod_sites(resource_type, props) for p in efa_env_problems(site.spec)]


POLICIES = [
    stack_policy(
        name="efa-interface-layout",
        description="An EFA pool's launch template has exactly the catalog's interfaces for its instance type, "
                    "in the AWS layout.",
        severity=Severity.HIGH, enforcement=MANDATORY,
        remediation="Give the launch template one interface per network card (components/catalog.py "
                    "network_cards): card 0 type efa at device index 0, every other card type efa-only at device "
                    "index 0.",
        check=_layout,
    ),
    stack_policy(
        name="efa-security-group-self-only",
        description="The security group every EFA interface shares allows all traffic with itself and nothing else.",
        severity=Severity.HIGH, enforcement=MANDATORY,
        remediation="Give the EFA interfaces a dedicated group whose only ingress and egress rules are protocol -1 "
                    "with self: true.",
        check=_security_group,
    ),
    stack_policy(
        name="efa-pool-single-az",
        description="An EFA node group runs in one availability zone.",
        severity=Severity.HIGH, enforcement=MANDATORY,
        remediation="Give the node group the subnet of a single zone (nodePools.<pool>.availabilityZones).",
        check=_single_az,
    ),
    stack_policy(
        name="efa-pool-placement-group",
        description="An EFA pool on unreserved capacity launches into a cluster placement group.",
        severity=Severity.MEDIUM, enforcement=ADVISORY,
        remediation="Set the launch template's placement.groupName to a placement group with strategy 'cluster', "
                    "or run the pool on a capacity reservation or capacity block.",
        check=_placement,
    ),
    stack_policy(
        name="efa-device-plugin-covers-pools",
        description="The EFA device plugin's instance list covers the instance type of every EFA pool.",
        severity=Severity.HIGH, enforcement=MANDATORY,
        remediation=f"Set the {EFA_PLUGIN_CHART} release's supportedInstanceLabels.values to the EFA pools' "
                    "instance types.",
        check=_plugin_coverage,
    ),
    resource_policy(
        name="efa-pods-request-devices",
        description=f"Containers that set FI_PROVIDER=efa request {EFA_RESOURCE}.",
        severity=Severity.HIGH, enforcement=MANDATORY,
        remediation=f"Request {EFA_RESOURCE} (the node's EFA device count, e.g. 32 on p5.48xlarge) in requests and "
                    "limits, or drop FI_PROVIDER=efa.",
        types=POD_TYPES, check=_efa_env_check,
    ),
]

