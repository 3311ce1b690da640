"""Run an expert's evaluation set against an OpenAI-compatible endpoint and judge it.

The evaluation files (``data/<expert>/eval.jsonl``) are written apart from the training
files and never trained on; each line says what a right answer looks like (``expect``)
and :func:`mol_platform.apps.experts.formats.judge` checks it. The same runner judges an
adapter on the engine directly (``model`` = the adapter's served name) or through the
router (``model`` = an expert, or ``auto``), so a report from ``mol catalog eval`` and a
figure in ``bench/`` are the same measurement.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from mol_platform.apps.experts.formats import judge
from mol_platform.apps.experts.recipe import DATA_ROOT, chat_tools, data_file

MAX_TOKENS: Mapping[str, int] = {"chat": 96, "agent": 96, "coding": 192, "ui": 384}
"""Answer budgets: the experts are trained to be short, and a format cut off by the
budget counts as a failure, as a user would see it."""


@dataclass
class Case:
    id: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    expect: dict[str, Any]


@dataclass
class Outcome:
    id: str
    ok: bool
    reason: str
    seconds: float
    answer: str = ""


@dataclass
class Report:
    """One evaluation run: the pass rate and each case's outcome."""

    expert: str
    model: str
    outcomes: list[Outcome] = field(default_factory=list)

    @property
    def passed(self) -> int:
        return sum(o.ok for o in self.outcomes)

    @property
    def rate(self) -> float:
        return self.passed / len(self.outcomes) if self.outcomes else 0.0

    def metrics(self) -> dict[str, float]:
        """What is attached to the version as its eval report's metrics."""
        seconds = sorted(o.seconds for o in self.outcomes)
        return {"pass_rate": round(self.rate, 4), "cases": float(len(self.outcomes)),
                "p50_seconds": round(seconds[len(seconds) // 2], 3) if seconds else 0.0}

    def text(self) -> str:
        """A readable report: the figures, then every failure with its reason."""
        lines = [f"# {self.expert} on {self.model}: {self.passed}/{len(self.outcomes)} "
                 f"({100 * self.rate:.1f}%)", ""]
        lines += [f"- {o.id}: {o.reason} :: {o.answer[:160]!r}"
                  for o in self.outcomes if not o.ok]
        return "\n".join(lines) + "\n"


def cases(expert: str, root: Path = DATA_ROOT) -> list[Case]:
    """The evaluation cases of ``expert``; chat's are offered the demo's handoff tool,
    as the router offers it."""
    out = []
    for line in data_file(expert, "eval", root).read_text(encoding="utf-8").splitlines():
        if line.strip():
            row = json.loads(line)
            tools = row.get("tools") or (chat_tools() if expert == "chat" else [])
            out.append(Case(row["id"], row["messages"], tools, row["expect"]))
    return out


def ask(client: httpx.Client, url: str, model: str, case: Case, max_tokens: int
        ) -> tuple[str, list[dict[str, Any]]]:
    """One greedy answer: its text and tool calls."""
    body: dict[str, Any] = {"model": model, "messages": case.messages, "temperature": 0,
                            "max_tokens": max_tokens}
    if case.tools:
        body["tools"] = case.tools
    resp = client.post(url.rstrip("/") + "/v1/chat/completions", json=body)
    resp.raise_for_status()
    message = resp.json()["choices"][0]["message"]
    return message.get("content") or "", list(message.get("tool_calls") or [])


def run(expert: str, url: str, model: str, *, root: Path = DATA_ROOT,
        headers: Mapping[str, str] | None = None, limit: int | None = None,
        progress: Callable[[int, int], None] | None = None,
        only: Sequence[str] | None = None, concurrency: int = 4) -> Report:
    """Judge ``model`` at ``url`` on ``expert``'s evaluation set (the first ``limit``
    cases; ``only``: these ids), ``concurrency`` requests at a time (the engine batches
    them; greedy answers do not depend on the batch). Outcomes keep the set's order."""
    from concurrent.futures import ThreadPoolExecutor

    todo = [c for c in cases(expert, root) if only is None or c.id in only][:limit]
    report = Report(expert, model)
    done = 0

    with httpx.Client(timeout=300.0, headers=dict(headers or {})) as client:
        def one(case: Case) -> Outcome:
            nonlocal done
            started = time.monotonic()
            content, calls = ask(client, url, model, case, MAX_TOKENS[expert])
            ok, reason = judge(case.expect, content, calls, case.tools)
            outcome = Outcome(case.id, ok, reason, time.monotonic() - started,
                              content or json.dumps(calls))
            done += 1
            if progress is not None:
                progress(done, len(todo))
            return outcome

        with ThreadPoolExecutor(max(1, concurrency)) as pool:
            report.outcomes = list(pool.map(one, todo))
    return report
