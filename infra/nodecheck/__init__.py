"""GPU node acceptance: `aifactory node-check --stack S --pool P --hosts URL[,URL...]`.

What applies comes from the pool's profile (stack config `nodePools.P` plus the instance catalog); each
check runs on the node through a testinfra host (local://, ssh://, paramiko://, kubectl://POD?namespace=NS,
docker://, ...). Modules: `parsers` (pure parsers of tool output), `probe` (commands on a node, bounded
script runs), `checks` (the check table), `cluster` (kubectl: the node's DCGM exporter pod), `runner` (the
command, progress and the table), `burnin_script` (the script the burn-in runs on the node), `fabric`
(`aifactory fabric-check`: an NCCL all-reduce across nodes of a pool).
"""

from infra.nodecheck.checks import CHECKS, Check, CheckFailed
from infra.nodecheck.probe import CannotRun, Probe
from infra.nodecheck.runner import CheckResult, check_node, format_table, load_pool, node_check_command, plan

__all__ = [
    "CHECKS",
    "Check",
    "CheckFailed",
    "CannotRun",
    "Probe",
    "CheckResult",
    "check_node",
    "format_table",
    "load_pool",
    "node_check_command",
    "plan",
]
