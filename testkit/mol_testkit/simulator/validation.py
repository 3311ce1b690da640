"""Request checks with vLLM 0.32's status codes, error types and ``param`` values.

Two kinds, as in vLLM: a body whose fields have the wrong JSON type fails its
pydantic model (type ``"Bad Request"``, ``param: "body.<field>"``, message
``"N validation error(s):\\n  {...}"``); a well-typed request vLLM cannot serve
(sampling values out of range, ``max_tokens`` beyond ``max_model_len``, a prompt
longer than the context, ``n > 1`` with greedy sampling, a malformed
``structured_outputs``, tools without a tool-call parser) is a ``BadRequestError``
whose message ends with ``(parameter=..., value=...)`` where vLLM names one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from mol_testkit.simulator.config import SimConfig
from mol_testkit.simulator.model import EngineError

GREEDY_EPS = 1e-5  # vLLM's _SAMPLING_EPS: below it, temperature means greedy
CONSTRAINTS = ("json", "regex", "choice", "grammar", "json_object", "structural_tag")


class _Common(BaseModel):
    """The typed fields vLLM's request models check that the simulator reads."""

    model_config = ConfigDict(extra="allow")

    model: str | None = None
    stream: bool | None = False
    stream_options: dict[str, Any] | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_tokens: int = 0
    n: int = 1
    stop: str | list[str] | None = None
    seed: int | None = None
    ignore_eos: bool = False
    structured_outputs: dict[str, Any] | None = None
    cache_salt: str | None = None


class ChatBody(_Common):
    messages: list[dict[str, Any]]
    max_completion_tokens: int | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None


class CompletionBody(_Common):
    prompt: str | list[Any] | None = None


@dataclass(frozen=True)
class Checked:
    """What a valid request asks for."""

    max_tokens: int | None
    """The client's limit, if any (the simulator's reply length otherwise)."""
    stop: tuple[str, ...]
    ignore_eos: bool
    cache_salt: str | None = None
    """Keys the prompt's first KV block: prefixes are shared only with the same salt."""


def bad_request(message: str, param: str | None = None, value: object = None) -> EngineError:
    """vLLM's ``VLLMValidationError`` answer: the parameter and value end the message."""
    if param is not None:
        tail = f"parameter={param}" if value is None else f"parameter={param}, value={value}"
        message = f"{message} ({tail})"
    return EngineError(message, HTTPStatus.BAD_REQUEST, "BadRequestError", param=param)


def parse_body(body: dict[str, Any], *, chat: bool) -> ChatBody | CompletionBody:
    """Type-check the body like vLLM's FastAPI models (400 ``"Bad Request"``)."""
    try:
        if chat:
            return ChatBody.model_validate(body)
        return CompletionBody.model_validate(body)
    except ValidationError as exc:
        raise body_error(exc.errors(include_url=False)) from None


def body_error(errors: list[Any]) -> EngineError:
    """FastAPI's request-validation answer as vLLM renders it."""
    rendered = []
    for err in errors:
        entry = {k: err[k] for k in ("type", "loc", "msg", "input", "ctx") if k in err}
        entry["loc"] = _param(("body", *err.get("loc", ())))
        if "input" in entry:
            entry["input"] = _summary(entry["input"])
        rendered.append(f"  {entry}")
    label = "error" if len(errors) == 1 else "errors"
    message = f"{len(errors)} validation {label}:\n" + "\n".join(rendered)
    param = _param(("body", *errors[0].get("loc", ()))) if errors else None
    return EngineError(message, HTTPStatus.BAD_REQUEST, "Bad Request", param=param)


def _param(loc: tuple[Any, ...]) -> str:
    """``body.field``: pydantic's union-branch markers (``str``, ``list[str]``) dropped."""
    parts = [str(p) for p in loc]
    kept = [p for p in parts if "[" not in p and p not in {"str", "int", "float", "bool", "list"}]
    return ".".join(kept or parts)


def _summary(value: object) -> object:
    if isinstance(value, (list, tuple, dict, set)):
        return f"<{type(value).__name__} of {len(value)} items>"
    return value


def check_tools(body: ChatBody, config: SimConfig) -> None:
    """Without a tool-call parser vLLM refuses every tool choice but ``none``."""
    if config.tool_call_parser is not None or not body.tools:
        return
    choice = body.tool_choice if body.tool_choice is not None else "auto"
    if choice == "none":
        return
    if choice == "auto":
        message = (
            '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set'
        )
    elif choice == "required":
        message = 'tool_choice="required" requires --tool-call-parser to be set'
    else:
        function = choice.get("function") if isinstance(choice, dict) else None
        name = function.get("name") if isinstance(function, dict) else None
        message = f'tool_choice=function "{name}" requires --tool-call-parser to be set'
    raise EngineError(message, HTTPStatus.BAD_REQUEST, "BadRequestError")


def check_request(
    body: ChatBody | CompletionBody, config: SimConfig, prompt_tokens: int
) -> Checked:
    """Length, sampling and structured-output checks, in vLLM's order."""
    max_len = config.max_model_len
    limit = body.max_tokens
    key = "max_tokens"
    if isinstance(body, ChatBody) and body.max_completion_tokens is not None:
        limit, key = body.max_completion_tokens, "max_completion_tokens"
    if limit is not None and limit > max_len:
        raise bad_request(
            f"max_tokens={limit} cannot be greater than max_model_len={max_len}. "
            "Please request fewer output tokens.",
            key,
            limit,
        )
    if prompt_tokens > max_len:
        # vLLM's tokenizer stops at max_model_len + 1 tokens, so it reports that.
        raise bad_request(
            f"This model's maximum context length is {max_len} tokens. However, your prompt "
            f"contains at least {max_len + 1} input tokens, which exceeds this limit even "
            "without any output tokens. Please reduce the length of the input prompt.",
            "input_tokens",
            max_len + 1,
        )
    salt = body.cache_salt
    if salt is not None and not salt:
        raise bad_request("Parameter 'cache_salt' must be a non-empty string if provided.",
                          "cache_salt")  # fmt: skip
    if salt is not None and (len(salt) > 128 or any(c in salt for c in "@/\\\0")):
        raise bad_request(
            "Parameter 'cache_salt' must be at most 128 characters and must not contain "
            "'@', '/', '\\\\', or NUL.", "cache_salt",
        )  # fmt: skip
    stop = _check_sampling(body, limit)
    _check_structured(body.structured_outputs)
    return Checked(max_tokens=limit, stop=stop, ignore_eos=body.ignore_eos, cache_salt=salt)


def _check_sampling(body: _Common, limit: int | None) -> tuple[str, ...]:
    temperature = 1.0 if body.temperature is None else body.temperature
    if not math.isfinite(temperature):
        raise bad_request(
            f"temperature must be a finite number, got {temperature}.", "temperature", temperature
        )
    if temperature < 0:
        raise bad_request(
            f"temperature must be non-negative, got {temperature}.", "temperature", temperature
        )
    if temperature > 2:
        raise bad_request(
            f"temperature must be in [0, 2], got {temperature}.", "temperature", temperature
        )
    if body.top_p is not None and not 0 < body.top_p <= 1:
        raise bad_request(f"top_p must be in (0, 1], got {body.top_p}.", "top_p", body.top_p)
    if body.top_k is not None and body.top_k < -1:
        raise bad_request(
            f"top_k must be 0 (disable), or at least 1, got {body.top_k}.", "top_k", body.top_k
        )
    if limit is not None and limit < 1:
        raise bad_request(f"max_tokens must be at least 1, got {limit}.", "max_tokens", limit)
    if body.min_tokens < 0:
        raise bad_request(
            f"min_tokens must be greater than or equal to 0, got {body.min_tokens}.",
            "min_tokens",
            body.min_tokens,
        )
    if body.n < 1:
        raise bad_request(f"n must be at least 1, got {body.n}.", "n", body.n)
    if body.n > 1 and temperature < GREEDY_EPS:
        raise EngineError(
            f"n must be 1 when using greedy sampling, got {body.n}.",
            HTTPStatus.BAD_REQUEST,
            "BadRequestError",
        )
    stop = (body.stop,) if isinstance(body.stop, str) else tuple(body.stop or ())
    if any(not s for s in stop):
        raise EngineError(
            "stop cannot contain an empty string.", HTTPStatus.BAD_REQUEST, "BadRequestError"
        )
    return stop


def _check_structured(structured: dict[str, Any] | None) -> None:
    if structured is None:
        return
    given = [k for k in CONSTRAINTS if structured.get(k) not in (None, False)]
    if "choice" in structured and structured["choice"] == []:
        raise EngineError(
            "Choice '[]' cannot be an empty list", HTTPStatus.BAD_REQUEST, "BadRequestError"
        )
    if not given:
        raise EngineError(
            "You must use one kind of structured outputs constraint but none are specified: "
            f"{structured}",
            HTTPStatus.BAD_REQUEST,
            "BadRequestError",
        )
    if len(given) > 1:
        raise EngineError(
            "You can only use one kind of constraints for structured outputs "
            "('json', 'regex' or 'choice').",
            HTTPStatus.BAD_REQUEST,
            "BadRequestError",
        )
