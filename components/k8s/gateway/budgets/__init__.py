"""The gateway's token budgets at run time: the store (Redis/Valkey counters, reserved and settled atomically), the
request and response accounting, and the Envoy external processing service that applies them
(docs/gateway.md, "Token budgets"). The service runs from the image of components/k8s/gateway/budgets/Dockerfile;
nothing here imports Pulumi. The Envoy side (filters, cluster, the service's config): ../envoy/budgets.py."""
