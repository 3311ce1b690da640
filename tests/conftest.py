"""Root conftest: the shared infrastructure fixtures (see docs/testing.md)."""

pytest_plugins = ["fixtures_infra"]
