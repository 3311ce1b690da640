"""Adapter warm-up, the I/O half: a one-token request per expert adapter on every ready
engine pod.

The resolver plugin fetches an adapter on its first request, so a restarted or newly
scaled pod would make some user wait for the download. Once the pod reports Ready
(never before: a pod still loading the base model would queue or fail the request),
the operator sends each expert's immutable name (``ns/name@vN``) one
``/v1/completions`` request with ``max_tokens=1``. Requests run concurrently, a few
at a time per pod; a failing adapter is reported and never holds up the others.

:mod:`mol_operator.warmup_plan` (pure) picks the pods and what to warm;
:class:`Warmer` remembers what each pod (by uid) already holds so the Pod handler can
call it on every event and only new pods, restarted pods (new uid) and new versions
are warmed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

import aiohttp

from mol_operator.warmup_plan import WarmupResult, error_text, pod_url

PER_POD_CONCURRENCY: Final = 4
WARMUP_PROMPT: Final = "Hello"


async def _warm_one(
    client: aiohttp.ClientSession, gate: asyncio.Semaphore, url: str, model: str, limit: float
) -> str | None:
    async with gate:
        try:
            async with client.post(
                f"{url}/v1/completions",
                json={"model": model, "prompt": WARMUP_PROMPT, "max_tokens": 1},
                timeout=aiohttp.ClientTimeout(total=limit),
            ) as rsp:
                if rsp.status == 200:
                    await rsp.read()
                    return None
                return error_text(rsp.status, await rsp.text(errors="replace"))
        except TimeoutError:
            return f"timed out after {limit:g}s"
        except aiohttp.ClientError as exc:
            return f"{type(exc).__name__}: {exc}"


async def warm_adapters(
    pod_urls: Sequence[str],
    model_names: Sequence[str],
    *,
    timeout: float,  # noqa: ASYNC109 - each request's own HTTP timeout, not a deadline
) -> WarmupResult:
    """Warm every name on every pod; ``{(pod_url, name): None | error text}``.

    ``timeout`` bounds each request; one slow adapter does not cut the others short."""
    gates = {url: asyncio.Semaphore(PER_POD_CONCURRENCY) for url in pod_urls}
    pairs = [(url, name) for url in dict.fromkeys(pod_urls) for name in dict.fromkeys(model_names)]
    async with aiohttp.ClientSession() as client:
        results = await asyncio.gather(
            *(_warm_one(client, gates[url], url, name, timeout) for url, name in pairs)
        )
    return dict(zip(pairs, results, strict=True))


class Warmer:
    """Warms what a pod has not been warmed with yet; one per operator.

    Keyed by pod uid: a restarted pod is a new Pod object (new uid) and is warmed again;
    a failed adapter is retried on the next call."""

    def __init__(self, *, timeout: float = 60.0) -> None:
        self.timeout = timeout
        self._done: dict[str, set[str]] = {}

    async def warm(
        self, pods: Iterable[Mapping[str, Any]], model_names: Sequence[str]
    ) -> WarmupResult:
        """Warm the ready pods among ``pods``; returns only the pairs tried now."""
        todo: dict[str, tuple[str, list[str]]] = {}
        for pod in pods:
            url, uid = pod_url(pod), (pod.get("metadata") or {}).get("uid")
            if url is None or not uid:
                continue
            missing = [n for n in model_names if n not in self._done.get(uid, set())]
            if missing:
                todo[uid] = (url, missing)
        if not todo:
            return {}
        results = await asyncio.gather(
            *(warm_adapters([url], names, timeout=self.timeout) for url, names in todo.values())
        )
        merged: WarmupResult = {}
        for uid, result in zip(todo, results, strict=True):
            self._done.setdefault(uid, set()).update(n for (_, n), e in result.items() if e is None)
            merged.update(result)
        return merged

    def forget(self, uid: str) -> None:
        """Drop a deleted pod."""
        self._done.pop(uid, None)
