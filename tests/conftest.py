"""Hypothesis profiles: ``ci`` (default, fast), ``campaign`` (a few hundred examples per
test: a campaign that fits a session) and ``long`` (thorough fuzzing).

Pick one with ``PY_WIRE_HYPOTHESIS_PROFILE=long pytest tests/``.
"""

import os

from hypothesis import HealthCheck, settings

_SLOW_OK = [HealthCheck.too_slow, HealthCheck.data_too_large]

settings.register_profile("ci", max_examples=60, deadline=None, suppress_health_check=_SLOW_OK)
settings.register_profile(
    "campaign", max_examples=500, deadline=None, suppress_health_check=_SLOW_OK
)
settings.register_profile("long", max_examples=2000, deadline=None, suppress_health_check=_SLOW_OK)
settings.load_profile(os.environ.get("PY_WIRE_HYPOTHESIS_PROFILE", "ci"))
