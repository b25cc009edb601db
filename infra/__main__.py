"""Entry point the Pulumi CLI runs (`main: infra/` in Pulumi.yaml): load the stack config, compose."""

import pulumi

from infra.config import ConfigError, load
from infra.program import program

try:
    config = load()
except ConfigError as err:
    # RunError prints the message without a Python traceback: each problem with its key path.
    raise pulumi.RunError(f"stack {pulumi.get_stack()!r} config: {err}") from None

program(config)
