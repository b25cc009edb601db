"""PlatformConfig: the typed model of one environment (one Pulumi stack).

Stack files (`stacks/Pulumi.<env>.yaml`) hold structured objects under the `aifactory:` namespace,
exactly as the Pulumi CLI passes them to a program. `load()` reads them through `pulumi.Config`;
`parse()` is the pure function behind it that tests and `aifactory synth` also use.

Validation collects every problem before it raises: each `Problem` names the key path
(`nodePools.gpu-a.fabric`), the value received and what is allowed. The sections are read in infra/stack (one
module per section, cross-section checks in infra/stack/checks.py); a setting declared with `setting(...)` on its
dataclass (components/k8s/settings/) states its type, default, bounds and description there, once.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from components import catalog
from components.k8s.defaults import DEFAULT_KUBERNETES_VERSION, SERVING_PRIORITY_CLASSES
from components.k8s.settings import (
    DEFAULT_ROUTING_MARGIN_PERCENT,
    ROUTING_POLICIES,
    GatewaySettings,
    InfinibandSettings,
    Model,
    NodePool,
    ObservabilitySettings,
    Tenant,
    setting,
)
from infra.stack import declared
from infra.stack.checks import (
    _aws_name_lengths,
    _budget_checks,
    _cross_model_checks,
    _fidelity_checks,
    _issuer_tenants,
    _variant_checks,
)
from infra.stack.cluster import ClusterSettings, NetworkSettings, Target, _cluster, _network, _target
from infra.stack.common import (
    _KIT_NAMESPACES,
    NAMESPACE,
    SUPPORTED_KUBERNETES_VERSIONS,
    TOP_LEVEL_KEYS,
    _reserved_namespace,
)
from infra.stack.common import DEFAULT_STACKS_DIR as DEFAULT_STACKS_DIR
from infra.stack.gateway import _gateway
from infra.stack.messages import kind as _kind
from infra.stack.models import _model
from infra.stack.observability import _observability
from infra.stack.pools import _ib_rails, _infiniband, _ip_range_fits, _node_pool
from infra.stack.reader import DNS_LABEL, ConfigError, Problem, _Reader, did_you_mean
from infra.stack.tenants import _derive_quotas, _tenant

# The stack model's entry points; the settings themselves are components.k8s.settings' (and infra.stack.cluster's).
__all__ = ["NAMESPACE", "TOP_LEVEL_KEYS", "DEFAULT_STACKS_DIR", "ConfigError", "Problem", "PlatformConfig", "parse",
           "load", "raw_from_pulumi", "stack_file_schema", "namespace_typo", "namespace_typo_problem"]


def namespace_typo_problem(full_key: str, path: str) -> Problem | None:
    """The problem of a `ns:key` whose namespace misspells the kit's (reported at `path`), or None."""
    ns, _, key = full_key.partition(":")
    if not namespace_typo(ns):
        return None
    return Problem(path, f"namespace {ns!r} is not the kit's: nothing reads this key; did you mean "
                         f"'{NAMESPACE}:{key}'?")


def namespace_typo(namespace: str) -> bool:
    """Whether a stack config namespace is a misspelling of the kit's own (`aifactroy:`, `AIFactory:`): its keys
    would be passed to nobody. Provider namespaces (aws:, kubernetes:, pulumi:) are far from it."""
    return namespace != NAMESPACE and (namespace.lower() == NAMESPACE
                                       or bool(difflib.get_close_matches(namespace.lower(), [NAMESPACE], cutoff=0.75)))




@dataclass(frozen=True, slots=True, kw_only=True)
class PlatformConfig:
    """One stack: each setting is a key under `aifactory:` (`aifactory:nodePools`)."""

    stack: str
    target: Target = setting(doc="Where the platform runs: provider aws (the kit creates the cluster) or existing.")
    kubernetes_version: str = setting(DEFAULT_KUBERNETES_VERSION, choices=SUPPORTED_KUBERNETES_VERSIONS,
                                      doc="The Kubernetes minor version (provider aws: the EKS cluster's; existing: "
                                          "what the kit checks the cluster against).")
    cluster: ClusterSettings | None = setting(None, doc="provider aws: the EKS cluster.")
    network: NetworkSettings | None = setting(None, doc="provider aws: the VPC.")
    node_pools: Mapping[str, NodePool] = setting(pattern=DNS_LABEL.pattern, doc="Node pools by name; at least one "
                                                 "with GPUs. provider aws: not `system`, the kit's own system node "
                                                 "group (cluster.systemPool).")
    infiniband: InfinibandSettings | None = setting(None, doc="provider existing: the InfiniBand fabric of the "
                                                              "pools with fabric infiniband.")
    tenants: Mapping[str, Tenant] = setting(default_factory=dict, pattern=DNS_LABEL.pattern,
                                            doc="Tenants by name: a namespace, quotas and rate limits each.")
    models: Mapping[str, Model] = setting(default_factory=dict, pattern=DNS_LABEL.pattern,
                                          doc="Served models by name.")
    gateway: GatewaySettings = setting(default_factory=GatewaySettings, doc="The inference gateway (Envoy).")
    observability: ObservabilitySettings = setting(default_factory=ObservabilitySettings,
                                                   doc="Metrics, logs, traces, dashboards and alerts.")

    @property
    def is_aws(self) -> bool:
        return self.target.is_aws

    @property
    def gpu_pools(self) -> list[NodePool]:
        return [p for p in self.node_pools.values() if p.gpu]

    @property
    def efa_pools(self) -> list[NodePool]:
        return [p for p in self.node_pools.values() if p.fabric == "efa"]

    @property
    def infiniband_pools(self) -> list[NodePool]:
        return [p for p in self.node_pools.values() if p.fabric == "infiniband"]

    def price_per_hour(self, instance_type: str) -> float:
        """$/hour of one node: the stack's override, else the catalog's on-demand price."""
        if instance_type in self.observability.prices:
            return self.observability.prices[instance_type]
        price = catalog.get(instance_type).on_demand_usd_per_hour
        if price is None:  # parse() guarantees an override exists for every type in use
            raise KeyError(f"no price for {instance_type}")
        return price

    def pool_of(self, model: Model) -> NodePool:
        return self.node_pools[model.pool]

    def priority_class_of(self, model: Model) -> str | None:
        """The PriorityClass of the model's pods (ServingControllers creates it)."""
        return SERVING_PRIORITY_CLASSES[model.priority][0]

    def tenant_of(self, model: Model) -> Tenant:
        return self.tenants[model.tenant]

    def variants_of(self, workload: str) -> list[Model]:
        """The workload's variants, cheapest first (ties: faster first, then by name); empty without variants."""
        vs = [m for m in self.models.values() if m.workload == workload and m.variant is not None]
        return sorted(vs, key=lambda m: (self.cost_per_request(m), m.slo.e2e_seconds, m.name))

    def cost_per_request(self, model: Model) -> float:
        """$ per request of a variant: its costPerRequest, else one replica's GPUs at the pool's price per GPU-hour
        over the requests it serves in an hour (parse() guarantees one of the two is known)."""
        v = model.variant
        if v is None:
            raise KeyError(f"{model.name} is not a variant")
        if v.cost_per_request is not None:
            return v.cost_per_request
        pool = self.pool_of(model)
        per_gpu_hour = self.price_per_hour(pool.instance_type) / pool.instance.gpu_count
        assert v.requests_per_second is not None  # parse() guarantees it
        return per_gpu_hour * model.gpus_per_replica / (v.requests_per_second * 3600)

    def routing_policy(self, workload: str) -> str:
        """The workload's routing policy among its variants."""
        return self.gateway.routing.get(workload, ROUTING_POLICIES[0])

    def routing_margin_percent(self, workload: str) -> float:
        """How much more than a variant's slo.e2eSeconds a budget must hold for the variant to fit it, percent."""
        return self.gateway.routing_margins.get(workload, DEFAULT_ROUTING_MARGIN_PERCENT)





# Draft 7: what editors validate with (VS Code's JSON language service and the YAML language server support draft 7
# fully and later drafts only in part: redhat-developer/yaml-language-server#856, vscode-json-languageservice#117).
SCHEMA_DRAFT = "http://json-schema.org/draft-07/schema#"


def stack_file_schema() -> dict[str, Any]:
    """The editor schema of a whole stack file (stacks/aifactory.schema.json), from the declarations alone:
    `aifactory:<key>` (or a bare `<key>`, which Pulumi reads in the project's namespace) under `config:`, other
    namespaces (aws:, pulumi:, ...) left open. The stack model also checks what a schema cannot say (cross-key
    rules, instance types, quotas); `aifactory schema --out stacks/aifactory.schema.json` writes it."""
    top = declared.section_schema(PlatformConfig)
    keys = {}
    for key in TOP_LEVEL_KEYS:
        node = dict(top["properties"][key])
        if node["type"] == ["object", "null"]:
            node["type"] = "object"  # a top-level section, when given, is a mapping
        keys[key] = node
    props: dict[str, Any] = {}
    for key in keys:
        props[f"{NAMESPACE}:{key}"] = props[key] = {"$ref": f"#/definitions/{key}"}
    known = "|".join(re.escape(k) for k in TOP_LEVEL_KEYS)
    return {
        "$schema": SCHEMA_DRAFT,
        "definitions": keys,
        "title": "aifactory stack settings (stacks/Pulumi.<env>.yaml)",
        "description": "Generated by `aifactory schema` from the stack model (infra/stack); do not edit by hand.",
        "type": "object",
        "properties": {"config": {
            "type": "object",
            "properties": props,
            # unknown aifactory:* keys, and unknown keys without a namespace (Pulumi reads those in the project's,
            # aifactory), are typos, as parse() says; other namespaces (aws:, pulumi:) are not ours
            "patternProperties": {f"^{NAMESPACE}:(?!(?:{known})$)": False, f"^(?!(?:{known})$)[^:]+$": False},
            "allOf": [{"anyOf": [{"required": [f"{NAMESPACE}:{key}"]}, {"required": [key]}]}
                      for key in TOP_LEVEL_KEYS if key in top["required"]],
        }},
        "required": ["config"],
    }


def parse(raw: Mapping[str, Any], *, stack: str) -> PlatformConfig:
    """Validate raw `aifactory:*` values (structured, key without namespace) into a PlatformConfig.

    Raises ConfigError listing every problem found, each with its key path.
    """
    r = _Reader()
    if not isinstance(raw, Mapping):
        raise ConfigError([Problem("config", f"expected a mapping, got {_kind(raw)}")])
    for key in raw:
        if key not in TOP_LEVEL_KEYS:
            r.fail(str(key), f"unknown key{did_you_mean(str(key), TOP_LEVEL_KEYS)}; allowed keys under "
                             f"'{NAMESPACE}:': {', '.join(TOP_LEVEL_KEYS)}")
    if "target" not in raw:
        r.fail("target", "is required (provider: aws with region and availabilityZones, or provider: existing "
                         "with kubeconfig)")
    target = _target(r, raw["target"]) if "target" in raw else None
    aws = target is not None and target.is_aws
    sections = tuple(k for k in TOP_LEVEL_KEYS if k != "kubernetesVersion")  # each read below
    k8s = r.fields(PlatformConfig, {k: raw[k] for k in ("kubernetesVersion",) if k in raw}, "",
                   handled=sections)["kubernetes_version"]
    cluster = network = None
    if aws:
        cluster = _cluster(r, raw.get("cluster"), stack)
        network = _network(r, raw.get("network"), stack)
    elif target is not None:
        for key in ("cluster", "network"):
            if key in raw:
                r.fail(key, "only applies to provider 'aws'")

    pools: dict[str, NodePool] = {}
    if "nodePools" not in raw:
        r.fail("nodePools", "is required: at least one GPU pool")
    for name, body in r.named(raw.get("nodePools", {}), "nodePools").items():
        if (pool := _node_pool(r, name, body, target)) is not None:
            pools[name] = pool
    if "nodePools" in raw and isinstance(raw["nodePools"], dict) and not any(p.gpu for p in pools.values()):
        if not r.problems:
            r.fail("nodePools", "needs at least one GPU pool")

    infiniband = None
    if any(p.fabric == "infiniband" for p in pools.values()) or "infiniband" in raw:
        infiniband = _infiniband(r, raw.get("infiniband"))
        infiniband = _ib_rails(r, infiniband, raw.get("infiniband"), pools)
        if aws and "infiniband" in raw:
            r.fail("infiniband", "only applies to provider 'existing'")
        _ip_range_fits(r, infiniband, pools)

    tenants = {n: _tenant(r, n, b) for n, b in r.named(raw.get("tenants", {}), "tenants").items()}
    seen_ns: dict[str, str] = {}
    for t in tenants.values():
        if t.namespace in seen_ns:
            r.fail(f"tenants.{t.name}.namespace",
                   f"{t.namespace!r} is already the namespace of tenant {seen_ns[t.namespace]!r}")
        seen_ns[t.namespace] = t.name

    models: dict[str, Model] = {}
    # `variant:` alone (null) still marks a model as a variant of its workload (then asked for its cost)
    for name, body in r.named(raw.get("models", {}), "models", keep_null=("variant",)).items():
        if (m := _model(r, name, body, pools, tenants, aws=aws)) is not None:
            models[name] = m
    _cross_model_checks(r, models, tenants, raw.get("tenants"))
    if cluster is not None:
        _aws_name_lengths(r, cluster.name, pools, models)
    tenants = _derive_quotas(r, raw.get("tenants"), tenants, models, pools)

    gateway = _gateway(r, raw.get("gateway"))
    _variant_checks(r, models, gateway.routing)
    _budget_checks(r, models, tenants, gateway)
    _issuer_tenants(r, gateway.auth, tenants)
    _fidelity_checks(r, models, gateway.fidelity)
    observability = _observability(r, raw.get("observability"), aws=aws)
    for pool in pools.values():
        if catalog.get(pool.instance_type).on_demand_usd_per_hour is None and \
                pool.instance_type not in observability.prices:
            r.fail(f"observability.prices.{pool.instance_type}",
                   f"is required: {pool.instance_type} (pool {pool.name!r}) has no on-demand price; "
                   "give its amortised $/hour")
    for section, ns in (("gateway", gateway.namespace), ("observability", observability.namespace)):
        if ns in seen_ns and _reserved_namespace(ns) is None:  # a reserved one is reported with the tenant
            r.fail(f"tenants.{seen_ns[ns]}", f"namespace {ns!r} is {section}.namespace; a tenant needs a namespace "
                                             "of its own")
        if ns == "default" or ns.startswith("kube-") or ns in _KIT_NAMESPACES:
            r.fail(f"{section}.namespace", f"{ns!r} is reserved for Kubernetes or another platform component "
                                           f"(kube-*, default, {', '.join(sorted(_KIT_NAMESPACES))})")
    if gateway.namespace == observability.namespace:
        r.fail("gateway.namespace", f"{gateway.namespace!r} is also observability.namespace; give each its own")

    if r.problems or target is None:
        raise ConfigError(r.problems or [Problem("target", "is required")])
    return PlatformConfig(stack=stack, target=target, kubernetes_version=k8s, cluster=cluster, network=network,
                          node_pools=pools, infiniband=infiniband, tenants=tenants, models=models, gateway=gateway,
                          observability=observability)


def raw_from_pulumi() -> dict[str, Any]:
    """The `aifactory:*` stack config as the Pulumi CLI passed it, structured values decoded."""
    import pulumi
    from pulumi.runtime import config as runtime_config

    keys = set(runtime_config.CONFIG.get()) | set(runtime_config.get_config_env())
    cfg = pulumi.Config(NAMESPACE)
    raw: dict[str, Any] = {}
    typos = [p for full in sorted(keys) if (p := namespace_typo_problem(full, full)) is not None]
    if typos:
        raise ConfigError(typos)
    for full in sorted(keys):
        ns, _, key = full.partition(":")
        if ns != NAMESPACE:
            continue
        text = cfg.get(key)
        if text is None:
            continue
        # The CLI passes structured values (objects, lists) as JSON text and scalars as plain text:
        # decode only the former, so kubernetesVersion "1.34" stays a string.
        raw[key] = cfg.get_object(key) if text.lstrip()[:1] in ("{", "[") else text
    return raw


def load() -> PlatformConfig:
    """The current stack's PlatformConfig, read through pulumi.Config."""
    import pulumi

    return parse(raw_from_pulumi(), stack=pulumi.get_stack())
