"""The house wording of a stack config problem: the value received ("an integer 3"), "did you mean", the
allowed keys."""

from __future__ import annotations

import difflib
import json
from typing import Any

__all__ = ["did_you_mean", "unknown_key", "show", "got", "kind"]


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
