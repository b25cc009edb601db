"""The ground of the settings model: `setting()`, the declaration of a stack setting on its dataclass field, the
patterns and messages several sections share, and the small views a component reads of a section."""

from __future__ import annotations

from dataclasses import MISSING, dataclass, field, fields
from typing import Any, Protocol

__all__ = [
    "SETTING",
    "DNS_LABEL_PATTERN",
    "NOT_A_DNS_LABEL",
    "MIG_PROFILE_PATTERN",
    "NOT_A_MIG_PROFILE",
    "DNS_SUBDOMAIN_PATTERN",
    "MAX_REQUEST_BYTES_LIMIT",
    "DURATION_PATTERN",
    "QUANTITY_PATTERN",
    "setting",
    "default_of",
    "NamespaceView",
    "InNamespace",
    "SecretRef",
]


DNS_LABEL_PATTERN = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"  # a Kubernetes namespace or object name (RFC 1123 label)
NOT_A_DNS_LABEL = "is not a DNS label (lowercase letters, digits and '-', at most 63 characters)"
MIG_PROFILE_PATTERN = r"^[1-7]g\.\d+gb$"  # a MIG profile as the GPU operator names its resources (1g.10gb)
NOT_A_MIG_PROFILE = "is not a MIG profile such as 1g.10gb"
# a Kubernetes object name (a node's): a DNS subdomain, at most 253 characters
DNS_SUBDOMAIN_PATTERN = r"^(?=.{1,253}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
MAX_REQUEST_BYTES_LIMIT = 256 * 1024 * 1024  # the gateway buffers each body in memory before it forwards it
DURATION_PATTERN = r"^[1-9][0-9]*(h|d|w|y)$"  # a retention as Prometheus and Jaeger take it
SETTING = "aifactory.setting"  # the key of a stack setting's declaration in its dataclass field's metadata


def setting(default: Any = MISSING, *, doc: str, ge: float | None = None, le: float | None = None,
            pattern: str | None = None, invalid: str | None = None, derived: bool = False,
            default_factory: Any = MISSING, key: str | None = None, form: Any = None,
            choices: tuple[Any, ...] | str | None = None, item: str | None = None) -> Any:
    """A dataclass field that is also a stack file setting, declared once: its default (or `default_factory`), `doc`
    (what it does and, where the default is not a constant, how it is derived), inclusive bounds `ge`/`le` (of a
    number, or of a mapping's values), and a regular expression `pattern` (of a string, a list's strings, or a
    mapping's keys) with the message `invalid` for a value that does not match it; `item`: what one value of a
    mapping of numbers is, as a message names it ("a slice count"); `choices` the allowed values
    (or ENGINE_REGISTRY: the engine registry's names, which the stack reader looks up, as the registry imports this
    module); `derived`: the default
    stands in for a value the stack model computes from other settings, or holds only under another setting (a
    provider's key), so the editor schema states none (`doc` says what it is). The stack file's key is the field
    name in camelCase, or `key`; `form`: the stack file's type where it is not the field's (a mapping the stack
    model turns into this value).
    infra/stack reads the declaration to validate the stack file and to write the editor schema and
    docs/stack-reference.md. Plain metadata: the components need nothing beyond the standard library."""
    meta = {"doc": doc, "ge": ge, "le": le, "pattern": pattern, "invalid": invalid, "derived": derived, "key": key,
            "form": form, "choices": choices, "item": item}
    if default_factory is not MISSING:
        return field(default_factory=default_factory, metadata={SETTING: meta})
    return field(default=default, metadata={SETTING: meta})


def default_of(cls: type, name: str) -> Any:
    """The declared default of the field `name` of the settings dataclass `cls`, for code that needs it beside the
    stack model (the declaration is the one place it is written); MISSING for a required setting."""
    f = next(f for f in fields(cls) if f.name == name)
    return f.default_factory() if f.default is MISSING and f.default_factory is not MISSING else f.default


class NamespaceView(Protocol):
    """A section of which a component reads only where it runs (the gateway's, observability's, a tenant's)."""

    @property
    def namespace(self) -> str: ...


@dataclass(frozen=True)
class InNamespace:
    """Where a part of the platform runs, when that is all a component needs of it."""

    namespace: str



QUANTITY_PATTERN = r"^\d+(\.\d+)?(m|k|Ki|Mi|Gi|Ti|Pi|M|G|T|P)?$"  # a Kubernetes resource quantity (500m, 64Gi)


@dataclass(frozen=True, slots=True)
class SecretRef:
    """A key of a Kubernetes Secret in the observability namespace (created outside the stack config)."""

    name: str = setting(pattern=DNS_LABEL_PATTERN, invalid=NOT_A_DNS_LABEL, doc="The Secret's name.")
    key: str = setting(pattern=r"^[-._a-zA-Z0-9]+$", invalid="is not a Secret key (letters, digits, '-', '_' and "
                       "'.')", doc="The key in the Secret.")
