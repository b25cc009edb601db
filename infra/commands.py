"""The `aifactory` command line: its parser, each command, and the exit code of every outcome (infra/cli.py is
the console script that runs it).

Exit codes: 0 ok; 2 config or usage error (a message naming the key path, no traceback);
1 any other failure (mandatory policy violations, a failed node check, an internal error).
"""

from __future__ import annotations

import argparse
import datetime
import os
import shutil
import sys
import traceback
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from infra.outputs import EXIT_FAILURE, EXIT_OK, EXIT_USAGE, UsageError, json_target, write_json

if TYPE_CHECKING:
    from infra.config import ConfigError
    from infra.synth import SynthSummary

__all__ = ["main", "build_parser", "json_target", "write_json", "synth_summary_lines", "synth_summary_doc",
           "UsageError", "EXIT_OK", "EXIT_FAILURE", "EXIT_USAGE"]



def _err(msg: str) -> None:
    print(f"aifactory: {msg}", file=sys.stderr, flush=True)


def _count(n: int, noun: str) -> str:
    """'1 pool', '2 pools'."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _prog() -> str:
    """How the user ran the kit (`.venv/bin/aifactory` or `aifactory`), for the commands it suggests."""
    argv0 = sys.argv[0] if sys.argv and sys.argv[0] else "aifactory"
    if Path(argv0).name != "aifactory" or os.sep not in argv0:
        return "aifactory"
    on_path = shutil.which("aifactory")
    if on_path is not None and Path(on_path).resolve() == Path(argv0).resolve():  # an activated virtualenv
        return "aifactory"
    rel = os.path.relpath(argv0)
    return rel if not rel.startswith("..") else argv0


def _policy_counts(report: dict[str, Any]) -> tuple[dict[str, int], dict[str, int]]:
    """Per-policy violation counts (mandatory, advisory) from a policy report."""
    mandatory: dict[str, int] = {}
    advisory: dict[str, int] = {}
    for v in report.get("violations", []):
        side = mandatory if v["enforcement"] in ("mandatory", "remediate") else advisory
        side[v["policy"]] = side.get(v["policy"], 0) + 1
    return mandatory, advisory


def _named(counts: dict[str, int]) -> str:
    return ", ".join(f"{name} x{n}" for name, n in sorted(counts.items()))


def synth_summary_doc(summary: SynthSummary) -> dict[str, Any]:
    """What `synth --json` writes: where the output is, counts, the policy verdict and the next command."""
    mandatory, advisory = _policy_counts(summary.policy)
    return {
        "stack": summary.stack,
        "out": str(summary.out),
        "resources": summary.resources,
        "resourcesByType": dict(sorted(summary.by_type.items())),
        "artifacts": {kind: len(files) for kind, files in summary.artifacts.items()},
        "policy": {"mandatory": sum(mandatory.values()), "advisory": sum(advisory.values()),
                   "mandatoryPolicies": mandatory, "advisoryPolicies": advisory,
                   "report": str(summary.out / "policy-report.json")},
        "preflight": {"findings": len(summary.preflight), "rules": dict(Counter(f.rule for f in summary.preflight)),
                      "report": str(summary.out / "preflight-report.json")},
        "next": _next_command(summary),
    }


def _preflight_verdict(summary: SynthSummary) -> str:
    """How many findings preflight made, by rule (preflight-report.json has them whole)."""
    rules = Counter(f.rule for f in summary.preflight)
    verdict = f"{len(summary.preflight)} finding(s)"
    return verdict + (f": {_named(dict(rules))}" if rules else "")


def _next_command(summary: SynthSummary) -> str:
    mandatory, advisory = _policy_counts(summary.policy)
    if mandatory or advisory:  # each violation with its remediation
        return f"{_prog()} policy check {summary.out / 'state.json'}"
    if summary.preflight:  # each finding with the resource and the fix
        return f"{_prog()} preflight {summary.stack} --state {summary.out / 'state.json'}"
    return f"pulumi preview -s {summary.stack}   (needs the Pulumi CLI: see README.md, 'Running `pulumi up` for real')"


def synth_summary_lines(summary: SynthSummary) -> list[str]:
    """The short summary synth prints last; every artifact count is in the progress lines or `--json`."""
    mandatory, advisory = _policy_counts(summary.policy)
    files = sum(len(f) for f in summary.artifacts.values())
    policy = f"{sum(mandatory.values())} mandatory, {sum(advisory.values())} advisory violation(s)"
    if mandatory:
        policy += f"; mandatory: {_named(mandatory)}"
    if advisory:
        policy += f"; advisory: {_named(advisory)}"
    lines = [f"synth {summary.stack}: {summary.resources} resources, {files} files in {summary.seconds:.1f}s",
             f"  output:    {summary.out}",
             f"  policy:    {policy}"]
    lines.append(f"  preflight: {_preflight_verdict(summary)}")
    lines.append(f"  next:      {_next_command(summary)}")
    return lines


def _resource_table(summary: SynthSummary) -> list[str]:
    width = max((len(t) for t in summary.by_type), default=0)
    return [f"  {typ:<{width}}  {n:>4}" for typ, n in sorted(summary.by_type.items(), key=lambda kv: (-kv[1], kv[0]))]


def _invalid_doc(stack: str, err: ConfigError) -> dict[str, Any]:
    """What `validate --json` and `synth --json` write for an invalid config."""
    return {"stack": stack, "valid": False,
            "problems": [{"path": p.path, "message": p.message} for p in err.problems]}


def _cmd_synth(args: argparse.Namespace) -> int:
    from infra.config import ConfigError
    from infra.synth import synth

    json_out = json_target(args.json)
    human = sys.stderr if json_out is not None and str(json_out) == "-" else sys.stdout
    try:
        summary = synth(args.stack, Path(args.out) if args.out is not None else None,
                        stacks_dir=Path(args.stacks_dir) if args.stacks_dir else None,
                        progress=None if args.quiet else (lambda m: print(m, file=sys.stderr, flush=True)))
    except ConfigError as err:
        if json_out is not None:  # a CI job reading the JSON learns why, as from `validate --json`
            write_json(json_out, _invalid_doc(args.stack, err))
        raise
    for failure in summary.failures:
        _err(failure)
    if args.resources:
        print(f"resources by type ({summary.resources}):", file=human)
        print("\n".join(_resource_table(summary)), file=human)
    print("\n".join(synth_summary_lines(summary)), file=human, flush=True)
    if json_out is not None:
        write_json(json_out, synth_summary_doc(summary))
    return EXIT_FAILURE if summary.failures else EXIT_OK


def _today() -> datetime.date:
    return datetime.datetime.now(datetime.UTC).date()


def _cmd_validate(args: argparse.Namespace) -> int:
    from infra.config import ConfigError
    from infra.stack.checks import try_idle_warnings
    from infra.stack.lifecycle import version_warning
    from infra.synth import gateway_fits, load_stack

    json_out = json_target(args.json)
    try:
        cfg = load_stack(args.stack, Path(args.stacks_dir) if args.stacks_dir else None)
        gateway_fits(cfg)  # renders the gateway's config: validate's and synth's, not every reader's (node-check)
    except ConfigError as err:
        if json_out is not None:
            write_json(json_out, _invalid_doc(args.stack, err))
        raise
    line = (f"{args.stack}: valid ({cfg.target.provider}, {_count(len(cfg.node_pools), 'pool')}, "
            f"{_count(len(cfg.tenants), 'tenant')}, {_count(len(cfg.models), 'model')})")
    print(line, file=sys.stderr if json_out is not None and str(json_out) == "-" else sys.stdout)
    if (warning := version_warning(cfg, today=_today())) is not None:
        print(f"warning: {warning}", file=sys.stderr)
    for warning in try_idle_warnings(cfg.models):
        print(f"warning: {warning}", file=sys.stderr)
    if json_out is not None:
        write_json(json_out, {"stack": args.stack, "valid": True, "provider": cfg.target.provider,
                              "nodePools": sorted(cfg.node_pools), "tenants": sorted(cfg.tenants),
                              "models": sorted(cfg.models)})
    return EXIT_OK


def _cmd_schema(args: argparse.Namespace) -> int:
    from infra.config import stack_file_schema

    target = json_target(args.out or "-", flag="--out", example="aifactory.schema.json")
    assert target is not None
    write_json(target, stack_file_schema())
    return EXIT_OK


def _cmd_policy_check(args: argparse.Namespace) -> int:
    from policies.runner import check_command

    return check_command(Path(args.state), config=Path(args.config) if args.config else None,
                         json_out=json_target(args.json))


def _cmd_preflight(args: argparse.Namespace) -> int:
    if args.aws:
        from infra.preflight_aws import aws_preflight_command

        if args.state:
            raise UsageError("--aws asks the account, not a state: drop --state")
        return aws_preflight_command(args.stack, stacks_dir=Path(args.stacks_dir) if args.stacks_dir else None,
                                     profile=args.profile, deployer_ip=args.deployer_ip,
                                     json_out=json_target(args.json))
    if args.profile or args.deployer_ip:
        raise UsageError("--profile and --deployer-ip apply to --aws only")
    from infra.preflight import preflight_command

    return preflight_command(args.stack, state=Path(args.state) if args.state else None,
                             stacks_dir=Path(args.stacks_dir) if args.stacks_dir else None,
                             json_out=json_target(args.json))


def _cmd_node_check(args: argparse.Namespace) -> int:
    from infra.nodecheck import node_check_command

    return node_check_command(stack=args.stack, pool=args.pool, hosts=args.hosts,
                              stacks_dir=Path(args.stacks_dir) if args.stacks_dir else None,
                              json_out=json_target(args.json))


def _cmd_fabric_check(args: argparse.Namespace) -> int:
    from infra.nodecheck.fabric import fabric_check_command

    return fabric_check_command(stack=args.stack, pool=args.pool, hosts=args.hosts,
                                stacks_dir=Path(args.stacks_dir) if args.stacks_dir else None,
                                all_reduce_perf=args.all_reduce_perf)


def _cmd_eval(args: argparse.Namespace) -> int:
    from infra.evaluate import eval_command

    return eval_command(args.stack, workload=args.workload, url=args.url, url_for=args.url_for or (),
                        token_file=Path(args.token_file) if args.token_file else None,
                        concurrency=args.concurrency, timeout_seconds=args.timeout,
                        stacks_dir=Path(args.stacks_dir) if args.stacks_dir else None, write=not args.no_record,
                        otlp_endpoint=args.otlp_endpoint)


def _cmd_verify(args: argparse.Namespace) -> int:
    from infra.verify import verify_command

    return verify_command(args.stack, urls={k: getattr(args, f"{k}_url") for k in VERIFY_ENDPOINTS},
                          token_file=Path(args.token_file) if args.token_file else None, models=args.model,
                          kubeconfig=Path(args.kubeconfig) if args.kubeconfig else None,
                          stacks_dir=Path(args.stacks_dir) if args.stacks_dir else None, wait_seconds=args.wait,
                          request_timeout_seconds=args.timeout, json_out=json_target(args.json))


VERIFY_ENDPOINTS = {
    "gateway": "the gateway (its load balancer, or http://aifactory-gateway.<gateway namespace>.svc:80)",
    "prometheus": "Prometheus (default http://kps-prometheus.<observability namespace>.svc:9090)",
    "jaeger": "Jaeger's query service (default http://jaeger.<observability namespace>.svc:16686)",
    "loki": "Loki's gateway (default http://loki-gateway.<observability namespace>.svc)",
    "alertmanager": "Alertmanager (default http://kps-alertmanager.<observability namespace>.svc:9093)",
}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="aifactory",
                                description="GPU clusters for compound AI: synth, policy, node checks.")
    p.add_argument("--debug", action="store_true", help="show a traceback on internal errors")
    p.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    s = sub.add_parser("synth", help="render a stack offline (no Pulumi CLI, no cloud) into build/STACK",
                       description="Run the Pulumi program under the SDK's mock monitor and write state.json, "
                                   "manifests/, helm/ and the other artifacts atomically.")
    s.add_argument("stack", help="stack name: stacks/Pulumi.STACK.yaml")
    s.add_argument("--out", help="output directory (default: build/STACK)")
    s.add_argument("--stacks-dir", help="directory of Pulumi.<stack>.yaml files (default: the repo's stacks/)")
    s.add_argument("-q", "--quiet", action="store_true", help="no progress lines, only the summary")
    s.add_argument("--resources", action="store_true", help="also print the resource count per type")
    s.add_argument("--json", metavar="OUT", help="also write the summary as JSON to OUT (`-`: stdout, and the "
                                                 "human summary goes to stderr)")
    s.set_defaults(func=_cmd_synth)

    v = sub.add_parser("validate", help="validate a stack's config and report every problem with its key path")
    v.add_argument("stack")
    v.add_argument("--stacks-dir", help="directory of Pulumi.<stack>.yaml files")
    v.add_argument("--json", metavar="OUT", help="also write the verdict (and every problem) as JSON to OUT "
                                                 "(`-`: stdout)")
    v.set_defaults(func=_cmd_validate)

    sc = sub.add_parser("schema", help="print the stack config's JSON Schema (for editors), generated from the "
                                       "config reader",
                        description="The JSON Schema of stacks/Pulumi.<env>.yaml: keys, types, choices, bounds and "
                                    "defaults, as infra/config.py reads them. The repo ships it as "
                                    "stacks/aifactory.schema.json.")
    sc.add_argument("--out", metavar="FILE", help="write it to FILE, whole (default: stdout)")
    sc.set_defaults(func=_cmd_schema)

    pol = sub.add_parser("policy", help="the CrossGuard policy pack, offline")
    psub = pol.add_subparsers(dest="policy_command", required=True, metavar="SUBCOMMAND")
    pc = psub.add_parser("check", help="run the pack over a stack export (synth's state.json or `pulumi stack export`)")
    pc.add_argument("state", metavar="STATE_JSON")
    pc.add_argument("--config", help="policy pack config (JSON or YAML): allow-lists, enforcement overrides")
    pc.add_argument("--json", metavar="OUT", help="also write the report as JSON to OUT (`-`: stdout, and the "
                                                  "text report goes to stderr)")
    pc.set_defaults(func=_cmd_policy_check)

    pf = sub.add_parser("preflight", help="predict what the real cluster and engine would reject, leave Pending or "
                                          "time out on (exit 1 on findings)",
                        description="Run the program offline (or read --state) and check quota and Pod Security "
                                    "admission, storage classes, CRD order, await timeouts, API endpoint reach and "
                                    "scheduling against the stack config.")
    pf.add_argument("stack", help="stack name: stacks/Pulumi.STACK.yaml (its config is always read)")
    pf.add_argument("--state", metavar="STATE_JSON", help="read this stack export instead of running the program")
    pf.add_argument("--json", metavar="OUT", nargs="?", const="-",
                    help="also write the report as JSON to OUT (`-`, or no OUT: stdout, and the text goes to stderr)")
    pf.add_argument("--stacks-dir", help="directory of Pulumi.<stack>.yaml files")
    pf.add_argument("--aws", action="store_true",
                    help="instead, ask the AWS account (read-only, your credentials): quotas, instance type "
                         "offerings per zone, capacity reservations, AMI availability, API endpoint allow-list")
    pf.add_argument("--profile", help="--aws: the AWS CLI profile to ask with (default: the ambient credentials)")
    pf.add_argument("--deployer-ip", metavar="IP", help="--aws: the address `pulumi up` reaches the API from "
                                                        "(default: asked from checkip.amazonaws.com)")
    pf.set_defaults(func=_cmd_preflight)

    n = sub.add_parser("node-check", help="acceptance checks of GPU nodes (pytest-testinfra) against the pool profile")
    n.add_argument("--stack", required=True)
    n.add_argument("--pool", required=True)
    n.add_argument("--hosts", required=True,
                   help="comma-separated testinfra host URLs: local://, ssh://user@host, kubectl://POD?namespace=NS")
    n.add_argument("--stacks-dir", help="directory of Pulumi.<stack>.yaml files")
    n.add_argument("--json", metavar="OUT", help="also write every host's results as JSON to OUT (`-`: stdout)")
    n.set_defaults(func=_cmd_node_check)

    f = sub.add_parser("fabric-check", help="NCCL all-reduce across 2+ nodes of an EFA/InfiniBand pool (mpirun over "
                                            "the first host) against the fabric's line rate")
    f.add_argument("--stack", required=True)
    f.add_argument("--pool", required=True)
    f.add_argument("--hosts", required=True, help="comma-separated testinfra host URLs of 2 or more nodes; "
                                                  "mpirun runs on the first and reaches the others over ssh")
    f.add_argument("--all-reduce-perf", default="all_reduce_perf",
                   help="path of nccl-tests' all_reduce_perf on the nodes (default: all_reduce_perf on PATH)")
    f.add_argument("--stacks-dir", help="directory of Pulumi.<stack>.yaml files")
    f.set_defaults(func=_cmd_fabric_check)

    from infra.evaluate import DEFAULT_CONCURRENCY, DEFAULT_TIMEOUT_SECONDS

    e = sub.add_parser("eval", help="run a workload's fidelity suite against each of its variants (lm-eval) and "
                                    "record the scores in stacks/evals/results/STACK.yaml",
                       description="Each variant is called by its model key through the gateway (or --url-for), "
                                   "the same items for each; prints score, 95%% interval and the paired difference "
                                   "against the baseline. Exit 1 when an endpoint fails.")
    e.add_argument("stack", help="stack name: stacks/Pulumi.STACK.yaml")
    e.add_argument("--workload", required=True, help="a workload with gateway.routing.<workload>.fidelity")
    e.add_argument("--url", help="the gateway's base URL (default: its in-cluster Service, "
                                 "http://aifactory-gateway.<namespace>.svc:80)")
    e.add_argument("--url-for", action="append", metavar="VARIANT=URL",
                   help="call this variant at URL instead (an engine's own base URL); repeatable")
    e.add_argument("--token-file", help="file holding the bearer token the gateway expects (default: none)")
    e.add_argument("--concurrency", type=int, default=DEFAULT_CONCURRENCY,
                   help=f"requests in flight per variant (default: {DEFAULT_CONCURRENCY})")
    e.add_argument("--timeout", type=int, default=DEFAULT_TIMEOUT_SECONDS,
                   help=f"seconds per request, retries apart (default: {DEFAULT_TIMEOUT_SECONDS})")
    e.add_argument("--no-record", action="store_true", help="print the report only; leave the results file alone")
    e.add_argument("--otlp-endpoint", metavar="URL", help="also push the scores as OTLP/HTTP gauges to this base URL "
                                                          "(the OpenTelemetry Collector, :4318)")
    e.add_argument("--stacks-dir", help="directory of Pulumi.<stack>.yaml files and evals/")
    e.set_defaults(func=_cmd_eval)

    from infra.verify import DEFAULT_REQUEST_TIMEOUT_SECONDS, DEFAULT_WAIT_SECONDS

    vf = sub.add_parser("verify", help="after a deploy: one request per model through the gateway, then its trace, "
                                       "logs and metrics, KEDA's data, DCGM per GPU node and the Watchdog alert "
                                       "(exit 1 on a broken hop)",
                        description="Read-only and bounded: per model a chat completion, streamed and not (a few "
                                    "tokens), through the gateway with --token-file's token; then queries to "
                                    "Jaeger, Loki, Prometheus and Alertmanager, retried for --wait seconds. One "
                                    "row per hop with what it saw and the likely cause. Endpoints default to the "
                                    "stack's in-cluster Services (run it where cluster DNS resolves) or give URLs.")
    vf.add_argument("stack", help="stack name: stacks/Pulumi.STACK.yaml")
    for key, what in VERIFY_ENDPOINTS.items():
        vf.add_argument(f"--{key}-url", metavar="URL", help=f"base URL of {what}")
    vf.add_argument("--token-file", help="file holding a bearer token the gateway accepts (a tenant's)")
    vf.add_argument("--kubeconfig", metavar="FILE",
                    help="reach Prometheus, Jaeger, Loki and Alertmanager through this kubeconfig's API server (its "
                         "service proxy, current context), no port-forward; the gateway still needs --gateway-url "
                         "from outside the cluster")
    vf.add_argument("--model", action="append", metavar="MODEL",
                    help="verify only this model (repeatable; default: every model of the stack)")
    vf.add_argument("--wait", type=float, default=DEFAULT_WAIT_SECONDS,
                    help=f"seconds the signals may take to arrive (default: {DEFAULT_WAIT_SECONDS:g})")
    vf.add_argument("--timeout", type=float, default=DEFAULT_REQUEST_TIMEOUT_SECONDS,
                    help=f"seconds per request through the gateway (default: {DEFAULT_REQUEST_TIMEOUT_SECONDS:g})")
    vf.add_argument("--json", metavar="OUT", nargs="?", const="-",
                    help="also write the rows as JSON to OUT (`-`, or no OUT: stdout, and the table goes to stderr)")
    vf.add_argument("--stacks-dir", help="directory of Pulumi.<stack>.yaml files")
    vf.set_defaults(func=_cmd_verify)
    return p


def _version() -> str:
    from importlib import metadata

    try:
        return metadata.version("aifactory")
    except metadata.PackageNotFoundError:  # run from a source tree that was never installed
        return "(not installed)"


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command line; its exit code. Ctrl-C propagates (KeyboardInterrupt): infra.cli.entry ends on it."""
    from infra.config import ConfigError
    from infra.synth import OutputDirError, StackFileError

    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except ConfigError as err:
        _err(f"invalid config: {err}")
        return EXIT_USAGE
    except (StackFileError, OutputDirError, UsageError) as err:
        _err(str(err))
        return EXIT_USAGE
    except Exception as err:  # noqa: BLE001 - the CLI's last resort: one line, traceback only with --debug
        if args.debug or os.environ.get("AIFACTORY_DEBUG"):
            traceback.print_exc()
        _err(f"failed: {type(err).__name__}: {err}")
        return EXIT_FAILURE
