"""OpenAI/vLLM response bodies: whole responses, stream chunks, errors, model cards.

Field sets follow vLLM 0.32's pydantic models: whole responses are full dumps (nulls
included); stream chunks are dumped with ``exclude_unset`` like vLLM does, so a
content chunk carries ``delta: {"content": ...}`` and a tool-call argument chunk
``delta: {"tool_calls": [{"index": 0, "function": {"arguments": ...}}]}``.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from mol_testkit.simulator.model import AdapterInfo, EngineError

VLLM_VERSION = "0.32.0"
"""The vLLM release whose API the simulator follows (``/version``)."""
FINGERPRINT = f"vllm-{VLLM_VERSION}-sim"
REPLICA_HEADER = "x-sim-replica"
"""Response header naming the replica that answered (simulator only)."""


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


def error_body(exc: EngineError) -> dict[str, Any]:
    """vLLM's ``ErrorResponse``: ``{"error": {"message", "type", "param", "code"}}``."""
    return {
        "error": {
            "message": exc.message,
            "type": exc.err_type,
            "param": exc.param,
            "code": int(exc.status),
        }
    }


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "completion_tokens": completion_tokens,
        "prompt_tokens_details": None,
        "completion_tokens_details": None,
    }


def tool_call_obj(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def chat_response(
    *,
    response_id: str,
    created: int,
    model: str,
    content: str | None,
    tool_calls: list[dict[str, Any]],
    finish_reason: str,
    prompt_tokens: int,
    completion_tokens: int,
    stop_reason: str | None = None,
) -> dict[str, Any]:
    message: dict[str, Any] = {
        "role": "assistant",
        "content": content,
        "refusal": None,
        "annotations": None,
        "audio": None,
        "function_call": None,
    }
    if tool_calls:
        message["tool_calls"] = tool_calls
    message["reasoning"] = None
    return {
        "id": response_id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": finish_reason,
                "stop_reason": stop_reason,
                "token_ids": None,
                "routed_experts": None,
            }
        ],
        "service_tier": None,
        "system_fingerprint": FINGERPRINT,
        "usage": usage(prompt_tokens, completion_tokens),
        "prompt_logprobs": None,
        "prompt_token_ids": None,
        "prompt_text": None,
        "kv_transfer_params": None,
        "ec_transfer_params": None,
        "metrics": None,
    }


def completion_response(
    *,
    response_id: str,
    created: int,
    model: str,
    text: str,
    finish_reason: str,
    prompt_tokens: int,
    completion_tokens: int,
    stop_reason: str | None = None,
) -> dict[str, Any]:
    return {
        "id": response_id,
        "object": "text_completion",
        "created": created,
        "model": model,
        "choices": [
            {
                "index": 0,
                "text": text,
                "logprobs": None,
                "finish_reason": finish_reason,
                "stop_reason": stop_reason,
                "token_ids": None,
                "prompt_logprobs": None,
                "prompt_token_ids": None,
                "routed_experts": None,
            }
        ],
        "service_tier": None,
        "system_fingerprint": FINGERPRINT,
        "usage": usage(prompt_tokens, completion_tokens),
        "kv_transfer_params": None,
        "ec_transfer_params": None,
        "metrics": None,
    }


def chat_chunk(
    response_id: str,
    created: int,
    model: str,
    delta: dict[str, Any],
    finish_reason: str | None = None,
    stop_reason: str | None = None,
) -> dict[str, Any]:
    choice: dict[str, Any] = {
        "index": 0,
        "delta": delta,
        "logprobs": None,
        "finish_reason": finish_reason,
    }
    if finish_reason is not None:
        choice["stop_reason"] = stop_reason
    first = "role" in delta
    if not first:  # vLLM sets token_ids on every chunk but the first
        choice["token_ids"] = None
    chunk = {
        "id": response_id,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": [choice],
    }
    if first:  # the first chunk also echoes the (unrequested) prompt fields
        chunk.update(prompt_token_ids=None, prompt_text=None)
    return chunk


def completion_chunk(
    response_id: str,
    created: int,
    model: str,
    text: str,
    finish_reason: str | None = None,
    stop_reason: str | None = None,
) -> dict[str, Any]:
    return {
        "id": response_id,
        "object": "text_completion",
        "created": created,
        "model": model,
        "choices": [
            {
                "index": 0,
                "text": text,
                "logprobs": None,
                "finish_reason": finish_reason,
                "stop_reason": stop_reason,
                "prompt_token_ids": None,
                "token_ids": None,
            }
        ],
    }


def usage_chunk(
    response_id: str,
    created: int,
    model: str,
    obj: str,
    prompt_tokens: int,
    completion_tokens: int,
) -> dict[str, Any]:
    """The trailing ``choices: []`` chunk sent when ``stream_options.include_usage``."""
    body = usage(prompt_tokens, completion_tokens)
    del body["prompt_tokens_details"]  # vLLM dumps this one with exclude_none
    del body["completion_tokens_details"]
    return {
        "id": response_id,
        "object": obj,
        "created": created,
        "model": model,
        "choices": [],
        "usage": body,
        "system_fingerprint": FINGERPRINT,
    }


def sse(payload: dict[str, Any] | str) -> bytes:
    data = payload if isinstance(payload, str) else json.dumps(payload, separators=(",", ":"))
    return f"data: {data}\n\n".encode()


def model_list(
    base: str, root: str, max_model_len: int, adapters: list[AdapterInfo]
) -> dict[str, Any]:
    """``GET /v1/models``: the base model, then every adapter with ``parent``."""
    created = int(time.time())

    def card(model_id: str, card_root: str, parent: str | None, length: int | None) -> Any:
        return {
            "id": model_id,
            "object": "model",
            "created": created,
            "owned_by": "vllm",
            "root": card_root,
            "parent": parent,
            "max_model_len": length,
            "permission": [
                {
                    "id": new_id("modelperm"),
                    "object": "model_permission",
                    "created": created,
                    "allow_create_engine": False,
                    "allow_sampling": True,
                    "allow_logprobs": True,
                    "allow_search_indices": False,
                    "allow_view": True,
                    "allow_fine_tuning": False,
                    "organization": "*",
                    "group": None,
                    "is_blocking": False,
                }
            ],
        }

    cards = [card(base, root, None, max_model_len)]
    cards += [card(a.name, a.path, base, None) for a in adapters]
    return {"object": "list", "data": cards}
