"""Where verify talks to and how: the in-cluster services the stack renders (`default_endpoints`), the
Kubernetes API server's service proxy with a kubeconfig's credentials (`kube_access`, `proxied_endpoints`), and
one bounded HTTP GET with an endpoint's credentials and the wording of what did not answer."""

from __future__ import annotations

import base64
import json
import os
import socket
import ssl
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from components.k8s import naming
from components.k8s.otel_config import JAEGER_SERVICE, LOKI_GATEWAY_SERVICE
from infra.config import ConfigError, PlatformConfig, Problem

__all__ = [
    "ALERTMANAGER_SERVICE",
    "ALERTMANAGER_PORT",
    "Access",
    "Endpoints",
    "default_endpoints",
    "KUBE_EXEC_TIMEOUT_SECONDS",
    "kube_access",
    "proxied_endpoints",
    "ENDPOINT_FIELDS",
    "unresolved_names",
    "unresolved_cause",
    "Unreachable",
    "Answer",
    "http_get",
    "reason_of",
    "shorten",
]


ALERTMANAGER_SERVICE = "kps-alertmanager"  # kube-prometheus-stack with fullnameOverride "kps" (observability.py)

ALERTMANAGER_PORT = 9093


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
                                  f"{done.returncode}): {shorten(done.stderr or done.stdout)}") from None


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


ENDPOINT_FIELDS = ("gateway", "prometheus", "jaeger", "loki", "alertmanager")  # each has a --<field>-url flag


def unresolved_names(endpoints: Endpoints) -> dict[str, str]:
    """The endpoints (by field) whose host name does not resolve here, each with why: "HOST does not resolve here
    (the resolver's words)". Each host is asked once; an address always resolves. Nothing waits on such a name:
    an in-cluster Service name does not start resolving outside the cluster while verify retries."""
    reasons: dict[str, str | None] = {}
    out: dict[str, str] = {}
    for name in ENDPOINT_FIELDS:
        host = urllib.parse.urlsplit(getattr(endpoints, name)).hostname or ""
        if host not in reasons:
            try:
                socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
                reasons[host] = None
            except (socket.gaierror, UnicodeError) as err:  # UnicodeError: not a valid host name at all
                reasons[host] = f"{host} does not resolve here ({getattr(err, 'strerror', None) or err})"
        reason = reasons[host]
        if reason is not None:
            out[name] = reason
    return out


def unresolved_cause(name: str) -> str:
    """The likely cause of an endpoint (an Endpoints field) whose name does not resolve, and the fix."""
    give = "(the gateway's load balancer)" if name == "gateway" else "(a port-forward, an ingress) or --kubeconfig"
    return (f"the in-cluster Service names resolve only where cluster DNS does: run verify from a pod, or give "
            f"--{name}-url {give}")


class Unreachable(Exception):
    """No HTTP answer at all (refused, unresolvable, timed out)."""


@dataclass
class Answer:
    status: int
    body: bytes
    headers: Mapping[str, str] = field(default_factory=dict)

    def json(self) -> Any:
        try:
            return json.loads(self.body)
        except ValueError:
            return None


def http_get(endpoints: Endpoints, url: str, *, timeout: float) -> Answer:
    headers, context = endpoints.auth(url)
    req = urllib.request.Request(url, headers=headers, method="GET")
    try:
        with urllib.request.urlopen(req, timeout=timeout, context=context) as r:
            return Answer(r.status, r.read(), {k.lower(): v for k, v in r.headers.items()})
    except urllib.error.HTTPError as err:
        return Answer(err.code, err.read(), {k.lower(): v for k, v in err.headers.items()})
    except (urllib.error.URLError, OSError) as err:
        raise Unreachable(reason_of(err)) from None


def reason_of(err: BaseException) -> str:
    inner = getattr(err, "reason", None)
    return str(inner if inner is not None else err) or type(err).__name__


def shorten(data: bytes | str, limit: int = 120) -> str:
    text = data.decode(errors="replace") if isinstance(data, bytes) else data
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
