"""The token budget service: an Envoy external processor (envoy.service.ext_proc.v3.ExternalProcessor, one gRPC
stream per HTTP request) that reserves a request's worst case in the shared store before the request goes upstream,
refuses it with 429 when a budget has no room for it, and settles what the response really used.

Per HTTP request, Envoy's ext_proc filters (components/k8s/gateway/envoy/budgets.py) open two streams:
- admission, one message answered before the request goes on: the whole request body (BUFFERED; the gateway has
  buffered it already), with the attributes that say whose it is and where it goes (names.REQUEST_ATTRIBUTES: the
  route's name, the path, the caller's tenant from x-aifactory-tenant; the headers themselves are not sent). The
  service finds the budgets that apply (the tenant's and the routed workload's); with none, the request goes on
  unchanged; else it reserves (components.k8s.gateway.budgets.store), answers 429 with Retry-After and a JSON error,
  or lets it on with max_tokens / stream_options set, the reservation in the request's dynamic metadata
  (`reservation`: keys, amounts, budgets, the body's size);
- metering, in Envoy's observability mode (sent without waiting; the service answers nothing): the request headers
  (with that metadata: they reach the metering filter once admission has answered), then the response headers and
  every response chunk: the service reads the status and the usage as they pass
  (components.k8s.gateway.budgets.usage) and settles the reservation at the body's end, or when the stream ends early
  (client gone before or during the answer, engine cut: Envoy closes the stream). No response byte waits for the
  service, and either stream may reach any replica: the reservation travels in the metadata. A request whose
  response never started (the client gone while the engine had not answered) used nothing: its reservation is
  released.

The store's answer is awaited for at most `storeTimeoutSeconds`: past it (or when the store refuses connections) a
budget with onStoreFailure: open admits the request unreserved (its response still settles what it used), one with
closed answers 503. Either way the reservation may still reach the store late; it carries the request's id, so the
settlement (the fail-open request's, or the 503's release of nothing used, in the background) replaces it, or bars it
if it has not landed yet (components.k8s.gateway.budgets.store). Settlements are retried while the store fails
(settling is idempotent), in the background: no request waits for them. After a few store calls in a row failed, the
store's breaker (components.k8s.gateway.budgets.breaker) opens: requests get their onStoreFailure answer without
asking the store, settlements wait for it (a bounded number: past it the oldest is dropped, counted), and one call
at a time probes it until it answers.

A reservation nobody settles (its metering stream lost with a service pod killed hard, or admission's answer lost
after the store reserved) is released by the sweep: reserve records the reservation's deadline (the longest request
its workload's routes allow, plus the config's `sweepMarginSeconds`), and every replica runs one sweep turn every
`sweepIntervalSeconds` (jittered) in the background: at most SWEEP_BATCHES batches of SWEEP_BATCH reservations past
their deadline, each batch one atomic script (components.k8s.gateway.budgets.store), so replicas sweeping at once
release each reservation once. Its calls go through the store's breaker like any other: a failure counts toward
opening it (a store that fails a sweep is as down as one that fails a reservation), and while it is open the turn
is skipped. A turn never holds a request: it runs beside them, and its script is bounded by the batch.

On SIGTERM (a rollout, an eviction) the service stops sweeping and stops taking new streams (gRPC's GOAWAY: Envoy
opens a new connection, to another replica, for its next request) and lets the streams in flight run for up to
`--shutdown-grace-seconds` (the longest request the gateway allows), so a fail-closed tenant's stream is not cut;
every stream's reservation is settled, and every settlement written, before the process exits. The streams open, by
kind, are the gauge BUDGET.STREAMS_IN_FLIGHT (Envoy holds admission's open until its request ends too):
TokenBudgetDrainCutsStreams (dashboards/budgets.py) reads a terminating pod's metering ones.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import random
import signal
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import prometheus_client as prom
import redis
import redis.asyncio as aredis
from envoy.config.core.v3 import base_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as pb_grpc
from envoy.type.v3 import http_status_pb2
from google.protobuf import struct_pb2
from prometheus_client.core import GaugeMetricFamily

from components.k8s.gateway.budgets.breaker import Breaker, BreakerOpen
from components.k8s.gateway.budgets.names import (
    GRPC_PORT,
    METADATA_NAMESPACE,
    METRICS_PORT,
    PATH_ATTRIBUTE,
    ROUTE_ATTRIBUTE,
    SETTLE_DRAIN_SECONDS,
    SWEEP_INTERVAL_SECONDS,
    TENANT_ATTRIBUTE,
)
from components.k8s.gateway.budgets.store import (
    Charge,
    Refusal,
    Reservation,
    Store,
    new_id,
    parse_window_key,
    window_key,
)
from components.k8s.gateway.budgets.usage import Plan, Policy, ResponseMeter, plan
from telemetry.names import BUDGET

__all__ = ["BudgetConfig", "Processor", "serve", "shutdown", "main", "ROUTE_ATTRIBUTE", "METADATA_NAMESPACE"]

log = logging.getLogger("aifactory.budgets")
SHUTDOWN_GRACE_S = 600.0  # main()'s default; the Deployment passes its own (budget_objects.shutdown_grace_seconds)
SETTLE_ATTEMPTS = 6  # tries the store answered with an error or not at all (0.1, 0.2 ... 1.6 s apart)
SETTLE_BACKOFF_S = 0.1
# settlements not written yet (in flight, between tries, or waiting while the store's breaker is open): past this many
# the oldest is dropped (counted). 500 requests/s for 20 s of store outage; a few MB of memory
PENDING_SETTLEMENTS = 10_000
SETTLE_CONCURRENCY = 32  # settlements in the store at once: a store back after an outage is not sent them all at once
# The sweep: reservations per script (a batch holds the store for well under a millisecond: a few commands per
# counter), and batches per turn at most (the rest waits for the next turn, or another replica's)
SWEEP_BATCH = 100
SWEEP_BATCHES = 10
STORE_ERRORS = (TimeoutError, redis.RedisError, OSError)
# Error replies that say the store itself cannot serve (out of memory, a read-only replica, its primary lost, no
# permission, a script blocking it): redis-py 8.1.0 redis/_parsers/base.py `EXCEPTION_CLASSES` maps OOM, READONLY,
# MASTERDOWN and NOPERM to these classes; BUSY (a script holds the server) and MISCONF (writes refused since a save
# failed, e.g. a full volume) have no class of their own: a ResponseError whose text starts with the code.
STORE_WIDE_REPLIES = (redis.exceptions.OutOfMemoryError, redis.exceptions.ReadOnlyError,
                      redis.exceptions.MasterDownError, redis.exceptions.NoPermissionError)
STORE_WIDE_CODES = ("BUSY", "MISCONF")


def answered_by_store(e: BaseException) -> bool:
    """Whether a store error is the store's answer to this call alone (WRONGTYPE on one tenant's key, a script's
    error): the store is up, so it does not count toward its breaker (breaker.Breaker `answered`)."""
    return (isinstance(e, redis.exceptions.ResponseError) and not isinstance(e, STORE_WIDE_REPLIES)
            and not str(e).startswith(STORE_WIDE_CODES))
SCOPE_PATHS = {"tenant": "tenants.{}.tokenBudget", "workload": "gateway.routing.{}.tokenBudget"}


@dataclass(frozen=True)
class BudgetConfig:
    """The service's config file (written by components/k8s/gateway/envoy/budgets.py service_config)."""

    tenants: Mapping[str, Policy]
    workloads: Mapping[str, Policy]
    models: Mapping[str, str]  # model key -> its workload (a key-body route's subject is the model's key)
    store_timeout_seconds: float
    # workload -> the longest request its routes allow (s); a workload not in it: the longest of all (SHUTDOWN_GRACE_S
    # when none is known)
    request_seconds: Mapping[str, float] = field(default_factory=dict)
    sweep_margin_seconds: float = 0.0  # added to a request's longest time: its reservation's deadline
    sweep_interval_seconds: float = SWEEP_INTERVAL_SECONDS  # mean time between two sweep turns of one replica

    @classmethod
    def load(cls, path: str | Path) -> BudgetConfig:
        return cls.load_text(Path(path).read_text())

    @classmethod
    def load_text(cls, text: str) -> BudgetConfig:
        d = json.loads(text)
        return cls(tenants={n: Policy.from_json(p) for n, p in d["tenants"].items()},
                   workloads={n: Policy.from_json(p) for n, p in d["workloads"].items()},
                   models=dict(d["models"]), store_timeout_seconds=float(d["storeTimeoutSeconds"]),
                   request_seconds={w: float(t) for w, t in d["requestSeconds"].items()},
                   sweep_margin_seconds=float(d["sweepMarginSeconds"]),
                   sweep_interval_seconds=float(d["sweepIntervalSeconds"]))

    def lifetime(self, workload: str) -> float:
        """Seconds from a reservation to its deadline: the longest request of its workload, and the margin."""
        longest = self.request_seconds.get(workload, max(self.request_seconds.values(), default=SHUTDOWN_GRACE_S))
        return longest + self.sweep_margin_seconds

    def workload_of(self, route: str) -> str:
        """The workload a route serves: its subject, <workload>[.batch | .<variant>.<reason>...], or a model's own key
        (route_name)."""
        subject = route.split("/", 1)[0].split(".", 1)[0]
        return self.models.get(subject, subject)

    def budgets_of(self, tenant: str, route: str) -> list[tuple[str, str, Policy]]:
        """(scope, name, policy) of every budget a request of `tenant` on route `route` counts against."""
        out = [("tenant", tenant, self.tenants[tenant])] if tenant in self.tenants else []
        workload = self.workload_of(route)
        if workload in self.workloads:
            out.append(("workload", workload, self.workloads[workload]))
        return out


def _header(key: str, value: str) -> base_pb2.HeaderValueOption:
    return base_pb2.HeaderValueOption(header=base_pb2.HeaderValue(key=key, raw_value=value.encode()))


def _headers(message: Any) -> dict[str, str]:
    return {h.key: h.raw_value.decode() if h.raw_value else h.value for h in message.headers.headers}


def _metadata(**fields: Any) -> struct_pb2.Struct:
    s = struct_pb2.Struct()
    s.update({METADATA_NAMESPACE: fields})
    return s


def _error(status: int, retry_after: int, error: dict[str, Any], **meta: Any) -> pb.ProcessingResponse:
    body = json.dumps({"error": {**error, "code": status}}, separators=(",", ":")).encode()
    return pb.ProcessingResponse(
        immediate_response=pb.ImmediateResponse(
            status=http_status_pb2.HttpStatus(code=status), body=body, details=error["type"],
            headers=pb.HeaderMutation(set_headers=[_header("retry-after", str(retry_after)),
                                                   _header("content-type", "application/json")])),
        dynamic_metadata=_metadata(**meta))


def refusal_response(r: Refusal) -> pb.ProcessingResponse:
    budget = SCOPE_PATHS[r.scope].format(r.name)
    return _error(429, r.retry_after, {
        "message": f"token budget exhausted: {budget}.{r.window} allows {r.limit} weighted tokens in this window and "
                   f"has no room for this request's reservation of {r.amount} (its prompt estimate plus max_tokens x "
                   f"outputWeight); retry after {r.retry_after} s, or ask for fewer max_tokens",
        "type": "token_budget_exceeded", "budget": budget, "window": r.window, "limit": r.limit,
        "reservation": r.amount, "retry_after_seconds": r.retry_after},
        refused=f"{r.scope}:{r.name}:{r.window}", reserved=0)


class _Stream:
    """One HTTP request's ext_proc stream."""

    def __init__(self, processor: Processor) -> None:
        self.p = processor
        self.budgets: list[tuple[str, str, Policy]] = []
        self.path = ""
        self.workload = ""  # the routed workload (its answers' usage is counted by it)
        self.plan: Plan | None = None
        self.reservation: Reservation | None = None
        self.meter = ResponseMeter()
        self.settled = False
        self.metering = False  # a metering stream that received a reservation: it settles it

    def observe(self, req: pb.ProcessingRequest) -> bool:
        """A metering message (observability mode: no answer); True once the response has ended."""
        if self.reservation is None and req.HasField("metadata_context"):
            self._receive(req.metadata_context.filter_metadata.get(METADATA_NAMESPACE))
        kind = req.WhichOneof("request")
        if kind == "request_body":  # the stream opens as the request goes upstream, its reservation made
            return False
        if kind == "response_headers":
            h = _headers(req.response_headers)
            self.meter.headers(int(h.get(":status", "0") or 0), h.get("content-type", ""),
                               req.response_headers.end_of_stream)
            return req.response_headers.end_of_stream
        if kind == "response_body":
            self.meter.body(req.response_body.body, req.response_body.end_of_stream)
            return req.response_body.end_of_stream
        return False

    def _receive(self, meta: struct_pb2.Struct | None) -> None:
        """The reservation admission put in the request's metadata (reservation_metadata)."""
        if meta is None or "reservation" not in meta.fields:
            return
        r = json.loads(meta.fields["reservation"].string_value)
        self.budgets = [(c["scope"], c["name"], Policy.from_json(c["policy"])) for c in r["charges"]]
        charges = tuple(Charge(s, n, p.limits, int(c["amount"]))
                        for (s, n, p), c in zip(self.budgets, r["charges"], strict=True))
        self.reservation = Reservation(r["id"], tuple(r["keys"]), tuple(r["amounts"]), charges,
                                       unreserved=bool(r.get("unreserved")))
        # (a replica of the previous release, mid-rollout, sends neither maxTokens nor workload)
        self.plan = Plan(body_bytes=int(r["bodyBytes"]), max_tokens=int(r.get("maxTokens", 0)), body=None)
        self.workload = str(r.get("workload", ""))
        self.metering = True

    def reservation_metadata(self) -> str:
        assert self.reservation is not None and self.plan is not None
        policies = {(s, n): p for s, n, p in self.budgets}
        return json.dumps({"id": self.reservation.id, "unreserved": self.reservation.unreserved,
                           "keys": self.reservation.keys, "amounts": self.reservation.amounts,
                           "bodyBytes": self.plan.body_bytes, "maxTokens": self.plan.max_tokens,
                           "workload": self.workload,
                           "charges": [{"scope": c.scope, "name": c.name, "amount": c.amount,
                                        "policy": policies[(c.scope, c.name)].to_json()}
                                       for c in self.reservation.charges]}, separators=(",", ":"))

    async def handle(self, req: pb.ProcessingRequest) -> pb.ProcessingResponse:
        if req.WhichOneof("request") == "request_body":
            return await self._admit(req)
        # admission sends nothing else (its processing mode: the body alone); answered all the same
        return pb.ProcessingResponse(request_headers=pb.HeadersResponse())

    async def _admit(self, req: pb.ProcessingRequest) -> pb.ProcessingResponse:
        """The request's one message: its whole body, with the attributes that say whose it is and where it goes."""
        attrs = {k: v.string_value for a in req.attributes.values() for k, v in a.fields.items()}
        self.path = attrs.get(PATH_ATTRIBUTE, "")
        route = attrs.get(ROUTE_ATTRIBUTE, "")
        self.budgets = self.p.config.budgets_of(attrs.get(TENANT_ATTRIBUTE, ""), route)
        if not self.budgets:  # nothing counts it: on unchanged
            return pb.ProcessingResponse(request_body=pb.BodyResponse())
        self.workload = self.p.config.workload_of(route)
        for scope, name, _ in self.budgets:
            self.p.requests.labels(scope, name).inc()
        body = req.request_body.body
        self.plan = plan(body, self.path, min(p.default_max_tokens for _, _, p in self.budgets))
        charges = [Charge(scope, name, p.limits, p.cost(p.prompt_estimate(self.plan.body_bytes), self.plan.max_tokens))
                   for scope, name, p in self.budgets]
        started, now, rid = time.monotonic(), self.p.clock(), new_id()
        try:
            deadline = now + self.p.config.lifetime(self.workload)
            result = await self.p.breaker.call(lambda: self.p.store.reserve(charges, now, rid, deadline=deadline),
                                               self.p.config.store_timeout_seconds)
        except BreakerOpen as e:  # the store was not asked: nothing of this request's can land in it
            self.p.store_skipped.inc()
            return self._store_failed(e, Store.unreserved(charges, now, rid), sent=False)
        except STORE_ERRORS as e:
            return self._store_failed(e, Store.unreserved(charges, now, rid))
        finally:
            self.p.check_seconds.observe(time.monotonic() - started)
        if isinstance(result, Refusal):
            self.p.refused.labels(result.scope, result.name, result.window).inc()
            return refusal_response(result)
        self.reservation = result
        return self._let_on(reserved=max(c.amount for c in charges))

    def _let_on(self, **meta: Any) -> pb.ProcessingResponse:
        """The request goes on (its body with max_tokens / stream_options set), its reservation in the metadata."""
        assert self.plan is not None
        common = pb.CommonResponse(body_mutation=pb.BodyMutation(body=self.plan.body)) if self.plan.body else None
        return pb.ProcessingResponse(request_body=pb.BodyResponse(response=common), dynamic_metadata=_metadata(
            reservation=self.reservation_metadata(), **meta))

    def _store_failed(self, e: BaseException, unknown: Reservation, *, sent: bool = True) -> pb.ProcessingResponse:
        """The store did not answer: its reservation (`unknown`) may still land (`sent`: it was sent). A fail-closed
        refusal releases it in the background; a fail-open admission carries it to its settlement, which replaces it
        by what was used."""
        closed = [(s, n) for s, n, p in self.budgets if p.on_store_failure == "closed"]
        outcome = "refused" if closed else "admitted"
        for scope, name, _ in self.budgets:
            self.p.store_failures.labels(scope, name, outcome).inc()
        if sent:  # the breaker's own answers are logged as it opens and closes
            log.warning("budget store failed (%s: %s): request %s", type(e).__name__, e, outcome)
        if closed:
            if sent:
                self.p.background(self.p.settle(unknown, {(s, n): 0 for s, n, _ in self.budgets}))
            budget = SCOPE_PATHS[closed[0][0]].format(closed[0][1])
            why = (f"did not answer within {self.p.config.store_timeout_seconds:g} s" if sent else
                   f"is not answering (its last {self.p.breaker.failures} calls failed; it is tried again every "
                   f"{self.p.breaker.cooldown_s:g} s)")
            return _error(503, 1, {"message": f"the token budget store {why}, and {budget} refuses what it cannot "
                                              "count (onStoreFailure: closed); retry shortly",
                                   "type": "token_budget_unavailable", "budget": budget},
                          refused=f"store:{closed[0][0]}:{closed[0][1]}", reserved=0)
        # admitted unreserved: its response still settles what it used into the counters (the store answering by
        # then), so the requests after it see its spend
        self.reservation = unknown
        return self._let_on(uncounted=True, reserved=0)

    def settle(self) -> None:
        """Settle the reservation once, in the background (the response is not held for it)."""
        if self.settled or self.reservation is None or self.plan is None:
            return
        self.settled = True
        used = {(scope, name): self.meter.used(p, self.plan.body_bytes, self.plan.max_tokens)
                for scope, name, p in self.budgets}
        if self.meter.without_usage:
            self.p.settled_without_usage.labels(self.workload).inc()
        self.p.background(self.p.settle(self.reservation, used))


class Processor(pb_grpc.ExternalProcessorServicer):
    def __init__(self, config: BudgetConfig, store: Store, registry: prom.CollectorRegistry,
                 clock: Callable[[], float] = time.time, *, breaker: Breaker | None = None,
                 pending_settlements: int = PENDING_SETTLEMENTS) -> None:
        self.config = config
        self.store = store
        self.clock = clock  # Unix time: which windows a reservation falls in
        self._tasks: dict[asyncio.Task[Any], None] = {}  # pending settlements, oldest first
        self.pending_settlements = pending_settlements
        self._settling: asyncio.Semaphore | None = None  # SETTLE_CONCURRENCY, made on the service's event loop
        self.streams = 0  # in flight
        labels = (BUDGET.L_SCOPE, BUDGET.L_NAME)
        self.requests = prom.Counter(BUDGET.REQUESTS.removesuffix("_total"), "Requests counted against a token "
                                     "budget (admitted, refused, or answered without the store)", labels,
                                     registry=registry)
        self.settled_without_usage = prom.Counter(
            BUDGET.SETTLED_WITHOUT_USAGE.removesuffix("_total"), "2xx answers that ended without usage, settled at "
            "their reservation", (BUDGET.L_WORKLOAD,), registry=registry)
        self.refused = prom.Counter(BUDGET.REFUSED.removesuffix("_total"), "Requests refused with 429 by a token "
                                    "budget", (*labels, BUDGET.L_WINDOW), registry=registry)
        self.store_failures = prom.Counter(BUDGET.STORE_FAILURES.removesuffix("_total"), "Requests the budget "
                                           "store could not answer in time", (*labels, BUDGET.L_OUTCOME),
                                           registry=registry)
        self.check_seconds = prom.Histogram(BUDGET.CHECK_SECONDS, "Time to reserve a request in the budget store",
                                            buckets=(.0005, .001, .002, .005, .01, .025, .05, .1, .25, 1),
                                            registry=registry)
        self.store_skipped = prom.Counter(BUDGET.STORE_SKIPPED.removesuffix("_total"), "Requests answered without "
                                          "asking the budget store, its breaker open", registry=registry)
        self.breaker_open = prom.Gauge(BUDGET.STORE_BREAKER_OPEN, "1 while the budget store's breaker is open",
                                       registry=registry)
        self.in_flight = prom.Gauge(BUDGET.STREAMS_IN_FLIGHT, "ext_proc streams open on this replica, by kind",
                                    (BUDGET.L_STREAM,), registry=registry)
        for kind in (BUDGET.ADMISSION, BUDGET.METERING):  # both series from the start (0)
            self.in_flight.labels(kind)
        self.settlements_failed = prom.Counter(BUDGET.SETTLEMENTS_FAILED.removesuffix("_total"), "Settlements never "
                                               "written to the budget store", (BUDGET.L_REASON,), registry=registry)
        for reason in (BUDGET.SETTLE_RETRIES, BUDGET.SETTLE_DROPPED):  # both series from the start (0)
            self.settlements_failed.labels(reason)
        self.swept = prom.Counter(BUDGET.SWEPT.removesuffix("_total"), "Reservations the sweep released: their "
                                  "deadline passed and nobody settled them", labels, registry=registry)
        self.swept_tokens = prom.Counter(BUDGET.SWEPT_TOKENS.removesuffix("_total"), "Weighted tokens the sweep "
                                         "gave back", (*labels, BUDGET.L_WINDOW), registry=registry)
        for scope, budgets in (("tenant", config.tenants), ("workload", config.workloads)):  # every series from 0
            for name, policy in budgets.items():
                self.swept.labels(scope, name)
                for window in policy.limits:
                    self.swept_tokens.labels(scope, name, window)
        self._sweeper: asyncio.Task[None] | None = None
        self.breaker = breaker or Breaker(STORE_ERRORS, answered=answered_by_store)
        self.breaker.on_change = self._breaker_changed

    def _breaker_changed(self, opened: bool) -> None:
        self.breaker_open.set(int(opened))
        if opened:
            log.warning("budget store: %d calls in a row failed; requests get their budget's onStoreFailure answer "
                        "without waiting for it, and it is probed every %g s", self.breaker.failures,
                        self.breaker.cooldown_s)
        else:
            log.info("budget store answers again: reservations resume")

    def background(self, coro: Any) -> None:
        """A settlement, written in the background; past `pending_settlements` not written yet, the oldest is
        dropped (counted)."""
        if len(self._tasks) >= self.pending_settlements:
            oldest = next(iter(self._tasks))
            del self._tasks[oldest]
            if not oldest.done():  # (written, its done callback not run yet: not dropped)
                oldest.cancel()
                self.settlements_failed.labels(BUDGET.SETTLE_DROPPED).inc()
        task = asyncio.ensure_future(coro)
        self._tasks[task] = None
        task.add_done_callback(self._done)

    async def settle(self, reservation: Reservation, used: Mapping[tuple[str, str], int]) -> None:
        """Settle in the background, retried while the store fails or does not answer (settling is idempotent: a try
        whose answer was lost and applied counts once), SETTLE_ATTEMPTS tries at most, SETTLE_BACKOFF_S doubling
        between them. While the store's breaker is open it waits, trying nothing (or probing, one at a time), until
        the store answers again or it is dropped (background, drain). One that is never written is counted
        (SETTLEMENTS_FAILED): its reservation stays counted until its deadline, when the sweep gives it back."""
        if self._settling is None:
            self._settling = asyncio.Semaphore(SETTLE_CONCURRENCY)
        tries = 0
        async with self._settling:
            while True:
                try:
                    applied = await self.breaker.call(lambda: self.store.settle(reservation, used, self.clock()),
                                                      self.config.store_timeout_seconds)
                    if applied == 2:
                        log.warning("reservation %s was settled after the sweep released it: what it used is "
                                    "counted now", reservation.id)
                    return
                except BreakerOpen:
                    await self.breaker.wait()
                    continue
                except STORE_ERRORS as e:
                    tries += 1
                    if tries == SETTLE_ATTEMPTS:
                        error = e
                        break
                await asyncio.sleep(SETTLE_BACKOFF_S * 2 ** (tries - 1))
        self.settlements_failed.labels(BUDGET.SETTLE_RETRIES).inc()
        log.warning("settlement of reservation %s failed %d times (%s: %s): it stays counted until the sweep gives it "
                    "back past its deadline",
                    reservation.id, SETTLE_ATTEMPTS, type(error).__name__, error)

    async def sweep(self) -> int:
        """One sweep turn: release the reservations past their deadline that nobody settled, SWEEP_BATCH per store
        call, SWEEP_BATCHES calls at most; stops at the first batch that was not full, or as the store fails (the
        breaker counts it) or its breaker is open. Returns how many it released."""
        released: dict[tuple[str, str], int] = {}  # reservations per budget
        count = 0
        for _ in range(SWEEP_BATCHES):
            try:
                batch = await self.breaker.call(lambda: self.store.sweep(self.clock(), SWEEP_BATCH),
                                                self.config.store_timeout_seconds)
            except BreakerOpen:
                break
            except STORE_ERRORS as e:
                log.warning("sweep failed (%s: %s): tried again in the next turn", type(e).__name__, e)
                break
            for given in batch.released:
                windows = {key: parse_window_key(key) for key in given}
                for budget in dict.fromkeys(w[:2] for w in windows.values()):
                    self.swept.labels(*budget).inc()
                    released[budget] = released.get(budget, 0) + 1
                for key, tokens in given.items():
                    self.swept_tokens.labels(*windows[key]).inc(tokens)
            count += len(batch.released)
            if batch.due < SWEEP_BATCH:
                break
        if released:
            log.warning("released reservations nobody settled by their deadline (their metering streams lost): %s",
                        ", ".join(f"{scope}:{name} {n}" for (scope, name), n in sorted(released.items())))
        return count

    def start_sweeping(self) -> None:
        """Sweep every `sweep_interval_seconds` (jittered by half of it either way) until stop_sweeping()."""
        async def turns() -> None:
            while True:
                await asyncio.sleep(self.config.sweep_interval_seconds * random.uniform(0.5, 1.5))
                await self.sweep()
        self._sweeper = asyncio.ensure_future(turns())

    async def stop_sweeping(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            await asyncio.gather(self._sweeper, return_exceptions=True)
            self._sweeper = None

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.pop(task, None)
        if not task.cancelled() and task.exception() is not None:
            log.warning("settlement failed: %s", task.exception())

    async def drain(self, timeout: float | None = None) -> None:
        """Wait for the pending settlements (tests, shutdown); past `timeout` seconds, drop those left (counted)."""
        try:
            async with asyncio.timeout(timeout):
                while self._tasks:
                    await asyncio.wait(list(self._tasks))  # (not gather: cancelled at the bound, it cancels them)
        except TimeoutError:
            left = list(self._tasks)
            log.warning("%d settlements still pending after %g s: dropped", len(left), timeout)
            for task in left:
                task.cancel()
            self._tasks.clear()
            self.settlements_failed.labels(BUDGET.SETTLE_DROPPED).inc(len(left))

    async def Process(self, request_iterator: AsyncIterator[pb.ProcessingRequest],  # noqa: N802 (the gRPC name)
                      context: grpc.aio.ServicerContext) -> AsyncIterator[pb.ProcessingResponse]:
        stream = _Stream(self)
        self.streams += 1
        counted: prom.Gauge | None = None  # the stream's kind's series, once its first message says which
        try:
            async for req in request_iterator:
                if counted is None:
                    counted = self.in_flight.labels(BUDGET.METERING if req.observability_mode else BUDGET.ADMISSION)
                    counted.inc()
                if not req.observability_mode:
                    yield await stream.handle(req)
                elif stream.observe(req) or not stream.metering:
                    # the response ended (settle), or the request holds no reservation (no budget counts it, or one
                    # refused it): end the stream, Envoy needs nothing more of it
                    break
        finally:  # every end: the last message, Envoy closing or resetting the stream, the RPC cancelled at shutdown
            self.streams -= 1
            if counted is not None:
                counted.dec()
            # the metering stream settles (at the response's end, or as it ends early: client gone, engine cut);
            # admission's reservation travels to it in the request's metadata
            if stream.metering:
                stream.settle()  # a stream that ended early (client gone, engine cut) settles what was generated


class SpendCollector:
    """The gauges of every budget's current windows, read from the store at scrape time (every service replica
    reports the same values: aggregate with max)."""

    def __init__(self, config: BudgetConfig, client: redis.Redis, clock: Callable[[], float]) -> None:
        self.config, self.client, self.clock = config, client, clock

    def collect(self) -> Any:
        labels = [BUDGET.L_SCOPE, BUDGET.L_NAME, BUDGET.L_WINDOW]
        spent = GaugeMetricFamily(BUDGET.SPENT, "Weighted tokens reserved or settled in the current window",
                                  labels=labels)
        remaining = GaugeMetricFamily(BUDGET.REMAINING, "Weighted tokens left in the current window", labels=labels)
        limit = GaugeMetricFamily(BUDGET.LIMIT, "The window's budget, weighted tokens", labels=labels)
        now = self.clock()
        slots = [(s, n, w, lim) for s, budgets in (("tenant", self.config.tenants), ("workload", self.config.workloads))
                 for n, p in sorted(budgets.items()) for w, lim in p.limits.items()]
        try:
            values = self.client.mget([window_key(s, n, w, now) for s, n, w, _ in slots]) if slots else []
        except (redis.RedisError, OSError) as e:
            log.warning("budget store unreadable for metrics: %s", e)
            values = None
        for i, (s, n, w, lim) in enumerate(slots):
            limit.add_metric([s, n, w], lim)
            if values is not None:
                used = int(values[i] or 0)
                spent.add_metric([s, n, w], used)
                remaining.add_metric([s, n, w], max(0, lim - used))
        yield from (spent, remaining, limit)


async def serve(config: BudgetConfig, *, listen: str, redis_url: str, metrics_port: int | None = None,
                registry: prom.CollectorRegistry | None = None, clock: Callable[[], float] = time.time
                ) -> tuple[grpc.aio.Server, Processor, int]:
    """Start the service on `listen` (host:port; port 0: the kernel picks), return it with its processor and port."""
    registry = registry or prom.CollectorRegistry()
    timeout = config.store_timeout_seconds
    # no socket timeout of the client's own: every call of the service's is bounded by its breaker (Breaker.call's
    # timeout, the same store timeout), and redis-py 8.1.0 would wrap each command's send in asyncio.wait_for (a
    # task per command) and its read in a timeout of its own (redis/asyncio/connection.py send_packed_command,
    # read_response); a cancelled command drops its connection all the same (read_response)
    client = aredis.Redis.from_url(redis_url, socket_timeout=None, socket_connect_timeout=timeout,
                                   retry_on_timeout=False)
    processor = Processor(config, Store(client), registry, clock)
    if metrics_port is not None:
        registry.register(SpendCollector(config, redis.Redis.from_url(
            redis_url, socket_timeout=timeout, socket_connect_timeout=timeout), clock))
        prom.start_http_server(metrics_port, registry=registry)
    server = grpc.aio.server()
    pb_grpc.add_ExternalProcessorServicer_to_server(processor, server)
    port = server.add_insecure_port(listen)
    await server.start()
    processor.start_sweeping()
    return server, processor, port


async def shutdown(server: grpc.aio.Server, processor: Processor, grace: float) -> None:
    """Stop taking streams, let those in flight end within `grace` seconds (past it they are cancelled, and settle
    what they metered), then write every settlement (for at most SETTLE_DRAIN_SECONDS: the store down). The sweep
    stops first (the other replicas go on sweeping)."""
    log.info("stopping: %d streams in flight, up to %g s for them to end", processor.streams, grace)
    await processor.stop_sweeping()
    await server.stop(grace)
    await processor.drain(SETTLE_DRAIN_SECONDS)
    log.info("stopped")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m components.k8s.gateway.budgets",
                                 description="The gateway's token budget service (Envoy ext_proc).")
    ap.add_argument("--config", required=True, help="the budgets JSON (the service's ConfigMap)")
    ap.add_argument("--listen", default=f"0.0.0.0:{GRPC_PORT}", help=f"gRPC address (default: 0.0.0.0:{GRPC_PORT})")
    ap.add_argument("--redis-url", required=True, help="the store, e.g. redis://budgets-valkey:6379/0")
    ap.add_argument("--metrics-port", type=int, default=METRICS_PORT,
                    help=f"Prometheus metrics port (default: {METRICS_PORT})")
    ap.add_argument("--shutdown-grace-seconds", type=float, default=SHUTDOWN_GRACE_S,
                    help="on SIGTERM, how long the streams in flight may still run (default: "
                         f"{SHUTDOWN_GRACE_S:g}; the Deployment passes the gateway's longest request)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")

    async def run() -> None:
        server, processor, port = await serve(BudgetConfig.load(args.config), listen=args.listen,
                                              redis_url=args.redis_url, metrics_port=args.metrics_port)
        log.info("token budget service on port %d", port)
        stopping = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            asyncio.get_running_loop().add_signal_handler(sig, stopping.set)
        await stopping.wait()
        await shutdown(server, processor, args.shutdown_grace_seconds)

    asyncio.run(run())
