"""What the gateway's Envoy config and the budget service must agree on, in one place that imports nothing (the
service's image copies this package alone; the bootstrap builders import this module only)."""

from __future__ import annotations

__all__ = ["ROUTE_ATTRIBUTE", "PATH_ATTRIBUTE", "TENANT_ATTRIBUTE", "REQUEST_ATTRIBUTES", "TENANT_HEADER",
           "METADATA_NAMESPACE", "GRPC_PORT", "METRICS_PORT", "SETTLE_DRAIN_SECONDS", "SWEEP_INTERVAL_SECONDS"]

ROUTE_ATTRIBUTE = "xds.route_name"  # the ext_proc request attribute that names the route the request took
TENANT_HEADER = "x-aifactory-tenant"  # set by the gateway from the token's tenant claim (clients' copies removed)
PATH_ATTRIBUTE = "request.path"
# an ext_proc request attribute is a CEL expression: this one reads the tenant header without sending every header
TENANT_ATTRIBUTE = f"request.headers['{TENANT_HEADER}']"
# what admission asks Envoy to send with the request's body (its only message: the headers are not sent)
REQUEST_ATTRIBUTES = (ROUTE_ATTRIBUTE, PATH_ATTRIBUTE, TENANT_ATTRIBUTE)
METADATA_NAMESPACE = "aifactory.budget"  # dynamic metadata the access log reads: the refusal, the reservation
GRPC_PORT = 9000
METRICS_PORT = 9090
# on SIGTERM, once the streams have ended: how long the service still tries to write its pending settlements (the
# store down: waiting for its breaker) before it drops them (counted); the pod's grace period adds a margin to it
# (components/k8s/gateway/budget_objects.py SETTLE_MARGIN_SECONDS)
SETTLE_DRAIN_SECONDS = 8
# every service replica sweeps the reservations nobody settled this often on average (each turn jittered by half of it
# either way, so replicas do not sweep in step): a leaked reservation is given back within its deadline plus about this
SWEEP_INTERVAL_SECONDS = 10.0
