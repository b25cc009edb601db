"""The `aifactory` command line.

Exit codes: 0 ok; 2 config or usage error (a message naming the key path, no traceback);
1 any other failure (mandatory policy violations, a failed node check, an internal error).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path

__all__ = ["main", "entry", "build_parser", "EXIT_OK", "EXIT_FAILURE", "EXIT_USAGE"]

EXIT_OK, EXIT_FAILURE, EXIT_USAGE = 0, 1, 2


def _err(msg: str) -> None:
    print(f"aifactory: {msg}", file=sys.stderr, flush=True)


def _cmd_synth(args: argparse.Namespace) -> int:
    from infra.synth import synth

    summary = synth(args.stack, Path(args.out) if args.out else None,
                    stacks_dir=Path(args.stacks_dir) if args.stacks_dir else None,
                    progress=None if args.quiet else (lambda m: print(m, file=sys.stderr, flush=True)))
    print(f"synth {summary.stack}: {summary.resources} resources in {summary.seconds:.1f}s -> {summary.out}")
    width = max((len(t) for t in summary.by_type), default=0)
    for typ, n in sorted(summary.by_type.items(), key=lambda kv: (-kv[1], kv[0])):
        print(f"  {typ:<{width}}  {n:>4}")
    print("artifacts: " + ", ".join(f"{k} ({len(v)})" for k, v in summary.artifacts.items()))
    listed = f" (preflight-report.json; `aifactory preflight {summary.stack}` lists them)" if summary.preflight else ""
    print(f"preflight: {len(summary.preflight)} finding(s){listed}")
    for failure in summary.failures:
        _err(failure)
    return EXIT_FAILURE if summary.failures else EXIT_OK


def _cmd_validate(args: argparse.Namespace) -> int:
    from infra.synth import load_stack

    cfg = load_stack(args.stack, Path(args.stacks_dir) if args.stacks_dir else None)
    print(f"{args.stack}: valid ({cfg.target.provider}, {len(cfg.node_pools)} pools, {len(cfg.tenants)} tenants, "
          f"{len(cfg.models)} models)")
    return EXIT_OK


def _cmd_policy_check(args: argparse.Namespace) -> int:
    from policies.runner import check_command

    return check_command(Path(args.state), config=Path(args.config) if args.config else None,
                         json_out=Path(args.json) if args.json else None)


def _cmd_preflight(args: argparse.Namespace) -> int:
    from infra.preflight import preflight_command

    return preflight_command(args.stack, state=Path(args.state) if args.state else None,
                             stacks_dir=Path(args.stacks_dir) if args.stacks_dir else None, as_json=args.json)


def _cmd_node_check(args: argparse.Namespace) -> int:
    from infra.nodecheck import node_check_command

    return node_check_command(stack=args.stack, pool=args.pool, hosts=args.hosts,
                              stacks_dir=Path(args.stacks_dir) if args.stacks_dir else None)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="aifactory",
                                description="GPU clusters for compound AI: synth, policy, node checks.")
    p.add_argument("--debug", action="store_true", help="show a traceback on internal errors")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    s = sub.add_parser("synth", help="render a stack offline (no Pulumi CLI, no cloud) into build/STACK",
                       description="Run the Pulumi program under the SDK's mock monitor and write state.json, "
                                   "manifests/, helm/ and the other artifacts atomically.")
    s.add_argument("stack", help="stack name: stacks/Pulumi.STACK.yaml")
    s.add_argument("--out", help="output directory (default: build/STACK)")
    s.add_argument("--stacks-dir", help="directory of Pulumi.<stack>.yaml files (default: the repo's stacks/)")
    s.add_argument("-q", "--quiet", action="store_true", help="no progress lines, only the summary")
    s.set_defaults(func=_cmd_synth)

    v = sub.add_parser("validate", help="validate a stack's config and report every problem with its key path")
    v.add_argument("stack")
    v.add_argument("--stacks-dir", help="directory of Pulumi.<stack>.yaml files")
    v.set_defaults(func=_cmd_validate)

    pol = sub.add_parser("policy", help="the CrossGuard policy pack, offline")
    psub = pol.add_subparsers(dest="policy_command", required=True, metavar="SUBCOMMAND")
    pc = psub.add_parser("check", help="run the pack over a stack export (synth's state.json or `pulumi stack export`)")
    pc.add_argument("state", metavar="STATE_JSON")
    pc.add_argument("--config", help="policy pack config (JSON or YAML): allow-lists, enforcement overrides")
    pc.add_argument("--json", metavar="OUT", help="also write the report as JSON to OUT")
    pc.set_defaults(func=_cmd_policy_check)

    pf = sub.add_parser("preflight", help="predict what the real cluster and engine would reject, leave Pending or "
                                          "time out on (exit 1 on findings)",
                        description="Run the program offline (or read --state) and check quota and Pod Security "
                                    "admission, storage classes, CRD order, await timeouts, API endpoint reach and "
                                    "scheduling against the stack config.")
    pf.add_argument("stack", help="stack name: stacks/Pulumi.STACK.yaml (its config is always read)")
    pf.add_argument("--state", metavar="STATE_JSON", help="read this stack export instead of running the program")
    pf.add_argument("--json", action="store_true", help="print the report as JSON")
    pf.add_argument("--stacks-dir", help="directory of Pulumi.<stack>.yaml files")
    pf.set_defaults(func=_cmd_preflight)

    n = sub.add_parser("node-check", help="acceptance checks of GPU nodes (pytest-testinfra) against the pool profile")
    n.add_argument("--stack", required=True)
    n.add_argument("--pool", required=True)
    n.add_argument("--hosts", required=True,
                   help="comma-separated testinfra host URLs: local://, ssh://user@host, kubectl://POD?namespace=NS")
    n.add_argument("--stacks-dir", help="directory of Pulumi.<stack>.yaml files")
    n.set_defaults(func=_cmd_node_check)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    from infra.config import ConfigError
    from infra.synth import StackFileError

    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except ConfigError as err:
        _err(f"invalid config: {err}")
        return EXIT_USAGE
    except StackFileError as err:
        _err(str(err))
        return EXIT_USAGE
    except KeyboardInterrupt:
        _err("interrupted")
        return 130
    except Exception as err:  # noqa: BLE001 - the CLI's last resort: one line, traceback only with --debug
        if args.debug or os.environ.get("AIFACTORY_DEBUG"):
            traceback.print_exc()
        _err(f"failed: {type(err).__name__}: {err}")
        return EXIT_FAILURE


def entry() -> None:
    """The console script. Like other Unix tools, `aifactory synth prod | head` ends quietly when the reader
    goes away (default SIGPIPE); only here, never for in-process callers of main()."""
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    sys.exit(main())


if __name__ == "__main__":
    entry()
