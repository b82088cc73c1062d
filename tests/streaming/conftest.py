"""Fixtures of the streaming tests that run real Ray."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(scope="module")
def ray_session() -> Iterator[None]:
    """A local Ray for the module's tests (4 CPUs: actors of several producers and a buffer)."""
    import ray

    if ray.is_initialized():
        ray.shutdown()
    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False)
    try:
        yield
    finally:
        ray.shutdown()
