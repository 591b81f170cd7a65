import os

from hypothesis import HealthCheck, settings

# "ci" keeps the suite fast and bounded; "deep" is for a long manual fuzzing run:
#   HYPOTHESIS_PROFILE=deep python -m pytest tests/unit/test_properties.py
settings.register_profile(
    "ci", max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "deep", max_examples=20000, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
