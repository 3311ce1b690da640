"""Root conftest: the shared infrastructure fixtures (see docs/testing.md).

In CI (``CI`` set) a skipped test fails the run: every piece of infrastructure is
installed by ``make test``, so a skip can only hide something missing.
"""

from __future__ import annotations

import os

import pytest

pytest_plugins = ["tests.fixtures_infra"]

_skipped: list[str] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.skipped and not hasattr(report, "wasxfail"):
        _skipped.append(report.nodeid)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if os.environ.get("CI") and _skipped and exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if os.environ.get("CI") and _skipped:
        terminalreporter.write_line(
            f"CI: {len(_skipped)} test(s) skipped; skips are failures in CI: "
            + ", ".join(_skipped[:10]),
            red=True,
        )
