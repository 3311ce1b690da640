"""Schemathesis over the sandbox API: every operation in /openapi.json with generated
valid and invalid input (path ids pointed at a live session half of the time), against
the real service. Each answer must be no 5xx, a documented status and a body matching
its documented schema, with every other schemathesis check. Generated code runs in a
real session, which is what the sandbox is for. Fixed seed and a small budget."""

from __future__ import annotations

from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode, checks

from tests.sandbox.conftest import TOKEN_A, Sandbox, StartSandbox

EXAMPLES = 10
checks.load_all_checks()
CHECKS = checks.CHECKS.get_all()


@pytest.fixture
def live(start_sandbox: StartSandbox) -> tuple[Sandbox, Any]:
    sandbox = start_sandbox(call_timeout=2.0, max_sessions=200,
                            max_sessions_per_tenant=200)
    config = schemathesis.Config.from_dict({
        "seed": 20261207, "auth": {"openapi": {"HTTPBearer": {"bearer": TOKEN_A}}},
        "generation": {"allow-extra-parameters": False}})
    return sandbox, schemathesis.openapi.from_url(f"{sandbox.url}/openapi.json",
                                                 config=config)


def _run(operation: Any, strategy: Any, failures: list[str]) -> None:
    @settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(strategy)
    def run(case: Any) -> None:
        case.call_and_validate(checks=CHECKS, timeout=30)

    try:
        run()
    except Unsatisfiable:
        pass  # nothing to make invalid
    except (Exception, BaseExceptionGroup) as exc:  # every operation runs; failures listed
        failures.append(f"{operation.label}: {exc}")


@pytest.mark.timeout(300)
def test_api_answers_every_input_as_documented(live: tuple[Sandbox, Any]) -> None:
    sandbox, schema = live
    failures: list[str] = []
    labels = []
    for result in schema.get_all_operations():
        operation = result.ok()
        labels.append(operation.label)
        strategies = [operation.as_strategy(GenerationMode.POSITIVE),
                      operation.as_strategy(GenerationMode.NEGATIVE)]
        if operation.path_parameters:
            strategies.append(operation.as_strategy(
                GenerationMode.POSITIVE, path_parameters={"session_id": sandbox.new()}))
        for strategy in strategies:
            _run(operation, strategy, failures)
    assert "POST /v1/sessions/{session_id}/execute" in labels
    assert not failures, "\n\n".join(failures)
