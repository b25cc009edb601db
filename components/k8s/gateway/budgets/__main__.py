"""`python -m components.k8s.gateway.budgets --config ... --redis-url ...`: the token budget service."""

from components.k8s.gateway.budgets.service import main

main()
