"""The ``handoff`` tool an expert is offered: one definition for the router that offers
it and for the recipe that trains the chat expert to call it. A model learns the exact
text it is trained on, so the words it sees in serving must be the words it was trained
with."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

TOOL_NAME = "handoff"
DESCRIPTION = ("Hand this conversation to a better-suited expert. Call it only when "
               "another expert should answer; summarize what the user needs.")


def tool(targets: Sequence[str], descriptions: Mapping[str, str]) -> dict[str, Any]:
    """The tool offered to an expert whose possible targets are ``targets``."""
    listing = "; ".join(f"{t}: {descriptions.get(t) or t}" for t in targets)
    return {"type": "function", "function": {
        "name": TOOL_NAME,
        "description": f"{DESCRIPTION} Experts: {listing}.",
        "parameters": {
            "type": "object",
            "properties": {"expert": {"type": "string", "enum": list(targets)},
                           "summary": {"type": "string"}},
            "required": ["expert", "summary"]}}}
