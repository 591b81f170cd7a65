from tests.integration.conftest import logs, make_proxy, upstream  # noqa: F401  (shared fixtures)
