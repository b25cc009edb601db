"""What a caller's Istio sidecar does with an HTTP request to a Kubernetes Service port, modelled from the source of
the pinned Istio (istio/istio@1.28.3), so live tests can put the real Envoy gateway in front of "meshed" fakes.

For a Service port with an HTTP protocol (`appProtocol: http`) the caller's sidecar has one `0.0.0.0:<port>`
HTTP listener (pilot/pkg/networking/core/listener.go: "HTTP services can happily reside on 0.0.0.0:PORT and use
the wildcard route match"), whose route picks the destination by the request's Host:

- one virtual host per Service, with the domains `service_domains` returns (httproute.go
  generateVirtualHostDomains, GenerateAltVirtualHosts, generateAltVirtualHostsForKubernetesService; the sidecar's
  DNS domain is `<its namespace>.svc.<cluster domain>`, injection-template.yaml `--domain`);
- the port in the Host is ignored (`IgnorePortInHostMatching: true` in buildSidecarOutboundHTTPRouteConfig), so
  `name.ns:8000` matches as `name.ns` does;
- any other Host falls to the catch-all virtual host `*` -> `PassthroughCluster` (buildCatchAllVirtualHost, with
  the default ALLOW_ANY outbound policy), an ORIGINAL_DST cluster with no transport socket
  (cluster_builder.go buildDefaultPassthroughCluster): plaintext to the pod;
- the receiving sidecar under STRICT mTLS has only TLS filter chains on an HTTP port
  (filterchain_options.go inboundStrictFilterChainMatchOptions), so plaintext matches no filter chain and the
  connection is closed: the caller sees a reset.

`routes_to_service` answers whether a Host reaches the Service (mTLS, accepted) rather than the passthrough.
"""

from __future__ import annotations

from collections.abc import Collection

__all__ = ["CLUSTER_DOMAIN", "service_fqdn", "service_domains", "routes_to_service"]

CLUSTER_DOMAIN = "cluster.local"  # the chart's global.proxy.clusterDomain default


def service_fqdn(name: str, namespace: str, *, cluster_domain: str = CLUSTER_DOMAIN) -> str:
    return f"{name}.{namespace}.svc.{cluster_domain}"


def service_domains(name: str, namespace: str, *, caller_namespace: str, headless: bool,
                    cluster_domain: str = CLUSTER_DOMAIN) -> frozenset[str]:
    """The domains of the Service's virtual host in the route of a sidecar in `caller_namespace`.

    The FQDN and its absolute form (trailing dot; PILOT_ENABLE_ABSOLUTE_FQDN_VHOST_DOMAIN defaults to true),
    `name.namespace` and `name.namespace.svc`, and the bare `name` only from the Service's own namespace; a headless
    Service (resolution Passthrough) adds `*.<each>` (its pods' DNS names). No `:port` forms: the port is ignored.
    A headless Service has no address to add (0.0.0.0 is skipped)."""
    fqdn = service_fqdn(name, namespace, cluster_domain=cluster_domain)
    kube_alts = [f"{name}.{namespace}", f"{name}.{namespace}.svc"]
    if namespace == caller_namespace:
        kube_alts.append(name)
    domains = [fqdn, f"{fqdn}.", *kube_alts]
    if headless:
        domains += [f"*.{d}" for d in domains]
    return frozenset(domains)


def _envoy_domain_match(host: str, domain: str) -> bool:
    """Envoy's virtual host domain match: exact, or a suffix wildcard `*.<rest>` matching one or more characters
    before `.<rest>` (a bare `*` is the catch-all, which is the passthrough here, not the Service)."""
    if domain.startswith("*"):
        suffix = domain[1:]
        return len(host) > len(suffix) and host.endswith(suffix)
    return host == domain


def routes_to_service(host: str | None, domains: Collection[str]) -> bool:
    """Whether a request with this Host reaches the Service's virtual host (case-insensitive, port ignored)."""
    if not host:
        return False
    h = host.lower()
    if not h.startswith("[") and h.count(":") == 1:  # name:port (an IPv6 literal would be bracketed)
        h = h.rsplit(":", 1)[0]
    return any(_envoy_domain_match(h, d.lower()) for d in domains)
