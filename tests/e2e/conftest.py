from tests.integration.conftest import logs, upstream  # noqa: F401  (shared fixtures)
