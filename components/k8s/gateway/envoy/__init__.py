"""The gateway's Envoy bootstrap, built by pure functions (entry point: `config.render`).

Modules: `base` (shared names, hosts, circuit-breaker rules), `config` (the bootstrap: listener, routes, clusters),
`replicas` (a model's cluster: its replicas, checks that steer, outlier detection),
`variants` (deadline-aware routing and the
fidelity gate), `affinity` (session / KV-cache affinity), `callers` (in-mesh callers), `refusals` (local replies),
`observability` (tracing, access log, stats).
"""
