"""`aifactory verify STACK`: after `pulumi up`, does a request reach every model and come back, and does each signal
of it arrive where the platform's operators will look for it?

Read-only and bounded: per model one non-streamed and one streamed chat completion through the gateway (a few
tokens each, with the caller's token), then queries only:

    request / stream   the gateway's answer: status, an OpenAI-shaped body, SSE chunks ending in [DONE]
    trace              Jaeger has the request's trace (the traceparent verify sent: the gateway continues it) with
                       a gateway span and an engine span under it (GET /api/traces/{id}). The request also carries
                       x-client-trace-id, which Envoy traces at `client_sampling` (default 100%) whatever the
                       gateway's random sampling (Envoy v1.40 docs: http_conn_man/headers, x-client-trace-id)
    logs               Loki has the gateway's access-log line of the request (it logs trace_id and request_id),
                       then the request id's lines by namespace (GET /loki/api/v1/query_range)
    metrics            Prometheus has the gateway's, the engine's and the model sidecar's series of the model
                       (GET /api/v1/query)
    autoscaling        KEDA's query of an autoscaled model returns data (the ScaledObject's own PromQL)
    gpu-metrics        every node of a GPU pool has DCGM series
    alerting           Alertmanager has the always-firing Watchdog (GET /api/v2/alerts)

Signals arrive late (Envoy flushes spans every 5 s, scrapes every 15-30 s, Alloy tails files), so signal hops are
retried until `wait_seconds` after the requests; a hop whose endpoint's name does not resolve here is broken at once,
never waited on. `progress` hears each hop as it is tried and what it waits for (the CLI prints it on stderr). One
row per hop: ok or broken, what it saw, the likely cause.

APIs at the pinned versions: Jaeger v2's query service keeps the UI's HTTP API, GET /api/traces/{trace id}
(jaegertracing/jaeger cmd/query/app/http_handler.go: getTrace; a trace is {traceID, spans[{spanID, references
[{refType, spanID}], processID}], processes{id: {serviceName}}}, 404 when unknown); Prometheus HTTP API v1
(https://prometheus.io/docs/prometheus/latest/querying/api/, /api/v1/query); Loki
(https://grafana.com/docs/loki/latest/reference/loki-http-api/, /loki/api/v1/query_range: data.result[].values
[[ns, line]]); Alertmanager API v2 (prometheus/alertmanager api/v2/openapi.yaml, GET /alerts?filter=...); W3C Trace
Context (https://www.w3.org/TR/trace-context/, traceparent 00-<trace id>-<parent id>-01).

Where it looks (`Endpoints`): the in-cluster Service names the kit deploys (run it from a pod or a host that
resolves cluster DNS), any URL given on the command line (a load balancer, an ingress, `kubectl port-forward`), or
with a kubeconfig the API server's service proxy for every backend but the gateway (`proxied_endpoints`).

Modules: `endpoints` (where verify talks to, the kubeconfig's access, one bounded GET), `gateway` (the requests),
`signals` (the checks of each signal), `report` (the rows, as text and JSON) and `command` (`verify`,
`verify_command`). Every module imports no Pulumi SDK (and so no OpenTelemetry SDK) at import time: the CLI's
parser imports this package, and node-check runs on hosts without them; the components' own modules are imported
where they are used.
"""

from infra.verify.command import DEFAULT_REQUEST_TIMEOUT_SECONDS, DEFAULT_WAIT_SECONDS, verify, verify_command
from infra.verify.endpoints import (
    ALERTMANAGER_PORT,
    ALERTMANAGER_SERVICE,
    Access,
    Endpoints,
    default_endpoints,
    kube_access,
    proxied_endpoints,
)
from infra.verify.gateway import DEFAULT_MAX_TOKENS
from infra.verify.report import Hop, Report, format_report, report_doc

__all__ = [
    "DEFAULT_WAIT_SECONDS",
    "DEFAULT_REQUEST_TIMEOUT_SECONDS",
    "DEFAULT_MAX_TOKENS",
    "ALERTMANAGER_SERVICE",
    "ALERTMANAGER_PORT",
    "Endpoints",
    "Hop",
    "Report",
    "default_endpoints",
    "Access",
    "kube_access",
    "proxied_endpoints",
    "verify",
    "format_report",
    "report_doc",
    "verify_command",
]
