"""The AWS Load Balancer Controller's alerts (AWS stacks: ObservabilityConfig.load_balancer_controller). The gateway
depends on the controller (components.k8s.load_balancer): it registers the gateway's pods as its NLB's targets and
deregisters a terminating one, and its pod webhook, which fails closed, gives each new gateway pod its readiness gate.

- AwsLoadBalancerControllerDown (critical): for CONTROLLER_DOWN_FOR no replica of the controller has been scraped up
  (`up` of its job LBC.JOB is 0 on every target, or there is no target at all: the Deployment gone, the ServiceMonitor
  selecting nothing). What stops working: no new gateway pod can be created (the webhook refuses them: the
  autoscaler's scale-up and every rollout stall), a terminating gateway pod is never deregistered (the NLB goes on
  opening connections to it until it exits, then fails them until its health checks mark the target unhealthy), and
  no change to the gateway's Service reaches its NLB.
- AwsLoadBalancerControllerReconcileErrors (warning): for RECONCILE_ERRORS_FOR the Service or TargetGroupBinding
  controller (LBC.SERVICE_CONTROLLER, TARGET_GROUP_BINDING_CONTROLLER) has failed reconciles in every RATE
  (controller-runtime's LBC.RECONCILE_ERRORS, summed over the replicas: only the leader reconciles). Its errors are
  real failures (an AWS call refused: the IRSA role, a permission, throttling past the SDK's retries); waiting for
  a target's health is a requeue, not an error. Targets are then not registered or not deregistered.
- GatewayPodNotInLoadBalancer (warning): for GATE_FALSE_FOR a gateway pod has had every container ready
  (kube-state-metrics' KSM.CONTAINER_READY) and the pod not Ready (KSM.POD_READY): its readiness gate is still false,
  the controller has not made it a healthy target (registration and first health checks take a few minutes:
  components/k8s/gateway/component.py NLB_REGISTRATION_SECONDS). It takes no traffic from the NLB and a rollout waits
  on it. A pod being deleted (KSM.POD_DELETED) is left out: it leaves the load balancer on purpose. Only the gateway's
  pods have the gate; any other pod is Ready as soon as its containers are.
"""

from __future__ import annotations

from components.k8s.naming import GATEWAY_APP
from dashboards.config import LoadBalancerController, ObservabilityConfig
from dashboards.promql import series
from dashboards.rule_parts import RATE, Alert, runbook
from telemetry.names import BUDGET, KSM, LBC

__all__ = ["CONTROLLER_DOWN_FOR", "RECONCILE_ERRORS_FOR", "GATE_FALSE_FOR", "GATEWAY_PODS", "alerts"]

CONTROLLER_DOWN_FOR = "5m"  # longer than one replica's restart: the other replica serves the webhook meanwhile
RECONCILE_ERRORS_FOR = "10m"  # failing in every 5 minutes for 10: not a throttled call retried once
GATE_FALSE_FOR = "10m"  # twice a target's registration and first health checks (NLB_REGISTRATION_SECONDS)
# The gateway Deployment's pods: <deployment>-<pod-template-hash>-<5 characters> (BUDGET.K8S_NAME_CHARS); the budget
# service's and its store's pods in the same namespace are named otherwise.
GATEWAY_PODS = f"{GATEWAY_APP}-{BUDGET.K8S_NAME_CHARS}+-{BUDGET.K8S_NAME_CHARS}{{5}}"
POD = "namespace, pod"
_JOB = f'job="{LBC.JOB}"'
_WHAT_STOPS = ("no new gateway pod can be created (the controller's pod webhook fails closed: the autoscaler's "
               "scale-up and rollouts stall), a terminating gateway pod is never deregistered (the NLB opens new "
               "connections to it until it exits, then fails them until its health checks mark it unhealthy), and "
               "no change to the gateway's Service reaches its NLB")


def _gate_false(cfg: ObservabilityConfig, lbc: LoadBalancerController) -> str:
    """Gateway pods whose containers are all ready and the pod not Ready, not being deleted."""
    pods = f'namespace="{lbc.gateway_namespace}", pod=~"{GATEWAY_PODS}"'
    ready = series(cfg, KSM.POD_READY, pods, 'condition="true"')
    return (f"min by ({POD}) ({series(cfg, KSM.CONTAINER_READY, pods)}) == 1\n"
            f"and on ({POD}) max by ({POD}) ({ready}) == 0\n"
            f"unless on ({POD}) {series(cfg, KSM.POD_DELETED, pods)}")


def alerts(cfg: ObservabilityConfig) -> list[Alert]:
    """The module's alerts; none without the controller."""
    lbc = cfg.load_balancer_controller
    if lbc is None:
        return []
    controllers = f'{LBC.L_CONTROLLER}=~"{LBC.SERVICE_CONTROLLER}|{LBC.TARGET_GROUP_BINDING_CONTROLLER}"'
    errors = f"rate({LBC.RECONCILE_ERRORS}{{{_JOB}, {controllers}}}[{RATE}])"
    return [
        Alert("AwsLoadBalancerControllerDown", f"absent(up{{{_JOB}}} == 1)", "critical",
              summary="The AWS Load Balancer Controller is down: gateway pods cannot be created or deregistered",
              description=f"For {CONTROLLER_DOWN_FOR} Prometheus has scraped no replica of the AWS Load Balancer "
                          f"Controller up (job {LBC.JOB}): {_WHAT_STOPS}.",
              runbook_url=runbook(cfg, "AwsLoadBalancerControllerDown"), for_=CONTROLLER_DOWN_FOR),
        Alert("AwsLoadBalancerControllerReconcileErrors", f"sum by ({LBC.L_CONTROLLER}) ({errors}) > 0", "warning",
              summary="The AWS Load Balancer Controller's {{ $labels.controller }} controller keeps failing",
              description=f"For {RECONCILE_ERRORS_FOR} the AWS Load Balancer Controller's {{{{ $labels.controller }}}} "
                          f"controller has failed reconciles ({{{{ $value }}}}/s over {RATE}): AWS calls refused (its "
                          "IRSA role, a permission, throttling past the SDK's retries). The gateway's new pods are not "
                          "registered as its NLB's targets (their readiness gates stay false) or its terminating pods "
                          "not deregistered, or its Service's changes do not reach the NLB.",
              runbook_url=runbook(cfg, "AwsLoadBalancerControllerReconcileErrors"), for_=RECONCILE_ERRORS_FOR),
        Alert("GatewayPodNotInLoadBalancer", _gate_false(cfg, lbc), "warning",
              summary="Gateway pod {{ $labels.pod }} is ready but not a healthy target of the gateway's NLB",
              description=f"For {GATE_FALSE_FOR} every container of gateway pod {{{{ $labels.pod }}}} has been ready "
                          "and the pod not Ready: its readiness gate (target-health.elbv2.k8s.aws) is still false, "
                          "so the AWS Load Balancer Controller has not registered it as a healthy target of the "
                          "gateway's NLB (the controller down or failing, RegisterTargets throttled, or the NLB's "
                          "health checks failing). It takes no traffic from the NLB, and a rollout waits on it.",
              runbook_url=runbook(cfg, "GatewayPodNotInLoadBalancer"), for_=GATE_FALSE_FOR),
    ]
