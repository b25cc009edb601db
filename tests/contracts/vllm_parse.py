"""Parse the kit's `vllm serve` command lines with vLLM's own parser (run in a venv holding only vLLM).

    python tests/contracts/vllm_parse.py COMMANDS.json

COMMANDS.json comes from `python -m tests.contracts.engine_commands`; only the commands whose image runs the
installed vLLM's version are parsed. The parser is what `vllm serve` builds: make_arg_parser (in
vllm/entrypoints/common/cli_args.py at 0.33.0, vllm/entrypoints/openai/cli_args.py at 0.27.1) over
vllm/engine/arg_utils.py EngineArgs.add_cli_args, then validate_parsed_serve_args; an unknown option or a value
outside an option's choices exits argparse with status 2. Exits 1 when any command fails, 3 when none matched the
installed version. Imports nothing of the kit.
"""

from __future__ import annotations

import json
import sys


def main(path: str) -> int:
    import vllm
    import vllm.platforms
    from vllm.platforms.cpu import CpuPlatform

    # Building the parser computes EngineArgs' defaults, and DeviceConfig(device="auto") raises "Failed to infer
    # device type" on a machine with no accelerator (vllm/config/device.py DeviceConfig.__post_init__, 0.27.1 and
    # 0.33.0). The CPU platform registers the same options: argparse and validate_parsed_serve_args do not depend
    # on the device. vllm/platforms/__init__.py resolves `current_platform` lazily from `_current_platform`.
    vllm.platforms._current_platform = CpuPlatform()
    try:  # 0.33.0: vllm/entrypoints/common/cli_args.py
        from vllm.entrypoints.common.cli_args import make_arg_parser, validate_parsed_serve_args
    except ModuleNotFoundError:  # 0.27.1: vllm/entrypoints/openai/cli_args.py
        from vllm.entrypoints.openai.cli_args import make_arg_parser, validate_parsed_serve_args
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    commands = [c for c in json.load(open(path)) if c["version"] == vllm.__version__]
    failed = 0
    for c in commands:
        parser = make_arg_parser(FlexibleArgumentParser(prog="vllm serve"))
        try:
            validate_parsed_serve_args(parser.parse_args([c["path"], *c["args"]]))  # `vllm serve PATH ...`
        except (SystemExit, Exception) as exc:  # argparse exits; validation raises
            failed += 1
            print(f"FAIL {c['where']} {c['model']} (vllm {vllm.__version__}): {exc!r}: {' '.join(c['args'])}")
        else:
            print(f"ok   {c['where']} {c['model']} (vllm {vllm.__version__})")
    if not commands:
        print(f"no command runs vllm {vllm.__version__}")
        return 3
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1]))
