"""One simulated vLLM replica: the OpenAI-compatible HTTP surface on aiohttp."""

from __future__ import annotations

import json
from collections import deque
from dataclasses import replace
from http import HTTPStatus
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler
from pydantic import BaseModel, ValidationError

from mol_testkit.simulator import embeddings, shapes
from mol_testkit.simulator.config import SimConfig
from mol_testkit.simulator.generation import make_plan
from mol_testkit.simulator.job import Job, drop_connection
from mol_testkit.simulator.metrics import CONTENT_TYPE, SimMetrics
from mol_testkit.simulator.model import (
    EngineError,
    ReceivedRequest,
    ReplicaState,
    SlotEngine,
)
from mol_testkit.simulator.scripting import (
    FailureSpec,
    ScriptBook,
    ScriptRule,
    ToolCallSpec,
    offered_tools,
)
from mol_testkit.simulator.shapes import VLLM_VERSION
from mol_testkit.simulator.textgen import PromptError, chat_prompt, completion_prompt
from mol_testkit.simulator.tokens import token_counter
from mol_testkit.simulator.validation import (
    ChatBody,
    bad_request,
    body_error,
    check_request,
    check_tools,
    parse_body,
)

LOOPBACK = "127.0.0.1"


class SimServer:
    """A fake vLLM engine on one loopback port.

    Create it, ``await start()`` inside an event loop, ``await stop()`` when done; or
    use :class:`~mol_testkit.simulator.cluster.SimulatorCluster`. The
    ``script_*`` methods may be called from any thread; :meth:`state` must run in the
    server's loop (the cluster's ``state()`` takes care of that).
    """

    def __init__(
        self,
        config: SimConfig | None = None,
        *,
        name: str = "sim-0",
        host: str = LOOPBACK,
        port: int = 0,
    ) -> None:
        self.config = config or SimConfig()
        self.name = name
        self.host = host
        self.port = port
        self.engine = SlotEngine(self.config)
        self.tokens = token_counter(self.config.model_path)
        self.metrics = SimMetrics(self.engine)
        self.scripts = ScriptBook()
        self.received: deque[ReceivedRequest] = deque(maxlen=1000)
        self._runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def start(self) -> None:
        app = web.Application(middlewares=[_json_http_errors])
        app.add_routes(
            [
                web.get("/health", self._health),
                web.get("/ping", self._health),
                web.post("/ping", self._health),
                web.get("/version", self._version),
                web.get("/load", self._server_load),
                web.get("/metrics", self._metrics),
                web.get("/v1/models", self._models),
                web.post("/v1/chat/completions", self._chat),
                web.post("/v1/completions", self._completions),
                web.post("/v1/embeddings", self._embeddings),
                web.post("/v1/load_lora_adapter", self._load),
                web.post("/v1/unload_lora_adapter", self._unload),
                web.post("/sim/script", self._add_script),
                web.get("/sim/script", self._list_scripts),
                web.delete("/sim/script", self._clear_scripts),
                web.get("/sim/state", self._state),
            ]
        )
        runner = web.AppRunner(
            app, access_log=None, handler_cancellation=True, shutdown_timeout=0.5
        )
        await runner.setup()
        site = web.TCPSite(runner, self.host, self.port)
        try:
            await site.start()
        except OSError as exc:
            await runner.cleanup()
            raise OSError(f"simulator {self.name} cannot listen on {self.url}: {exc}") from exc
        self.port = int(runner.addresses[0][1])
        self._runner = runner

    async def stop(self) -> None:
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()

    def state(self) -> ReplicaState:
        """Snapshot for assertions; call it in the server's event loop."""
        return replace(self.engine.snapshot(), received=tuple(self.received))

    # Scripting (thread-safe).

    def script_tool_call(
        self,
        model: str | None,
        name: str,
        arguments: dict[str, Any] | str | None = None,
        *,
        times: int | None = None,
        when_prompt_contains: str | None = None,
        require_offered: bool = True,
        call_id: str | None = None,
    ) -> int:
        """Make ``model`` (None: any) answer chat requests with this tool call."""
        spec = ToolCallSpec(
            name=name, arguments=arguments or {}, id=call_id, require_offered=require_offered
        )
        return self.add_script(
            ScriptRule(
                model=model, tool_call=spec, times=times, when_prompt_contains=when_prompt_contains
            )
        )

    def script_text(
        self,
        model: str | None,
        text: str,
        *,
        times: int | None = None,
        when_prompt_contains: str | None = None,
    ) -> int:
        """Make ``model`` (None: any) answer with exactly ``text``."""
        return self.add_script(
            ScriptRule(
                model=model, text=text, times=times, when_prompt_contains=when_prompt_contains
            )
        )

    def script_failure(
        self,
        model: str | None,
        *,
        status: int = 500,
        disconnect: bool = False,
        after_tokens: int = 0,
        times: int | None = None,
        when_prompt_contains: str | None = None,
        message: str | None = None,
    ) -> int:
        """Make requests for ``model`` (None: any) fail with ``status`` (and
        ``message``) or a dropped connection (after ``after_tokens`` streamed tokens)."""
        failure = FailureSpec(status=status, disconnect=disconnect, after_tokens=after_tokens,
                              message=message)
        return self.add_script(
            ScriptRule(
                model=model, failure=failure, times=times, when_prompt_contains=when_prompt_contains
            )
        )

    def add_script(self, rule: ScriptRule) -> int:
        return self.scripts.add(rule)

    def clear_scripts(self) -> None:
        self.scripts.clear()

    # Plain endpoints.

    async def _health(self, request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def _version(self, request: web.Request) -> web.Response:
        return web.json_response({"version": VLLM_VERSION})

    async def _server_load(self, request: web.Request) -> web.Response:
        """Requests in flight, as vLLM's ``/load`` counts them."""
        engine = self.engine
        return web.json_response({"server_load": len(engine.running) + len(engine.waiting)})

    async def _metrics(self, request: web.Request) -> web.Response:
        return web.Response(body=self.metrics.exposition(), headers={"Content-Type": CONTENT_TYPE})

    async def _models(self, request: web.Request) -> web.Response:
        cfg = self.config
        body = shapes.model_list(
            cfg.model, cfg.root, cfg.max_model_len, list(self.engine.adapters.values())
        )
        return web.json_response(body)

    async def _embeddings(self, request: web.Request) -> web.Response:
        """Deterministic embeddings (:mod:`mol_testkit.simulator.embeddings`) for any
        model name: what a router's semantic signal needs in tests."""
        body = await _read_json(request)
        texts = body.get("input")
        if isinstance(texts, str):
            texts = [texts]
        if not isinstance(texts, list) or not texts \
                or not all(isinstance(t, str) for t in texts):
            return web.json_response({"error": {
                "message": "input must be a string or a list of strings", "type":
                "BadRequestError", "code": 400}}, status=400)
        encoding = body.get("encoding_format", "float")
        if encoding not in ("float", "base64"):
            return web.json_response({"error": {
                "message": "encoding_format must be float or base64", "type":
                "BadRequestError", "code": 400}}, status=400)
        return web.json_response(embeddings.response(str(body.get("model", "")), texts,
                                                     encoding))

    async def _load(self, request: web.Request) -> web.Response:
        try:
            load = _LoadBody.model_validate(await _read_json(request))
            message = self.engine.load_adapter(load.lora_name, load.lora_path, load.load_inplace)
        except ValidationError as exc:
            return _error(body_error(exc.errors(include_url=False)))
        except EngineError as exc:
            return _error(exc)
        return web.Response(text=message)

    async def _unload(self, request: web.Request) -> web.Response:
        try:
            unload = _UnloadBody.model_validate(await _read_json(request))
            message = self.engine.unload_adapter(unload.lora_name)
        except ValidationError as exc:
            return _error(body_error(exc.errors(include_url=False)))
        except EngineError as exc:
            return _error(exc)
        return web.Response(text=message)

    async def _add_script(self, request: web.Request) -> web.Response:
        try:
            rule = ScriptRule.model_validate(await _read_json(request))
        except EngineError as exc:
            return _error(exc)
        except ValueError as exc:
            return _error(EngineError(str(exc), HTTPStatus.BAD_REQUEST, "BadRequestError"))
        return web.json_response({"id": self.add_script(rule)}, status=201)

    async def _list_scripts(self, request: web.Request) -> web.Response:
        rules = [r.model_dump(exclude_none=True) for r in self.scripts.rules()]
        return web.json_response({"rules": rules})

    async def _clear_scripts(self, request: web.Request) -> web.Response:
        self.clear_scripts()
        return web.json_response({"cleared": True})

    async def _state(self, request: web.Request) -> web.Response:
        state = self.state()
        body = {k: v for k, v in state.__dict__.items() if k != "received"}
        body["received"] = [r.__dict__ for r in state.received]
        return web.json_response(body)

    # Generation.

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, chat=True)

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, chat=False)

    async def _generate(self, request: web.Request, *, chat: bool) -> web.StreamResponse:
        try:
            body = await _read_json(request)
            headers = {k.lower(): v for k, v in request.headers.items()}
            self.received.append(ReceivedRequest(request.path, body, headers))
            parsed = parse_body(body, chat=chat)
            model = parsed.model or self.config.model
            adapter = self.engine.resolve_model(model)
            if isinstance(parsed, ChatBody):
                check_tools(parsed, self.config)
                if not parsed.messages:
                    raise EngineError(
                        "Cannot apply chat template to an empty conversation. Provide at "
                        "least one message.", HTTPStatus.BAD_REQUEST, "BadRequestError",
                    )  # fmt: skip
                prompt = chat_prompt(parsed.messages)
                token_ids = self.tokens.chat(parsed.messages, prompt)
            else:
                if not parsed.prompt:
                    raise bad_request(
                        "Either prompt or prompt_embeds must be provided and non-empty.", "prompt"
                    )
                prompt = completion_prompt(parsed.prompt)
                token_ids = self.tokens.completion(prompt)
            checked = check_request(parsed, self.config, len(token_ids))
            rule = self.scripts.take(model, prompt, offered_tools(body), chat=chat)
            plan = make_plan(self.config, model, prompt, body, rule, checked)
        except EngineError as exc:
            return _error(exc)
        except PromptError as exc:
            return _error(EngineError(str(exc), HTTPStatus.BAD_REQUEST, "BadRequestError"))
        failure = rule.failure if rule is not None else None
        stream = bool(parsed.stream)
        if failure is not None and not failure.disconnect:
            return _scripted_error(failure, model)
        if failure is not None and (not stream or failure.after_tokens == 0):
            drop_connection(request)
        cut_after = failure.after_tokens if failure is not None else None
        job = Job(self, request, body, model, token_ids, plan, chat, checked)
        return await job.run(adapter, stream=stream, cut_after=cut_after)


class _LoadBody(BaseModel):
    lora_name: str
    lora_path: str
    load_inplace: bool = False


class _UnloadBody(BaseModel):
    lora_name: str
    lora_int_id: int | None = None


@web.middleware
async def _json_http_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Unknown paths and methods answer JSON, as vLLM's FastAPI app does."""
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status not in (404, 405):
            raise
        return web.json_response({"detail": exc.reason}, status=exc.status)


async def _read_json(request: web.Request) -> dict[str, Any]:
    """The JSON object body, or FastAPI's validation answer for anything else."""
    try:
        body = await request.json()
    except json.JSONDecodeError as exc:
        raise body_error(
            [{"type": "json_invalid", "loc": (exc.pos,), "msg": "JSON decode error",
              "input": {}, "ctx": {"error": exc.msg}}]
        ) from exc  # fmt: skip
    if not isinstance(body, dict):
        raise body_error(
            [{"type": "model_attributes_type", "loc": (), "input": body,
              "msg": "Input should be a valid dictionary or object to extract fields from"}]
        )  # fmt: skip
    return body


def _error(exc: EngineError) -> web.Response:
    return web.json_response(shapes.error_body(exc), status=int(exc.status))


def _scripted_error(failure: FailureSpec, model: str) -> web.Response:
    status = HTTPStatus(failure.status)
    err_type = "InternalServerError" if status == 500 else status.phrase.replace(" ", "") + "Error"
    message = failure.message or f"scripted failure for model `{model}`"
    return _error(EngineError(message, status, err_type))
