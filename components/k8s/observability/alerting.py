"""Alertmanager: severity routes to the stack's receivers, credentials read from mounted Secrets, the
Watchdog heartbeat, and the notification templates."""

from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components.k8s.observability.spec import BackendsView
from components.k8s.settings import (
    AlertReceiver,
)
from telemetry.names import ENVOY

__all__ = [
    "ALERTMANAGER_SECRETS_DIR",
    "ALERT_TEMPLATE_FILE",
    "ALERT_TEMPLATES_GLOB",
    "WATCHDOG_GROUP_INTERVAL",
    "SUBJECT_LABELS",
    "PER_POD_ALERTS",
    "watchdog_route",
    "alertmanager_config",
    "alert_templates",
    "alertmanager_secrets",
    "alertmanager_secret_reads",
]

# kube-prometheus-stack mounts each of `alertmanagerSpec.secrets` at /etc/alertmanager/secrets/<name>/
# (values.yaml of the pinned chart, `alertmanager.alertmanagerSpec.secrets`).
ALERTMANAGER_SECRETS_DIR = "/etc/alertmanager/secrets"
# templateFiles land in /etc/alertmanager/config/, which the chart's default `templates` glob reads.
ALERT_TEMPLATE_FILE = "aifactory.tmpl"
ALERT_TEMPLATES_GLOB = "/etc/alertmanager/config/*.tmpl"
# Alertmanager re-sends a firing group only at a group_interval tick, so repeat_interval takes effect rounded up
# to a multiple of it (alertmanager docs, configuration, <route>): 1m keeps the heartbeat close to its interval.
WATCHDOG_GROUP_INTERVAL = "1m"


# What an alert is about, beside its name: the labels the severity inhibitions require equal, so a critical alert
# silences the warning of the same thing only. Alertmanager takes a label missing from both alerts as equal
# (prometheus/alertmanager@v0.25.0 inhibit/inhibit.go, InhibitRule.hasEqual), so with kube-prometheus-stack's
# [namespace, alertname] alone, one model's critical gateway alert silenced every other model's warning of that name:
# none of the kit's aggregated alerts carries a namespace. Each label is one the kit's alerts with a critical and a
# warning rule of one name fire with (dashboards/rules.py, dashboards/gateway_alerts.py): a gateway cluster
# (GatewayModelUnavailable), a workflow and tenant (WorkflowLatencyBudgetBurn, WorkflowErrorBudgetBurn), a GPU
# (GpuXidError: DCGM's UUID), a model, and a pod (GatewayOverloaded: one gateway pod refusing every request must not
# silence another gateway pod's reset streams).
SUBJECT_LABELS = ("namespace", "alertname", ENVOY.L_CLUSTER, "model", "workflow", "tenant", "UUID", "pod")


# Alerts notified one group per pod, not per namespace and name: GatewayDrainCutsRequests (dashboards/gateway_alerts.py,
# warning) and its sibling TokenBudgetDrainCutsStreams (dashboards/budgets.py) come at most 2 minutes before their
# pod's cut, and a second pod of the same namespace joining the first one's
# open group would be notified only at the group's next group_interval tick (5 minutes: alertmanager docs,
# configuration, <route>), after its own cut. Each is a child route of its severity's routes (it inherits the
# receiver; the parent's `continue` still sends it to the severity's other receivers).
PER_POD_ALERTS: dict[str, tuple[str, ...]] = {"warning": ("GatewayDrainCutsRequests", "TokenBudgetDrainCutsStreams")}


def _per_pod_routes(severity: str) -> list[dict[str, Any]]:
    names = PER_POD_ALERTS.get(severity, ())
    return [{"matchers": [f'alertname = "{name}"'], "group_by": ["namespace", "alertname", "pod"]}
            for name in names]


def _inhibit_rules() -> list[dict[str, Any]]:
    """The chart's severity and InfoInhibitor rules, by subject; and a model's gateway outage paged once: while
    GatewayModelUnavailable pages for a cluster (every request refused: 503 no healthy upstream), the same cluster's
    GatewayServerErrorRatioHigh (those 503s) is silenced."""
    return [
        {"source_matchers": ['severity = "critical"'], "target_matchers": ['severity =~ "warning|info"'],
         "equal": list(SUBJECT_LABELS)},
        {"source_matchers": ['severity = "warning"'], "target_matchers": ['severity = "info"'],
         "equal": list(SUBJECT_LABELS)},
        # kube-prometheus-stack's InfoInhibitor silences info alerts of a namespace while it fires.
        {"source_matchers": ['alertname = "InfoInhibitor"'], "target_matchers": ['severity = "info"'],
         "equal": ["namespace"]},
        {"target_matchers": ['alertname = "InfoInhibitor"']},
        {"source_matchers": ['alertname = "GatewayModelUnavailable"', 'severity = "critical"'],
         "target_matchers": ['alertname = "GatewayServerErrorRatioHigh"'], "equal": [ENVOY.L_CLUSTER]},
    ]


def _secret_file(receiver: AlertReceiver) -> str:
    assert receiver.secret is not None
    return f"{ALERTMANAGER_SECRETS_DIR}/{receiver.secret.name}/{receiver.secret.key}"


TITLE = '{{ template "aifactory.title" . }}'
TEXT = '{{ template "aifactory.text" . }}'


def _receiver_config(receiver: AlertReceiver) -> dict[str, Any]:
    """One Alertmanager receiver; credentials are `*_file` paths into the mounted Secret, never values."""
    out: dict[str, Any] = {"name": receiver.name}
    if receiver.type == "slack":
        out["slack_configs"] = [{"api_url_file": _secret_file(receiver), "channel": receiver.channel,
                                 "send_resolved": True, "title": TITLE, "text": TEXT}]
    elif receiver.type == "pagerduty":
        out["pagerduty_configs"] = [{"routing_key_file": _secret_file(receiver), "send_resolved": True,
                                     "description": TITLE, "details": {"alerts": TEXT},
                                     "links": [{"href": '{{ (index .Alerts 0).Annotations.runbook_url }}',
                                                "text": "Runbook"}]}]
    elif receiver.type == "email":
        email: dict[str, Any] = {"to": receiver.to, "from": receiver.sender, "smarthost": receiver.smarthost,
                                 "send_resolved": True, "headers": {"Subject": TITLE}, "text": TEXT}
        if receiver.username is not None:
            email["auth_username"] = receiver.username
        if receiver.secret is not None:
            email["auth_password_file"] = _secret_file(receiver)
        out["email_configs"] = [email]
    else:  # webhook: the JSON payload carries every label and annotation (runbook_url included)
        hook: dict[str, Any] = {"url": receiver.url, "send_resolved": True}
        if receiver.secret is not None:
            hook["http_config"] = {"authorization": {"type": "Bearer", "credentials_file": _secret_file(receiver)}}
        out["webhook_configs"] = [hook]
    return out


def watchdog_route(cfg: BackendsView) -> dict[str, Any]:
    """The always-firing Watchdog alert (kube-prometheus-stack's general rules): to the heartbeat receiver, sent
    at once and again every `heartbeat.repeatInterval`, so the heartbeat service pages when the pings stop (the
    alerting pipeline is down). Without a heartbeat it goes to "null"."""
    heartbeat = cfg.observability.alerting.heartbeat
    route: dict[str, Any] = {"receiver": "null", "matchers": ['alertname = "Watchdog"']}
    if heartbeat is not None:
        route.update(receiver=heartbeat.receiver, group_wait="0s", group_interval=WATCHDOG_GROUP_INTERVAL,
                     repeat_interval=heartbeat.repeat_interval)
    return route


def alertmanager_config(cfg: BackendsView) -> dict[str, Any]:
    """The whole Alertmanager configuration: severity routes to the configured receivers (each severity's
    receivers all get it), Watchdog to the heartbeat receiver (or "null"), unrouted severities to "null", and
    the inhibition rules (_inhibit_rules)."""
    alerting = cfg.observability.alerting
    routes: list[dict[str, Any]] = [watchdog_route(cfg)]
    for severity, names in alerting.routes.items():
        for i, name in enumerate(names):
            route: dict[str, Any] = {"receiver": name, "matchers": [f'severity = "{severity}"']}
            if children := _per_pod_routes(severity):
                route["routes"] = children
            if i < len(names) - 1:
                route["continue"] = True
            routes.append(route)
    return {
        "global": {"resolve_timeout": "5m"},
        "inhibit_rules": _inhibit_rules(),
        "route": {"receiver": "null", "group_by": ["namespace", "alertname"], "group_wait": "30s",
                  "group_interval": "5m", "repeat_interval": "4h", "routes": routes},
        "receivers": [{"name": "null"}, *(_receiver_config(r) for r in alerting.receivers.values())],
        "templates": [ALERT_TEMPLATES_GLOB],
    }


def alert_templates() -> dict[str, str]:
    """Notification templates: every alert's summary, description and runbook_url."""
    return {ALERT_TEMPLATE_FILE: (
        '{{ define "aifactory.title" }}[{{ .Status | toUpper }}] {{ .CommonLabels.alertname }}'
        ' ({{ .CommonLabels.severity }}){{ end }}\n'
        '{{ define "aifactory.text" }}{{ range .Alerts }}{{ .Annotations.summary }}\n'
        '{{ .Annotations.description }}\nRunbook: {{ .Annotations.runbook_url }}\n{{ end }}{{ end }}\n')}


def alertmanager_secrets(cfg: BackendsView) -> list[str]:
    return sorted({r.secret.name for r in cfg.observability.alerting.receivers.values() if r.secret is not None})


def alertmanager_secret_reads(name: str, cfg: BackendsView, *,
                              opts: pulumi.ResourceOptions) -> list[k8s.core.v1.Secret]:
    """Reads every Secret a receiver names (`name`-receiver-secret-<Secret>), so `pulumi preview` and `up` stop
    with the Secret's name when one is missing, before the release that needs it: the chart mounts each of
    `alertmanagerSpec.secrets` as a volume, and a pod whose Secret volume is missing stays ContainerCreating
    (FailedMount) while the release itself succeeds. The read keeps the Secret's data in the stack's state, as
    a Pulumi secret (encrypted)."""
    ns = cfg.observability.namespace
    return [k8s.core.v1.Secret.get(f"{name}-receiver-secret-{secret}", f"{ns}/{secret}", opts=opts)
            for secret in alertmanager_secrets(cfg)]
