"""Input validation for the AWS components: every problem collected, raised once with property paths.

Property paths use the schema's (camelCase) names, the same names `pulumi package add` consumers and
the SDK's own missing-input errors use: `capacity.reservationId`, `availabilityZones[1]`.
"""

from __future__ import annotations

import pulumi

__all__ = ["Problems"]


class Problems:
    """Collects (property path, reason) pairs for one component instance."""

    def __init__(self, component: str, name: str) -> None:
        self._component = component
        self._name = name
        self._errors: list[pulumi.InputPropertyErrorDetails] = []

    def add(self, path: str, reason: str) -> None:
        self._errors.append(pulumi.InputPropertyErrorDetails(property_path=path, reason=reason))

    def raise_any(self) -> None:
        """Raise pulumi.InputPropertiesError naming every problem, if there is one."""
        if self._errors:
            lines = "\n".join(f"  - {e['property_path']}: {e['reason']}" for e in self._errors)
            raise pulumi.InputPropertiesError(
                f"{self._component} {self._name!r}: {len(self._errors)} invalid argument(s):\n{lines}",
                list(self._errors),
            )
