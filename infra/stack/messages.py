"""The house wording of a stack config problem: the value received ("an integer 3"), "did you mean", the
allowed keys."""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterator
from typing import Any

__all__ = ["did_you_mean", "unknown_key", "show", "got", "kind", "beyond_limits", "NUMBER_LIMIT", "STRING_LIMIT"]

# Bounds on every value the stack file gives, where a setting states none of its own: Kubernetes' and AWS's integer
# fields are 32-bit (replicas, sizes, ports), and no name, id or URL the kit passes on is longer than an IAM ARN
# (2,048 characters; the longest of the AWS limits it meets).
NUMBER_LIMIT = 2**31 - 1
STRING_LIMIT = 2048


def did_you_mean(key: str, allowed: tuple[str, ...] | list[str]) -> str:
    """' (did you mean 'x'?)' for the allowed key `key` most likely meant (same letters in another case, else a
    close spelling), or '' when none is close."""
    same_case = [a for a in allowed if a.lower() == key.lower()]
    close = same_case or difflib.get_close_matches(key, list(allowed), n=1, cutoff=0.75)
    return f" (did you mean {close[0]!r}?)" if close else ""


def unknown_key(key: str, allowed: tuple[str, ...] | list[str]) -> str:
    """The message for a key that is not allowed: the likely intended key, then every allowed one."""
    return f"unknown key{did_you_mean(key, allowed)}; allowed keys: {', '.join(allowed)}"


def show(value: Any) -> str:
    text = json.dumps(value, default=str) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def got(value: Any) -> str:
    """What a message says it got: its kind and value ("an integer 3"), or just "null"."""
    return "null" if value is None else f"{kind(value)} {show(value)}"


def kind(value: Any) -> str:
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string",
            list: "a list", dict: "a mapping", type(None): "null"}.get(type(value), type(value).__name__)


def beyond_limits(value: Any, *, bounded: bool, at: str = "") -> Iterator[tuple[str, str]]:
    """Each string longer than STRING_LIMIT and, for a setting with no maximum of its own (`bounded` false), each
    number beyond NUMBER_LIMIT in `value`, items of its lists and mappings included: (where under the setting,
    '' or '[0]' or '.key' appended to `at`; the problem)."""
    if isinstance(value, list | tuple):
        for i, item in enumerate(value):
            yield from beyond_limits(item, bounded=bounded, at=f"{at}[{i}]")
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from beyond_limits(item, bounded=bounded, at=f"{at}.{key}")
    elif isinstance(value, str) and len(value) > STRING_LIMIT:
        yield at, (f"is {len(value):,} characters; a setting is at most {STRING_LIMIT:,} (what it names ends up in "
                   "Kubernetes objects and AWS fields, which are shorter)")
    elif not bounded and isinstance(value, int | float) and not isinstance(value, bool) and abs(value) > NUMBER_LIMIT:
        yield at, (f"{value:.6g} is beyond what Kubernetes and AWS take: at most {NUMBER_LIMIT:,} (their 32-bit "
                   "integers)")
