"""The components' settings model moved to components/k8s/settings/; this name stays so that every
`from components.k8s.settings import X` keeps working."""

from components.k8s.settings import *  # noqa: F403
from components.k8s.settings import __all__ as __all__

