"""Observability (`observability`): retention, prices, workflow SLOs, ingest, volumes, alert receivers."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from components.k8s.settings import (
    Alerting,
    AlertReceiver,
    AlertRoutes,
    Heartbeat,
    ObservabilitySettings,
    SecretRef,
    WorkflowSlo,
)
from infra.stack import declared
from infra.stack.common import _known_type
from infra.stack.reader import (
    _Reader,
    _show,
    did_you_mean,
)


def _workflow_slo(r: _Reader, raw: Any, path: str, base: WorkflowSlo) -> WorkflowSlo:
    """A workflow's SLO; what it does not set is `base`'s (observability.slo for a named workflow)."""
    v = r.fields(WorkflowSlo, raw, path)
    d = raw if isinstance(raw, dict) else {}
    return WorkflowSlo(**{name: value if r.is_set(d, path, key) else getattr(base, name)
                          for (name, value), key in zip(v.items(), declared.allowed_keys(WorkflowSlo), strict=True)})


def _secret_ref(r: _Reader, d: Mapping[str, Any] | None, path: str, *, required: bool) -> SecretRef | None:
    if d is None or d.get("secret") is None:
        if required and d is not None:
            r.fail(f"{path}.secret", "is required: {name: <Secret in the observability namespace>, key: <its key>}")
        return None
    ref = r.section(SecretRef, d["secret"], f"{path}.secret")
    return ref if ref.name and ref.key else None


# The keys each receiver type takes, and of those the ones it requires (the declared AlertReceiver checks each
# value; which keys go with which type spans keys, so it is read here).
_RECEIVER_KEYS: dict[str, tuple[str, ...]] = {
    "slack": ("type", "channel", "secret"),
    "pagerduty": ("type", "secret"),
    "email": ("type", "to", "from", "smarthost", "username", "secret"),
    "webhook": ("type", "url", "secret"),
}
_RECEIVER_REQUIRES: dict[str, tuple[str, ...]] = {"slack": ("channel",), "email": ("to", "from", "smarthost"),
                                                  "webhook": ("url",)}
_SECRET_REQUIRED = ("slack", "pagerduty")


# Keys that would put a credential into the stack config in plain text: refused with the fix.
_PLAIN_SECRETS = ("apiUrl", "routingKey", "serviceKey", "password", "authPassword", "token", "bearerToken")


def _receiver(r: _Reader, name: str, d: dict[str, Any]) -> AlertReceiver | None:
    path = f"observability.alerting.receivers.{name}"
    typ = r.fields(AlertReceiver, {"type": d.get("type")}, path)["type"]
    keys = _RECEIVER_KEYS.get(typ, ())
    for key in d:
        if key in _PLAIN_SECRETS:
            r.fail(f"{path}.{key}", "credentials never go into the stack config; store it in a Kubernetes Secret "
                                    "and reference it with secret: {name, key}")
        elif typ is not None and key not in keys:
            r.fail(f"{path}.{key}", f"unknown key for type {typ!r}{did_you_mean(key, keys)}; "
                                   f"allowed keys: {', '.join(keys)}")
    if typ is None:
        return None
    secret = _secret_ref(r, d, path, required=typ in _SECRET_REQUIRED)
    for key in _RECEIVER_REQUIRES.get(typ, ()):
        if d.get(key) is None:
            r.fail(f"{path}.{key}", "is required")
    v = r.fields(AlertReceiver, {k: x for k, x in d.items() if k in keys}, path, handled=("secret",))
    return AlertReceiver(name, secret=secret, **v)


def _alerting(r: _Reader, raw: Any) -> Alerting:
    path = "observability.alerting"
    r.fields(Alerting, raw, path, handled=("heartbeat",))  # receivers, routes and heartbeat are read below
    d = raw if isinstance(raw, dict) else {}
    given = r.named(d.get("receivers") or {}, f"{path}.receivers")
    unread = not isinstance(d.get("receivers") or {}, dict)  # reported once: the names routes give are not checked
    receivers = {n: rc for n, b in given.items() if (rc := _receiver(r, n, b)) is not None}
    routes: dict[str, tuple[str, ...]] = {}
    for severity, names in r.fields(AlertRoutes, d.get("routes"), f"{path}.routes").items():
        for i, n in enumerate(names):
            if n not in given and not unread:  # a receiver given but refused is reported where it is written, once
                r.fail(f"{path}.routes.{severity}[{i}]",
                       f"{n!r} is not a receiver; receivers: {', '.join(sorted(given)) or '(none)'}")
        if names:
            routes[severity] = names
    return Alerting(receivers, routes, _heartbeat(r, d.get("heartbeat"), receivers,
                                                 given=None if unread else tuple(given)))


def _heartbeat(r: _Reader, raw: Any, receivers: Mapping[str, AlertReceiver], *,
               given: tuple[str, ...] | None) -> Heartbeat | None:
    """The heartbeat; `given`: every receiver named in the stack file (one refused is reported at its own key;
    None: the receivers were not a mapping, reported there)."""
    path = "observability.alerting.heartbeat"
    if raw is None:
        return None
    v = r.fields(Heartbeat, raw, path)
    name = v["receiver"]
    if name is not None and name not in receivers:
        if given is not None and name not in given:
            r.fail(f"{path}.receiver", f"{_show(name)} is not a receiver; receivers: "
                                       f"{', '.join(sorted(given)) or '(none)'}")
        return None
    return Heartbeat(**v) if name is not None else None


def _observability(r: _Reader, raw: Any, *, aws: bool = True) -> ObservabilitySettings:
    p = "observability"
    v = r.fields(ObservabilitySettings, raw, p, handled=("slo", "workflows", "alerting"))
    d = {k: x for k, x in raw.items() if x is not None} if isinstance(raw, dict) else {}
    for itype in [t for t in v["prices"] if _known_type(t) is not None]:
        r.fail(f"{p}.prices.{itype}", str(_known_type(itype)))
        del v["prices"][itype]
    base = _workflow_slo(r, (d or {}).get("slo"), f"{p}.slo", WorkflowSlo())
    workflows = {}
    for wname, body in r.named((d or {}).get("workflows") or {}, f"{p}.workflows").items():
        workflows[wname] = _workflow_slo(r, body, f"{p}.workflows.{wname}", base)
    if not aws and (d or {}).get("lokiMode") == "simple-scalable":
        r.fail(f"{p}.lokiMode", "'simple-scalable' needs object storage, which the kit creates on provider aws only; "
                                "use 'single-binary' (one replica on its volume) on provider existing")
    return ObservabilitySettings(
        **v,
        default_workflow_slo=base,
        workflows=workflows,
        alerting=_alerting(r, d.get("alerting")),
    )
