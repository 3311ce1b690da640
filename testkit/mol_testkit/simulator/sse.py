"""Reading what a replica sends: SSE bodies and the newest ``lora_requests_info``."""

from __future__ import annotations

import json
from typing import Any

from prometheus_client.parser import text_string_to_metric_families


def parse_sse(text: str) -> list[Any]:
    """The ``data:`` payloads of an SSE body, JSON-decoded; ``"[DONE]"`` stays a string."""
    events: list[Any] = []
    for block in text.split("\n\n"):
        lines = [line[len("data: ") :] for line in block.splitlines() if line.startswith("data: ")]
        if not lines:
            continue
        data = "\n".join(lines)
        events.append(data if data == "[DONE]" else json.loads(data))
    return events


def newest_lora_info(metrics_text: str) -> dict[str, str] | None:
    """Labels of the newest ``vllm:lora_requests_info`` sample (the current state).

    None when the engine has not written one yet (no request since it started).
    """
    newest: tuple[float, dict[str, str]] | None = None
    for family in text_string_to_metric_families(metrics_text):
        if family.name != "vllm:lora_requests_info":
            continue
        for sample in family.samples:
            if newest is None or sample.value > newest[0]:
                newest = (sample.value, dict(sample.labels))
    return newest[1] if newest else None
