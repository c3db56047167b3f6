"""Garbage collection tuned for the processor's batches."""

from __future__ import annotations

import gc

#: The young-generation threshold while a processor runs (CPython's default is 700).
GC_YOUNG_THRESHOLD = 20_000


def batch_friendly_gc() -> None:
    """Collect garbage less often while batches run (a process-wide setting): a batch
    allocates tens of thousands of short-lived objects, none cyclic, and at the default
    threshold triggers dozens of young collections and, through them, full collections
    of everything the process holds. Only ever raises the threshold. (Nothing is frozen:
    a process running several processors, as the tests do, would keep the garbage of
    the earlier ones, and their Kafka clients with it, for good.)"""
    young, middle, old = gc.get_threshold()
    if young and young < GC_YOUNG_THRESHOLD:
        gc.set_threshold(GC_YOUNG_THRESHOLD, middle, old)
