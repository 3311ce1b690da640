"""Root conftest: the shared infrastructure fixtures (see docs/testing.md).

In CI (``CI`` set) a skipped test fails the run: every piece of infrastructure is
installed by ``make test``, so a skip can only hide something missing.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from typing import Any

import pytest

pytest_plugins = ["tests.fixtures_infra"]

_skipped: list[str] = []
_E2E = "tests/e2e"


class _EndToEndFirst(OrderedDict[str, Any]):
    """xdist's queue of work units with the end-to-end one first: the longest (~12
    minutes), so it starts at once and the other worker takes everything else."""

    def __setitem__(self, key: str, value: Any) -> None:
        super().__setitem__(key, value)
        if key == _E2E:
            self.move_to_end(key, last=False)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Under pytest-xdist (``make test`` runs two workers): whole test modules go to a
    worker, and the end-to-end tests all to one, first, as they share session-scoped
    engines (each ~50 s to start) that a second worker would start again."""
    from xdist.scheduler import LoadScopeScheduling

    class EnginesTogether(LoadScopeScheduling):  # type: ignore[misc]
        def __init__(self, config: pytest.Config, log: Any = None) -> None:
            super().__init__(config, log)
            self.workqueue = _EndToEndFirst()

        def _split_scope(self, nodeid: str) -> str:
            if nodeid.startswith(_E2E + "/"):
                return _E2E
            return nodeid.split("::", 1)[0]

    return EnginesTogether(config, log)


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
