"""OpenTelemetry's threading instrumentation for a test: threads and executors carry the current context."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from opentelemetry.instrumentation.threading import ThreadingInstrumentor

__all__ = ["threads_instrumented"]


@contextmanager
def threads_instrumented() -> Iterator[None]:
    """Instrument threading (Thread.start/run, Timer, ThreadPoolExecutor.submit) for the block, then undo it."""
    instrumentor = ThreadingInstrumentor()
    instrumentor.instrument()
    try:
        yield
    finally:
        instrumentor.uninstrument()
