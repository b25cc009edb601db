"""Deterministic mocks for running the program offline under the Pulumi SDK's mock monitor.

`PlatformMocks` answers every invoke the program uses and gives computed outputs realistic,
deterministic values (ids and ARNs derived from the resource name, never random). `RecordingMonitor`
keeps what the engine would keep for a stack export: type, parent, provider, dependencies, inputs
and outputs of every resource, components included.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

import pulumi
from pulumi.runtime import mocks as pmocks
from pulumi.runtime import rpc
from pulumi.runtime.sync_await import _ensure_event_loop

__all__ = ["ACCOUNT_ID", "PlatformMocks", "RecordingMonitor", "Registration"]

ACCOUNT_ID = "123456789012"
# base64 of a PEM block that says MOCK: a certificate-shaped value, never a real CA
MOCK_CA_DATA = "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1PQ0sKLS0tLS1FTkQgQ0VSVElGSUNBVEUtLS0tLQo="


def _digest(*parts: str, n: int = 17) -> str:
    return hashlib.sha256("/".join(parts).encode()).hexdigest()[:n]


def _aws_service(typ: str) -> str:
    # aws:ec2/vpc:Vpc -> ec2
    return typ.split(":")[1].split("/")[0] if typ.count(":") >= 2 else "aws"


@dataclass
class Registration:
    urn: str
    type: str
    name: str
    custom: bool
    parent: str
    provider: str
    id: str
    inputs: dict[str, Any]
    outputs: dict[str, Any]
    dependencies: list[str] = field(default_factory=list)
    property_dependencies: dict[str, list[str]] = field(default_factory=dict)
    retain_on_delete: bool = False  # the engine leaves the cloud resource in place when Pulumi deletes it
    protect: bool = False  # the engine refuses to delete (or replace) it until the option is removed
    external: bool = False  # read (`Resource.get`), not managed: the stack export marks it `external`


class PlatformMocks(pmocks.Mocks):
    """Computed outputs for the resource types the kit creates; inputs are echoed as outputs."""

    def __init__(self, *, region: str = "us-east-1") -> None:
        self.region = region

    # --- invokes -----------------------------------------------------------------------------
    def call(self, args: pmocks.MockCallArgs) -> dict:  # type: ignore[override]
        # A plain dict, which the SDK's MockMonitor accepts: it iterates the failures of a tuple, so the
        # annotated (result, None) breaks it.
        tok = args.token
        if tok == "aws:index/getCallerIdentity:getCallerIdentity":
            return {"accountId": ACCOUNT_ID, "arn": f"arn:aws:iam::{ACCOUNT_ID}:user/synth",
                    "userId": "AIDASYNTH", "id": ACCOUNT_ID}
        if tok == "aws:index/getPartition:getPartition":
            return {"partition": "aws", "dnsSuffix": "amazonaws.com", "id": "aws"}
        if tok == "aws:index/getRegion:getRegion":
            return {"name": self.region, "region": self.region, "id": self.region}
        if tok == "aws:index/getAvailabilityZones:getAvailabilityZones":
            names = [f"{self.region}{c}" for c in "abcdef"]
            return {"names": names, "zoneIds": [f"use1-az{i + 1}" for i in range(len(names))],
                    "id": self.region}
        if tok == "aws:ssm/getParameter:getParameter":
            return {"name": args.args.get("name"), "value": "ami-0123456789abcdef0", "type": "String",
                    "id": args.args.get("name")}
        if tok == "aws:iam/getPolicyDocument:getPolicyDocument":
            return {"json": json.dumps(args.args, sort_keys=True), "id": "policy"}
        if tok == "aws:eks/getAddonVersion:getAddonVersion":
            return {"version": "v1.0.0-eksbuild.1", "addonName": args.args.get("addonName"),
                    "id": args.args.get("addonName")}
        return {}

    # --- resources ---------------------------------------------------------------------------
    def new_resource(self, args: pmocks.MockResourceArgs) -> tuple[str | None, dict]:
        typ, name, inputs = args.typ, args.name, dict(args.inputs)
        rid = args.resource_id or f"{name}-{_digest(typ, name, n=8)}"
        out: dict[str, Any] = dict(inputs)
        if typ.startswith("aws:"):
            out.update(self._aws(typ, name, inputs, rid))
            rid = out.get("id", rid)
        elif typ.startswith("kubernetes:"):
            meta = dict(inputs.get("metadata") or {})
            if args.resource_id and not meta:  # a read (`Resource.get`): the object the id names
                ns_part, _, obj_name = args.resource_id.rpartition("/")
                meta = {"name": obj_name, **({"namespace": ns_part} if ns_part else {})}
            meta.setdefault("name", name)
            meta.setdefault("uid", _uuid(typ, name))
            out["metadata"] = meta
            ns = meta.get("namespace")
            rid = f"{ns}/{meta['name']}" if ns else meta["name"]
            if typ == "kubernetes:helm.sh/v3:Release":
                out["status"] = {"status": "deployed", "revision": 1, "name": inputs.get("name", name),
                                 "namespace": inputs.get("namespace", "default"),
                                 "chart": inputs.get("chart"), "version": inputs.get("version")}
        return rid, out

    def _aws(self, typ: str, name: str, inputs: dict[str, Any], rid: str) -> dict[str, Any]:
        svc = _aws_service(typ)
        kind = typ.rsplit(":", 1)[-1]
        acct, region = ACCOUNT_ID, self.region
        out: dict[str, Any] = {"tagsAll": inputs.get("tags", {})}
        prefix = {"Vpc": "vpc", "Subnet": "subnet", "SecurityGroup": "sg", "InternetGateway": "igw",
                  "NatGateway": "nat", "Eip": "eipalloc", "RouteTable": "rtb", "LaunchTemplate": "lt",
                  "PlacementGroup": "pg", "VpcEndpoint": "vpce", "FlowLog": "fl", "Route": "r",
                  "RouteTableAssociation": "rtbassoc", "SecurityGroupRule": "sgrule",
                  "VpcSecurityGroupIngressRule": "sgr", "VpcSecurityGroupEgressRule": "sgr"}.get(kind)
        if svc == "ec2" and prefix:
            out["id"] = f"{prefix}-{_digest(typ, name)}"
        if kind == "Role":
            role = inputs.get("name") or f"{name}-{_digest(name, n=7)}"
            out.update(id=role, name=role, arn=f"arn:aws:iam::{acct}:role/{role}",
                       uniqueId=f"AROA{_digest(name, n=16).upper()}")
        elif kind == "Policy" and svc == "iam":
            pol = inputs.get("name") or f"{name}-{_digest(name, n=7)}"
            out.update(id=f"arn:aws:iam::{acct}:policy/{pol}", name=pol, arn=f"arn:aws:iam::{acct}:policy/{pol}")
        elif kind == "InstanceProfile":
            out.update(id=name, arn=f"arn:aws:iam::{acct}:instance-profile/{name}")
        elif kind == "OpenIdConnectProvider":
            host = str(inputs.get("url", "")).removeprefix("https://")
            out.update(id=f"arn:aws:iam::{acct}:oidc-provider/{host}", arn=f"arn:aws:iam::{acct}:oidc-provider/{host}")
        elif kind == "Key" and svc == "kms":
            kid = _uuid(typ, name)
            out.update(id=kid, keyId=kid, arn=f"arn:aws:kms:{region}:{acct}:key/{kid}")
        elif kind == "Cluster" and svc == "eks":
            cname = inputs.get("name", name)
            oidc = f"https://oidc.eks.{region}.amazonaws.com/id/{_digest(cname, n=32).upper()}"
            out.update(
                id=cname, name=cname, arn=f"arn:aws:eks:{region}:{acct}:cluster/{cname}",
                endpoint=f"https://{_digest(cname, n=32).upper()}.gr7.{region}.eks.amazonaws.com",
                certificateAuthority={"data": MOCK_CA_DATA},
                identities=[{"oidcs": [{"issuer": oidc}]}],
                status="ACTIVE", platformVersion="eks.1",
                vpcConfig={**dict(inputs.get("vpcConfig") or {}),
                           "clusterSecurityGroupId": f"sg-{_digest(cname, 'cluster')}",
                           "vpcId": f"vpc-{_digest(cname, 'vpc')}"},
            )
        elif kind == "NodeGroup":
            ng = inputs.get("nodeGroupName", name)
            out.update(id=f"{inputs.get('clusterName')}:{ng}", nodeGroupName=ng, status="ACTIVE",
                       arn=f"arn:aws:eks:{region}:{acct}:nodegroup/{inputs.get('clusterName')}/{ng}/{_uuid(name)}",
                       resources=[{"autoscalingGroups": [{"name": f"eks-{ng}-{_uuid(name)}"}]}])
        elif kind == "Addon":
            out.update(id=f"{inputs.get('clusterName')}:{inputs.get('addonName')}",
                       addonVersion=inputs.get("addonVersion") or "v1.0.0-eksbuild.1")
        elif kind == "LaunchTemplate":
            out.update(latestVersion=1, defaultVersion=1,
                       arn=f"arn:aws:ec2:{region}:{acct}:launch-template/{out['id']}")
        elif kind == "LogGroup":
            lg = inputs.get("name", name)
            out.update(id=lg, arn=f"arn:aws:logs:{region}:{acct}:log-group:{lg}")
        elif kind == "Bucket" and svc == "s3":
            b = inputs.get("bucket", f"{name}-{_digest(name, n=8)}")
            out.update(id=b, bucket=b, arn=f"arn:aws:s3:::{b}")
        elif kind == "Vpc":
            out.update(arn=f"arn:aws:ec2:{region}:{acct}:vpc/{out['id']}",
                       defaultSecurityGroupId=f"sg-{_digest(name, 'default')}",
                       mainRouteTableId=f"rtb-{_digest(name, 'main')}")
        elif kind == "Subnet":
            out.update(arn=f"arn:aws:ec2:{region}:{acct}:subnet/{out['id']}")
        elif kind == "SecurityGroup":
            out.update(arn=f"arn:aws:ec2:{region}:{acct}:security-group/{out['id']}")
        elif kind == "Eip":
            out.update(publicIp=f"198.51.100.{int(_digest(name, n=2), 16) % 250 + 1}")
        elif kind == "AccessEntry":
            out.update(id=f"{inputs.get('clusterName')}#{inputs.get('principalArn')}")
        if kind in _AUTONAMED and not inputs.get("name"):
            # The engine auto-names these (name + random suffix); a digest keeps synth deterministic.
            out["name"] = f"{name}-{_digest(typ, name, n=7)}"
        if "arn" not in out:
            out["arn"] = f"arn:aws:{svc}:{region}:{acct}:{kind.lower()}/{out.get('id', rid)}"
        out.setdefault("id", rid)
        return out


# AWS types whose `name` the engine generates when the program gives none.
_AUTONAMED = frozenset({"PlacementGroup", "SecurityGroup", "LaunchTemplate"})


def _uuid(*parts: str) -> str:
    h = _digest(*parts, n=32)
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def _plain(value: Any) -> Any:
    """Make deserialized property values JSON-ready, as the engine's stack export shows them.

    Property values travel as protobuf doubles, so every integer arrives as a float; the engine writes
    whole numbers back as integers (`containerPort: 8000`, not `8000.0`), and so does this.
    """
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    urn = getattr(value, "urn", None)
    if urn is not None and hasattr(urn, "future"):
        return f"<resource {type(value).__name__}>"
    return str(value)


class RecordingMonitor(pmocks.MockMonitor):
    """The SDK's MockMonitor, also keeping what a stack export holds for every resource."""

    def __init__(self, mocks: pmocks.Mocks) -> None:
        super().__init__(mocks)
        self.registrations: dict[str, Registration] = {}
        self.stack_urn: str = ""
        self.stack_outputs: dict[str, Any] = {}

    def make_urn(self, parent: str, type_: str, name: str) -> str:
        # As the engine builds URNs: the parent's whole qualified type chain (Platform$Mesh$Namespace; the SDK's
        # mock keeps only the last link), and no root-stack type for the stack's direct children.
        if parent:
            qualified = parent.split("::")[2]
            if qualified != "pulumi:pulumi:Stack":
                type_ = f"{qualified}${type_}"
        return f"urn:pulumi:{pulumi.get_stack()}::{pulumi.get_project()}::{type_}::{name}"

    def RegisterResource(self, request):  # noqa: N802 (gRPC method name)
        response = super().RegisterResource(request)
        urn = response.urn
        if request.type == "pulumi:pulumi:Stack":
            self.stack_urn = urn
            return response
        _ensure_event_loop()
        inputs = _plain(rpc.deserialize_properties(request.object))
        state = self.resources[urn].state
        reg = Registration(
            urn=urn,
            type=request.type,
            name=request.name,
            custom=bool(request.custom),
            parent=request.parent,
            provider=request.provider,
            id=self.resources[urn].id or "",
            inputs=inputs,
            outputs=_plain(state) if request.custom else {},
            dependencies=sorted(set(request.dependencies)),
            property_dependencies={k: sorted(set(v.urns)) for k, v in request.propertyDependencies.items()
                                   if v.urns},
            retain_on_delete=bool(request.retainOnDelete),
            protect=bool(request.protect),
        )
        self.registrations[urn] = reg
        return response

    def ReadResource(self, request):  # noqa: N802
        response = super().ReadResource(request)
        _ensure_event_loop()
        state = self.resources[response.urn].state
        self.registrations[response.urn] = Registration(
            urn=response.urn, type=request.type, name=request.name, custom=True, parent=request.parent,
            provider=request.provider, id=request.id, inputs={}, outputs=_plain(state),
            dependencies=sorted(set(request.dependencies)), external=True)
        return response

    def RegisterResourceOutputs(self, request):  # noqa: N802
        if request.urn in self.registrations:
            _ensure_event_loop()
            self.registrations[request.urn].outputs = _plain(rpc.deserialize_properties(request.outputs))
        elif request.urn == self.stack_urn:
            _ensure_event_loop()
            # set_mocks registers the stack's (empty) outputs once before the program; calls arrive on
            # executor threads in any order, so merge rather than replace.
            self.stack_outputs.update(_plain(rpc.deserialize_properties(request.outputs)))
        return super().RegisterResourceOutputs(request)

