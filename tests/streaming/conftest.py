"""Fixtures of the streaming tests that run real Ray."""

from __future__ import annotations

import contextlib
import faulthandler
import logging
import sys
from collections.abc import Iterator

import pytest

from py_wire.streaming import StreamConfig


@pytest.fixture(scope="module")
def ray_session() -> Iterator[None]:
    """A local Ray for the module's tests (4 CPUs: actors of several producers and a buffer)."""
    import ray

    if ray.is_initialized():
        ray.shutdown()
    ray.init(address="local", num_cpus=4, include_dashboard=False, log_to_driver=False)
    try:
        yield
    finally:
        ray.shutdown()


@contextlib.contextmanager
def tq_running(config: StreamConfig) -> Iterator[None]:
    """A local Ray (4 CPUs: with fewer, ``tq.init()`` hangs) and TransferQueue with
    :class:`StalenessSampler` under ``config``."""
    import ray
    import transfer_queue as tq

    from py_wire.streaming.tq import tq_config

    faulthandler.dump_traceback_later(240, exit=True, file=sys.stderr)
    if ray.is_initialized():
        ray.shutdown()
    ray.init(address="local", num_cpus=4, include_dashboard=False, log_to_driver=False)
    logging.getLogger("transfer_queue").setLevel(logging.CRITICAL)
    tq.init(tq_config(config))
    try:
        yield
    finally:
        tq.close()
        ray.shutdown()
        faulthandler.cancel_dump_traceback_later()
