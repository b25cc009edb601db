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
retried until `wait_seconds` after the requests. One row per hop: ok or broken, what it saw, the likely cause.

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
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import secrets
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

# Only modules that import no Pulumi SDK (and so no OpenTelemetry SDK) at import time: the CLI's parser imports this
# module, and node-check runs on hosts without them. The components' own modules are imported where they are used.
from components.k8s import naming
from components.k8s.envoy_config import SERVICE_NAME as GATEWAY_SERVICE_NAME
from components.k8s.otel_config import JAEGER_SERVICE, LOKI_GATEWAY_SERVICE
from components.k8s.values import ENGINES_EXPORTING_SPANS, Model
from infra.config import ConfigError, PlatformConfig, Problem
from infra.outputs import EXIT_FAILURE, EXIT_OK, write_json
from telemetry.names import DCGM, ENVOY, ISTIO, KSM, TRITON

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

DEFAULT_WAIT_SECONDS = 120.0  # how long signals may take to arrive after the requests
DEFAULT_REQUEST_TIMEOUT_SECONDS = 60.0  # one request through the gateway, a cold engine's first answer included
DEFAULT_QUERY_TIMEOUT_SECONDS = 10.0  # one query to Prometheus, Jaeger, Loki or Alertmanager
DEFAULT_POLL_SECONDS = 2.0
DEFAULT_MAX_TOKENS = 4  # the answer only has to exist: a few tokens cost nothing
PROMPT = "Reply with the word OK."
ALERTMANAGER_SERVICE = "kps-alertmanager"  # kube-prometheus-stack with fullnameOverride "kps" (observability.py)
ALERTMANAGER_PORT = 9093
WATCHDOG = "Watchdog"  # kube-prometheus-stack's always-firing alert (its general.rules)
POOL_LABEL_KSM = "label_aifactory_io_pool"  # kube-state-metrics' name of the nodes' aifactory.io/pool label
MODEL_LABEL = TRITON.L_POD_MODEL  # the pod's aifactory.io/model label on the model's scraped series
LOG_LOOKBACK_SECONDS = 600
CLIENT_TRACE_HEADER = "x-client-trace-id"


@dataclass(frozen=True, slots=True)
class Access:
    """Credentials and TLS for the URLs under `prefix` (the Kubernetes API server, from a kubeconfig)."""

    prefix: str
    headers: Mapping[str, str]
    context: ssl.SSLContext | None = None


@dataclass(frozen=True, slots=True)
class Endpoints:
    """Base URLs of what verify talks to; `access` authenticates those under the API server."""

    gateway: str
    prometheus: str
    jaeger: str
    loki: str
    alertmanager: str
    access: Access | None = field(default=None, compare=False)

    def auth(self, url: str) -> tuple[dict[str, str], ssl.SSLContext | None]:
        """Headers and TLS context for `url`: the kubeconfig's only for the API server (never sent elsewhere)."""
        a = self.access
        if a is not None and url.startswith(a.prefix + "/"):
            return dict(a.headers), a.context
        return {}, None


def default_endpoints(cfg: PlatformConfig) -> Endpoints:
    """The in-cluster Services of the stack: the gateway's, and kube-prometheus-stack's, Jaeger's and Loki's in the
    observability namespace (the names the kit's releases render)."""
    from components.k8s.gateway import SERVICE_PORT as GATEWAY_PORT
    from components.k8s.observability import JAEGER_QUERY_PORT
    from components.k8s.serving import PROMETHEUS_PORT, PROMETHEUS_SERVICE

    obs = cfg.observability.namespace
    return Endpoints(
        gateway=f"http://{naming.GATEWAY_APP}.{cfg.gateway.namespace}.svc:{GATEWAY_PORT}",
        prometheus=f"http://{PROMETHEUS_SERVICE}.{obs}.svc:{PROMETHEUS_PORT}",
        jaeger=f"http://{JAEGER_SERVICE}.{obs}.svc:{JAEGER_QUERY_PORT}",
        loki=f"http://{LOKI_GATEWAY_SERVICE}.{obs}.svc",
        alertmanager=f"http://{ALERTMANAGER_SERVICE}.{obs}.svc:{ALERTMANAGER_PORT}",
    )


KUBE_EXEC_TIMEOUT_SECONDS = 30.0


def _kube_problem(path: Path, message: str) -> ConfigError:
    return ConfigError([Problem("--kubeconfig", f"{path}: {message}")])


def _data_or_file(entry: Mapping[str, Any], key: str, base: Path, scratch: Path) -> str | None:
    """A kubeconfig credential given inline (`<key>-data`, base64) or as a file path (relative to the kubeconfig):
    the path of a file holding it."""
    if entry.get(f"{key}-data"):
        out = scratch / key
        out.write_bytes(base64.b64decode(entry[f"{key}-data"]))
        return str(out)
    if entry.get(key):
        return str((base.parent / entry[key]).resolve())
    return None


def _exec_token(path: Path, spec: Mapping[str, Any]) -> str:
    """A client-go exec credential plugin's token (ExecCredential status.token), e.g. `aws eks get-token`."""
    env = {**os.environ, **{e["name"]: e["value"] for e in spec.get("env") or []}}
    try:
        done = subprocess.run([spec["command"], *(spec.get("args") or [])], capture_output=True, text=True,
                              env=env, timeout=KUBE_EXEC_TIMEOUT_SECONDS, check=False)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise _kube_problem(path, f"exec credential plugin {spec['command']!r} failed: {err}") from None
    try:
        return str(json.loads(done.stdout)["status"]["token"])
    except (ValueError, KeyError, TypeError):
        raise _kube_problem(path, f"exec credential plugin {spec['command']!r} gave no status.token (exit "
                                  f"{done.returncode}): {_short(done.stderr or done.stdout)}") from None


def kube_access(path: Path, *, scratch: Path) -> Access:
    """The current context's API server and credentials: a token, a tokenFile, an exec plugin's token, or a client
    certificate; the cluster's CA (or insecure-skip-tls-verify). Files made from inline data go to `scratch`."""
    try:
        doc = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as err:
        raise _kube_problem(path, f"cannot read it: {err}") from None

    def named(kind: str, name: str | None) -> dict[str, Any]:
        found = next((e.get(kind[:-1]) or {} for e in doc.get(kind) or [] if e.get("name") == name), None)
        if found is None:
            raise _kube_problem(path, f"no {kind[:-1]} named {name!r} (current-context)")
        return found

    context = named("contexts", doc.get("current-context"))
    cluster, user = named("clusters", context.get("cluster")), named("users", context.get("user"))
    server = str(cluster.get("server") or "").rstrip("/")
    if not server.startswith(("https://", "http://")):
        raise _kube_problem(path, f"cluster server {server!r} is not an http(s):// URL")
    ctx: ssl.SSLContext | None = None
    if server.startswith("https://"):
        ctx = ssl.create_default_context(cafile=_data_or_file(cluster, "certificate-authority", path, scratch))
        if cluster.get("insecure-skip-tls-verify"):
            ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
        cert = _data_or_file(user, "client-certificate", path, scratch)
        if cert is not None:
            ctx.load_cert_chain(cert, _data_or_file(user, "client-key", path, scratch))
    token = user.get("token")
    if token is None and user.get("tokenFile"):
        token = (path.parent / user["tokenFile"]).read_text().strip()
    if token is None and user.get("exec"):
        token = _exec_token(path, user["exec"])
    return Access(server, {"authorization": f"Bearer {token}"} if token else {}, ctx)


def proxied_endpoints(cfg: PlatformConfig, access: Access, *, gateway: str) -> Endpoints:
    """Prometheus, Jaeger, Loki and Alertmanager through the API server's service proxy
    (/api/v1/namespaces/NS/services/NAME:PORT/proxy: a port number is resolved to the Service's port, kubernetes
    pkg/registry/core/service/storage/storage.go ResourceLocation), authenticated with the kubeconfig's
    credentials. Not the gateway: the API server drops the Authorization header once it has authenticated the
    caller (k8s.io/apiserver pkg/endpoints/filters/authentication.go), so the tenant's token could not reach it."""
    base = default_endpoints(cfg)

    def proxy(url: str) -> str:
        parts = urllib.parse.urlsplit(url)
        name, ns = (parts.hostname or "").split(".")[:2]
        return f"{access.prefix}/api/v1/namespaces/{ns}/services/{name}:{parts.port or 80}/proxy"

    return Endpoints(gateway=gateway, prometheus=proxy(base.prometheus), jaeger=proxy(base.jaeger),
                     loki=proxy(base.loki), alertmanager=proxy(base.alertmanager), access=access)


@dataclass(frozen=True, slots=True)
class Hop:
    """One row: a hop (of one model, or of the platform) and what verify found there."""

    hop: str
    model: str  # "" for platform-wide hops
    ok: bool
    saw: str
    cause: str = ""  # the likely cause when broken


@dataclass(frozen=True, slots=True)
class Report:
    stack: str
    endpoints: Endpoints
    hops: tuple[Hop, ...]

    @property
    def ok(self) -> bool:
        return all(h.ok for h in self.hops)


class _Unreachable(Exception):
    """No HTTP answer at all (refused, unresolvable, timed out)."""


@dataclass
class _Answer:
    status: int
    body: bytes
    headers: Mapping[str, str] = field(default_factory=dict)

    def json(self) -> Any:
        try:
            return json.loads(self.body)
        except ValueError:
            return None


def _get(endpoints: Endpoints, url: str, *, timeout: float) -> _Answer:
    headers, context = endpoints.auth(url)
    req = urllib.request.Request(url, headers=headers, method="GET")
    try:
        with urllib.request.urlopen(req, timeout=timeout, context=context) as r:
            return _Answer(r.status, r.read(), {k.lower(): v for k, v in r.headers.items()})
    except urllib.error.HTTPError as err:
        return _Answer(err.code, err.read(), {k.lower(): v for k, v in err.headers.items()})
    except (urllib.error.URLError, OSError) as err:
        raise _Unreachable(_reason(err)) from None


def _reason(err: BaseException) -> str:
    inner = getattr(err, "reason", None)
    return str(inner if inner is not None else err) or type(err).__name__


def _short(data: bytes | str, limit: int = 120) -> str:
    text = data.decode(errors="replace") if isinstance(data, bytes) else data
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


# --------------------------------------------------------------------------------------------
# the requests through the gateway


@dataclass
class _Sent:
    """What verify sent for one model (the signal checks look for it)."""

    model: Model
    trace_id: str
    request_id: str
    answered: bool  # the non-streamed request came back 200 with an answer


def _traceparent(trace_id: str) -> str:
    return f"00-{trace_id}-{secrets.token_hex(8)}-01"  # sampled: the gateway's span and the engine's are kept


def _body(model: Model, *, stream: bool) -> bytes:
    return json.dumps({"model": model.name, "messages": [{"role": "user", "content": PROMPT}],
                       "max_tokens": DEFAULT_MAX_TOKENS, "temperature": 0, "stream": stream}).encode()


def _post(endpoints: Endpoints, path: str, body: bytes, headers: Mapping[str, str], *, timeout: float
          ) -> tuple[int, Mapping[str, str], bytes]:
    base = endpoints.gateway
    parts = urllib.parse.urlsplit(base)
    extra, context = endpoints.auth(base.rstrip("/") + path)
    conn: http.client.HTTPConnection = (
        http.client.HTTPSConnection(parts.hostname or "", parts.port, timeout=timeout, context=context)
        if parts.scheme == "https" else http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=timeout))
    try:
        conn.request("POST", parts.path.rstrip("/") + path, body=body, headers={
            "content-type": "application/json", **headers, **extra})
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    except (OSError, http.client.HTTPException) as err:
        raise _Unreachable(_reason(err)) from None
    finally:
        conn.close()


def _refusal_cause(status: int, body: bytes, model: Model, *, token: bool) -> str:
    text = body.decode(errors="replace").lower()
    if status == 401:
        return ("the gateway refused the token: " + ("check that --token-file holds a current token of one of "
                "gateway.auth.issuers (issuer, audience, expiry)" if token else "no --token-file was given"))
    if status == 403:
        return (f"the token's tenant may not call {model.name} (tenant {model.tenant} or its shareWith), or its "
                "issuer may not name that tenant (gateway.auth.issuers[].tenants)")
    if status == 404:
        return f"the gateway has no route for model {model.name!r}: the deployed gateway config is not this stack's"
    if status == 429:
        return "the tenant's rate limit (tenants.<tenant>.rateLimit) refused the request"
    if status == 503 and ("no healthy upstream" in text or "no_healthy_upstream" in text):
        return ("no ready replica behind the gateway: the model's pods are not Ready (startup, image pull, GPU "
                "capacity), scaled to zero, or the gateway's health checks fail through the mesh")
    if status in (502, 503, 504) and ("upstream connect error" in text or "reset" in text):
        return ("the connection to the engine was reset or refused: the model's sidecar rejects the gateway's "
                "traffic (mesh Host routing or mTLS), or the engine process is restarting")
    if status == 504 or "upstream request timeout" in text:
        return f"the engine did not answer within the model's timeoutSeconds ({model.timeout_seconds:g}s)"
    if status >= 500:
        return "the engine answered with a server error: see the model's pod logs (kubectl logs, or Loki)"
    return f"the engine refused the request ({status}): the model may not serve chat completions"


def _chat_answer(body: bytes) -> str | None:
    """The text of an OpenAI chat completion, or None when the body is not one."""
    try:
        doc = json.loads(body)
        text = doc["choices"][0]["message"]["content"]
    except (ValueError, KeyError, IndexError, TypeError):
        return None
    return text if isinstance(text, str) else None


def _stream_events(body: bytes) -> list[str]:
    """The `data:` payloads of a server-sent event stream."""
    return [line[5:].strip() for line in body.decode(errors="replace").splitlines() if line.startswith("data:")]


def _request_hops(endpoints: Endpoints, model: Model, token: str | None, *, timeout: float
                  ) -> tuple[list[Hop], _Sent]:
    auth = {"authorization": f"Bearer {token}"} if token else {}
    trace_id, request_id = secrets.token_hex(16), str(uuid.uuid4())
    sent = _Sent(model, trace_id, request_id, answered=False)
    hops: list[Hop] = []
    for stream in (False, True):
        name = "stream" if stream else "request"
        tid = secrets.token_hex(16) if stream else trace_id  # the streamed request's trace is not looked up
        headers = {**auth, "traceparent": _traceparent(tid), CLIENT_TRACE_HEADER: tid,
                   **({} if stream else {"x-request-id": request_id})}
        started = time.monotonic()
        try:
            status, resp_headers, body = _post(endpoints, "/v1/chat/completions",
                                               _body(model, stream=stream), headers, timeout=timeout)
        except _Unreachable as err:
            hops.append(Hop(name, model.name, False, f"no answer from {endpoints.gateway}: {err}",
                            "the gateway is unreachable from here: check --gateway-url (the gateway's load "
                            "balancer or Service) and that its pods are Ready"))
            continue
        took = f"{time.monotonic() - started:.2f}s"
        if status != 200:
            hops.append(Hop(name, model.name, False, f"{status} in {took}: {_short(body)}",
                            _refusal_cause(status, body, model, token=token is not None)))
            continue
        if not stream:
            text = _chat_answer(body)
            ok = text is not None
            sent.answered = ok
            hops.append(Hop(name, model.name, ok, f"200 in {took}: " + (repr(_short(text or "", 40)) if ok else
                                                                       f"not a chat completion: {_short(body)}"),
                            "" if ok else "the engine behind the route does not answer the OpenAI chat API"))
        else:
            events = _stream_events(body)
            ok = resp_headers.get("content-type", "").startswith("text/event-stream") and len(events) >= 2 \
                and events[-1] == "[DONE]"
            hops.append(Hop(name, model.name, ok, f"200 in {took}: {len(events)} event(s)"
                            + ("" if ok else f", content-type {resp_headers.get('content-type', 'none')!r}, "
                                             f"last {_short(events[-1] if events else '', 40)!r}"),
                            "" if ok else "the answer was not an event stream ending in [DONE]: a proxy buffered "
                                          "or cut it (gateway.streamIdleTimeoutSeconds), or the engine failed"))
    return hops, sent


# --------------------------------------------------------------------------------------------
# the signals


Check = Callable[[], Hop]


def _prom_query(endpoints: Endpoints, expr: str, *, timeout: float) -> list[dict[str, Any]]:
    url = f"{endpoints.prometheus.rstrip('/')}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    ans = _get(endpoints, url, timeout=timeout)
    doc = ans.json()
    if ans.status != 200 or not isinstance(doc, dict) or doc.get("status") != "success":
        raise _Unreachable(f"Prometheus answered {ans.status}: {_short(ans.body)}")
    result = doc["data"]["result"]
    return result if isinstance(result, list) else []


def _trace_check(endpoints: Endpoints, sent: _Sent, *, timeout: float) -> Check:
    model = sent.model

    def check() -> Hop:
        url = f"{endpoints.jaeger.rstrip('/')}/api/traces/{sent.trace_id}"
        try:
            ans = _get(endpoints, url, timeout=timeout)
        except _Unreachable as err:
            return Hop("trace", model.name, False, f"no answer from Jaeger at {endpoints.jaeger}: {err}",
                       "Jaeger's query service is down or --jaeger-url is wrong")
        doc = ans.json()
        traces = (doc or {}).get("data") or [] if isinstance(doc, dict) else []
        if ans.status == 404 or not traces:
            return Hop("trace", model.name, False, f"no trace {sent.trace_id} in Jaeger ({ans.status})",
                       "the gateway's spans do not reach Jaeger: the gateway's otel_collector cluster cannot reach "
                       "the Collector, or the Collector's otlp/jaeger exporter fails (TelemetryExportFailing)")
        trace = traces[0]
        services = {pid: p.get("serviceName", "") for pid, p in (trace.get("processes") or {}).items()}
        spans = trace.get("spans") or []
        gateway = {s["spanID"] for s in spans if services.get(s.get("processID")) == GATEWAY_SERVICE_NAME}
        engine = [s for s in spans if services.get(s.get("processID")) == model.name]
        parents = {s.get("spanID"): [r.get("spanID") for r in s.get("references") or []] for s in spans}
        under = [s for s in engine if _descends(s.get("spanID"), gateway, parents)]
        saw = f"{len(spans)} span(s) of {', '.join(sorted(set(services.values()))) or 'no service'}"
        if not gateway:
            return Hop("trace", model.name, False, saw, f"no span of service {GATEWAY_SERVICE_NAME}: the trace "
                       "holds other services' spans only; the gateway's tracer is not exporting")
        if model.engine not in ENGINES_EXPORTING_SPANS:
            return Hop("trace", model.name, True, saw + f"; {model.engine} exports no engine spans")
        if not under:
            return Hop("trace", model.name, False, saw,
                       f"no span of service {model.name} under the gateway's span: the engine does not export "
                       "traces (--otlp-traces-endpoint, its OTEL_* environment, the image's OpenTelemetry SDK) "
                       "or does not continue the gateway's traceparent")
        return Hop("trace", model.name, True, saw + f"; {model.name} under {GATEWAY_SERVICE_NAME}")
    return check


def _descends(span_id: str | None, ancestors: set[str], parents: dict[str | None, list[str | None]]) -> bool:
    """Whether a span has one of `ancestors` above it in the trace: on a cluster the Istio sidecars' spans (the
    gateway pod's outbound, the model pod's inbound) sit between the gateway's span and the engine's."""
    seen: set[str | None] = set()
    todo = list(parents.get(span_id, []))
    while todo:
        up = todo.pop()
        if up in ancestors:
            return True
        if up not in seen:
            seen.add(up)
            todo += parents.get(up, [])
    return False


def _loki_lines(endpoints: Endpoints, query: str, *, since: float, timeout: float) -> list[tuple[dict[str, str], str]]:
    params = {"query": query, "start": str(int(since * 1e9)), "end": str(int((time.time() + 60) * 1e9)),
              "limit": "100", "direction": "backward"}
    ans = _get(endpoints, f"{endpoints.loki.rstrip('/')}/loki/api/v1/query_range?" + urllib.parse.urlencode(params),
               timeout=timeout)
    doc = ans.json()
    if ans.status != 200 or not isinstance(doc, dict) or doc.get("status") != "success":
        raise _Unreachable(f"Loki answered {ans.status}: {_short(ans.body)}")
    return [(s.get("stream") or {}, v[1]) for s in doc["data"]["result"] for v in s.get("values") or []]


def _logs_check(endpoints: Endpoints, cfg: PlatformConfig, sent: _Sent, since: float, *, timeout: float) -> Check:
    model = sent.model
    gw_ns, model_ns = cfg.gateway.namespace, cfg.tenant_of(model).namespace

    def check() -> Hop:
        try:
            gateway = _loki_lines(endpoints, f'{{namespace="{gw_ns}"}} |= "{sent.trace_id}"', since=since,
                                  timeout=timeout)
            request_id = sent.request_id
            for _, line in gateway:
                try:
                    request_id = json.loads(line[line.index("{"):]).get("request_id") or request_id
                    break
                except ValueError:
                    continue
            lines = _loki_lines(endpoints, f'{{namespace=~"{gw_ns}|{model_ns}"}} |= "{request_id}"', since=since,
                                timeout=timeout) if gateway else []
        except _Unreachable as err:
            return Hop("logs", model.name, False, f"no answer from Loki at {endpoints.loki}: {err}",
                       "Loki's gateway is down or --loki-url is wrong")
        if not gateway:
            return Hop("logs", model.name, False, f"no line of namespace {gw_ns} with trace id {sent.trace_id}",
                       "the gateway's access log does not reach Loki: Alloy is not running on the gateway's nodes "
                       "or cannot push (LogShippingDropping), or Loki refuses writes (LokiRequestsFailing)")
        by_ns: dict[str, int] = {}
        for labels, _ in lines:
            ns = labels.get("namespace", "?")
            by_ns[ns] = by_ns.get(ns, 0) + 1
        counts = ", ".join(f"{ns} {n}" for ns, n in sorted(by_ns.items())) or "none"
        return Hop("logs", model.name, True, f"request {request_id}: lines by namespace: {counts}")
    return check


def _metric_checks(endpoints: Endpoints, cfg: PlatformConfig, model: Model, *, timeout: float) -> list[Check]:
    from components.k8s.serving import scaling_query, workload_name

    ns = cfg.tenant_of(model).namespace
    sel = f'namespace="{ns}", {MODEL_LABEL}="{model.name}"'
    engine_names = "vllm:.+" if model.engine == "vllm" else "nv_.+"
    probes = [
        ("gateway", f'sum({ENVOY.RQ_TOTAL}{{{ENVOY.L_CLUSTER}="{model.name}"}})',
         "Prometheus does not scrape the gateway's stats port (its ServiceMonitor, the stats listener)"),
        ("engine", f'count({{__name__=~"{engine_names}", {sel}}})',
         "Prometheus does not scrape the engine (the model's ServiceMonitor over mTLS, the engine's metrics port)"),
        ("sidecar", f'sum({ISTIO.REQUESTS}{{reporter="destination", destination_workload_namespace="{ns}", '
                    f'destination_workload="{workload_name(model)}"}})',
         "the model's Istio sidecar is not scraped (the istio-sidecars PodMonitor, port 15090) or has no sidecar"),
    ]

    def probe(what: str, expr: str, cause: str) -> Check:
        def check() -> Hop:
            try:
                result = _prom_query(endpoints, expr, timeout=timeout)
            except _Unreachable as err:
                return Hop(f"metrics:{what}", model.name, False, f"no answer from Prometheus: {err}",
                           "Prometheus is down or --prometheus-url is wrong")
            if not result:
                return Hop(f"metrics:{what}", model.name, False, f"no data for {expr}", cause)
            return Hop(f"metrics:{what}", model.name, True, f"{expr} = {result[0]['value'][1]}")
        return check

    checks = [probe(*p) for p in probes]
    if model.replicas.autoscaled:
        query, _, threshold = scaling_query(cfg, model)
        checks.append(probe("autoscaling", query,
                            "KEDA's query has no data, so KEDA reads 0 (ignoreNullValues) and never scales the model "
                            f"up (threshold {threshold}): the engine's queue metric is missing or renamed"))
    return checks


def _gpu_check(endpoints: Endpoints, cfg: PlatformConfig, *, timeout: float) -> Check | None:
    pools = sorted(p.name for p in cfg.gpu_pools)
    if not pools:
        return None
    expected = sum(p.min_size for p in cfg.gpu_pools)  # nodes that exist whatever the autoscaler does
    nodes_q = f'max by (node) ({KSM.NODE_LABELS}{{{POOL_LABEL_KSM}=~"{"|".join(pools)}"}})'
    dcgm_q = (f'count by (node) (label_replace(label_replace({DCGM.GPU_UTIL}, "node", "$1", "Hostname", "(.+)"), '
              f'"node", "$1", "hostname", "(.+)"))')

    def check() -> Hop:
        try:
            nodes = {r["metric"].get("node", "") for r in _prom_query(endpoints, nodes_q, timeout=timeout)}
            dcgm = {r["metric"].get("node", "") for r in _prom_query(endpoints, dcgm_q, timeout=timeout)}
        except _Unreachable as err:
            return Hop("gpu-metrics", "", False, f"no answer from Prometheus: {err}",
                       "Prometheus is down or --prometheus-url is wrong")
        missing = sorted(nodes - dcgm)
        saw = f"{len(nodes)} GPU node(s) of pools {', '.join(pools)}; DCGM series on {len(nodes & dcgm)}"
        if len(nodes) < expected:
            return Hop("gpu-metrics", "", False, saw + f", fewer than the pools' minimum size ({expected})",
                       "kube-state-metrics is not scraped or does not export the nodes' aifactory.io/pool label "
                       "(metricLabelsAllowlist), or the GPU nodes have not joined")
        if missing:
            return Hop("gpu-metrics", "", False, saw + f"; none from {', '.join(missing)}",
                       "the DCGM exporter is not running or not scraped on those nodes (GPU operator "
                       "dcgmExporter, its ServiceMonitor, the node's GPU driver)")
        return Hop("gpu-metrics", "", True, saw)
    return check


def _watchdog_check(endpoints: Endpoints, *, timeout: float) -> Check:
    def check() -> Hop:
        url = (f"{endpoints.alertmanager.rstrip('/')}/api/v2/alerts?"
               + urllib.parse.urlencode({"filter": f'alertname="{WATCHDOG}"', "active": "true"}))
        try:
            ans = _get(endpoints, url, timeout=timeout)
        except _Unreachable as err:
            return Hop("alerting", "", False, f"no answer from Alertmanager at {endpoints.alertmanager}: {err}",
                       "Alertmanager is down or --alertmanager-url is wrong")
        alerts = ans.json()
        if ans.status != 200 or not isinstance(alerts, list):
            return Hop("alerting", "", False, f"Alertmanager answered {ans.status}: {_short(ans.body)}",
                       "not Alertmanager's API v2 at --alertmanager-url")
        watchdogs = [a for a in alerts if (a.get("labels") or {}).get("alertname") == WATCHDOG]
        if not watchdogs:
            return Hop("alerting", "", False, f"no active {WATCHDOG} among {len(alerts)} alert(s)",
                       "Prometheus does not deliver alerts to Alertmanager (its alertmanagers config), or "
                       "kube-prometheus-stack's general rules are off: nothing would page")
        return Hop("alerting", "", True, f"{WATCHDOG} active since {watchdogs[0].get('startsAt', '?')}")
    return check


def _await(checks: Sequence[Check], *, wait_seconds: float, poll_seconds: float) -> list[Hop]:
    """Each check until it passes or the wait is over; the last answer of each, in order."""
    deadline = time.monotonic() + wait_seconds
    results: list[Hop | None] = [None] * len(checks)
    while True:
        for i, check in enumerate(checks):
            current = results[i]
            if current is None or not current.ok:
                results[i] = check()
        if all(r is not None and r.ok for r in results) or time.monotonic() >= deadline:
            return [r for r in results if r is not None]
        time.sleep(min(poll_seconds, max(0.0, deadline - time.monotonic())))


def verify(cfg: PlatformConfig, *, stack: str, endpoints: Endpoints, token: str | None,
           models: Iterable[str] | None = None, wait_seconds: float = DEFAULT_WAIT_SECONDS,
           request_timeout_seconds: float = DEFAULT_REQUEST_TIMEOUT_SECONDS,
           query_timeout_seconds: float = DEFAULT_QUERY_TIMEOUT_SECONDS,
           poll_seconds: float = DEFAULT_POLL_SECONDS) -> Report:
    """Requests through the gateway for each model (`models`: default every model of the stack), then every signal
    check, retried until `wait_seconds` after the requests."""
    chosen = [cfg.models[m] for m in sorted(models if models is not None else cfg.models)]
    since = time.time() - LOG_LOOKBACK_SECONDS
    hops: list[Hop] = []
    checks: list[Check] = []
    q = query_timeout_seconds
    for model in chosen:
        request_hops, sent = _request_hops(endpoints, model, token, timeout=request_timeout_seconds)
        hops += request_hops
        if sent.answered:  # a request that never arrived leaves no signal to look for
            checks += [_trace_check(endpoints, sent, timeout=q), _logs_check(endpoints, cfg, sent, since, timeout=q)]
        checks += _metric_checks(endpoints, cfg, model, timeout=q)
    gpu = _gpu_check(endpoints, cfg, timeout=q)
    checks += [*([gpu] if gpu is not None else []), _watchdog_check(endpoints, timeout=q)]
    hops += _await(checks, wait_seconds=wait_seconds, poll_seconds=poll_seconds)
    return Report(stack, endpoints, tuple(hops))


def format_report(report: Report) -> str:
    """One row per hop: status, hop, model, what it saw, and the likely cause of a broken one."""
    hop_w = max((len(h.hop) for h in report.hops), default=4)
    model_w = max((len(h.model) for h in report.hops), default=1) or 1
    lines = [f"verify {report.stack}: gateway {report.endpoints.gateway}"]
    for h in report.hops:
        lines.append(f"  {'ok' if h.ok else 'BROKEN':<6}  {h.hop:<{hop_w}}  {h.model or '-':<{model_w}}  {h.saw}")
        if not h.ok:
            lines.append(f"  {'':<6}  {'':<{hop_w}}  {'':<{model_w}}  likely: {h.cause}")
    broken = sum(not h.ok for h in report.hops)
    lines.append(f"{len(report.hops)} hop(s), {broken} broken" if broken else f"{len(report.hops)} hop(s), all ok")
    return "\n".join(lines) + "\n"


def report_doc(report: Report) -> dict[str, Any]:
    """What `--json` writes."""
    e = report.endpoints  # never `access`: it holds the kubeconfig's credentials
    endpoints = {"gateway": e.gateway, "prometheus": e.prometheus, "jaeger": e.jaeger, "loki": e.loki,
                 "alertmanager": e.alertmanager}
    return {"stack": report.stack, "ok": report.ok, "endpoints": endpoints,
            "hops": [asdict(h) for h in report.hops]}


def _url(flag: str, value: str) -> Problem | None:
    parts = urllib.parse.urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return Problem(flag, f"{value!r} is not an http(s):// URL with a host")
    return None


def verify_command(stack: str, *, urls: Mapping[str, str | None], token_file: Path | None = None,
                   kubeconfig: Path | None = None,
                   models: Sequence[str] | None = None, stacks_dir: Path | None = None,
                   wait_seconds: float = DEFAULT_WAIT_SECONDS,
                   request_timeout_seconds: float = DEFAULT_REQUEST_TIMEOUT_SECONDS,
                   json_out: Path | None = None) -> int:
    """`aifactory verify`: ConfigError (exit 2) for bad input; exit 1 when a hop is broken. `urls` maps each
    Endpoints field to a URL given on the command line (None: the in-cluster default)."""
    from infra.synth import load_stack

    cfg = load_stack(stack, stacks_dir)
    problems = [p for f, u in urls.items() if u is not None and (p := _url(f"--{f}-url", u)) is not None]
    unknown = sorted(set(models or ()) - set(cfg.models))
    if unknown:
        problems.append(Problem("--model", f"{', '.join(unknown)}: not a model of {stack}; models: "
                                           f"{', '.join(sorted(cfg.models))}"))
    if wait_seconds < 0 or request_timeout_seconds <= 0:
        problems.append(Problem("--wait" if wait_seconds < 0 else "--timeout", "must be a positive number of seconds"))
    token = None
    if token_file is not None:
        try:
            token = token_file.read_text().strip() or None
        except OSError as err:
            problems.append(Problem("--token-file", f"{str(token_file)!r}: {err.strerror}"))
    if problems:
        raise ConfigError(problems)
    with tempfile.TemporaryDirectory(prefix="aifactory-verify-") as scratch:
        base = default_endpoints(cfg)
        if kubeconfig is not None:
            base = proxied_endpoints(cfg, kube_access(kubeconfig, scratch=Path(scratch)),
                                     gateway=urls.get("gateway") or base.gateway)
        given: dict[str, Any] = {f: u for f, u in urls.items() if u is not None}
        report = verify(cfg, stack=stack, endpoints=replace(base, **given), token=token, models=models or None,
                        wait_seconds=wait_seconds, request_timeout_seconds=request_timeout_seconds)
    human = sys.stderr if json_out is not None and str(json_out) == "-" else sys.stdout
    human.write(format_report(report))
    human.flush()
    if json_out is not None:
        write_json(json_out, report_doc(report))
    return EXIT_OK if report.ok else EXIT_FAILURE
