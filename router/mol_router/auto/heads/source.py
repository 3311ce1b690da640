"""Where the router's trained heads come from: a file (``semantic.headFile``) or the
catalog (``semantic.head``, and ``semantic.canary.head`` for a candidate on trial).

A head in the catalog is an immutable, digest-named version of a router head, reached
through an alias (``ns/name@stable``) or a version (``@v3``). The source resolves each
reference when the config is applied and again whenever the catalog's event feed says
that head's aliases or versions changed (the adapter resolver follows the feed and
hands it the events), with a slow full refresh as a safety net. Why the source checks
what it downloads: the bytes must hash to the digest the catalog named, and the head
must fit the deployment (its experts, its embedding model) before it replaces the one
serving: a head that does not fit is refused and the running head stays, so a bad
alias move never takes automatic routing down.

The catalog being down at start leaves the head missing (the semantic signal then
falls back as for an engine failure: keywords, the classifier, the default expert) and
the source retries until it has it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mol_platform.contract.refs import RefError
from mol_platform.contract.router_heads import EVENT_PREFIX as HEAD_EVENT_PREFIX
from mol_platform.contract.router_heads import HeadRef, digest_of
from mol_router.auto import scores
from mol_router.auto.heads.model import Head, HeadError, check_for, loads, read

if TYPE_CHECKING:
    from mol_platform.clients.catalog_async import AsyncCatalogClient
    from mol_platform.contract.router_config import RouterSemantic

log = logging.getLogger("mol.router.heads")

RETRY_SECONDS = 5.0
"""How often a head that could not be had is asked for again."""
FULL_REFRESH_SECONDS = 300.0
"""The slow refresh of every reference: should an event of the feed be missed."""
EVENT_PREFIX = HEAD_EVENT_PREFIX
ROLES = ("stable", "candidate")


@dataclass(frozen=True)
class LoadedHead:
    """A head the router can use, with what names it: ``digest`` (sha256 of the bytes
    the router read, the catalog's digest), ``ref`` as the config wrote it, ``label``
    (``ns/name@v3``, or the file's name) for the ``x-mol-route`` header, ``explain``,
    metrics and logs, and its keyword index."""

    head: Head
    digest: str
    ref: str
    label: str
    keywords: tuple[scores.ExpertIndex, ...]

    @classmethod
    def of(cls, head: Head, digest: str, ref: str, label: str) -> LoadedHead:
        return cls(head, digest, ref, label, head.keyword_index())


def from_bytes(raw: bytes, ref: str, label: str, digest: str | None = None) -> LoadedHead:
    """A head from its document's bytes; ``digest`` (when given) must be theirs."""
    actual = digest_of(raw)
    if digest is not None and actual != digest:
        raise HeadError(f"{ref}: the document's sha256 is {actual}, the catalog named "
                        f"{digest}")
    return LoadedHead.of(loads(raw), actual, ref, label)


def from_file(path: str) -> LoadedHead:
    """A head file (``semantic.headFile``): its digest is the canonical one, as the
    catalog computes at publish time, so a file and its published copy match."""
    head, digest = read(path)
    return LoadedHead.of(head, digest, path, path.rsplit("/", 1)[-1])


class HeadSource:
    """The serving head (``stable``) and the candidate on trial (``candidate``), kept
    current. ``errors`` says per role why a head is missing or was refused (the newest
    reason; a refused update keeps the head that was serving)."""

    def __init__(self, client: AsyncCatalogClient | None, refs: Mapping[str, str | None],
                 experts: Sequence[str], model: str, *,
                 files: Mapping[str, str] | None = None,
                 on_change: Callable[[str, LoadedHead | None], None] | None = None,
                 retry_seconds: float = RETRY_SECONDS,
                 full_refresh_seconds: float = FULL_REFRESH_SECONDS) -> None:
        self.client = client
        self.refs = {role: ref for role, ref in refs.items() if ref is not None}
        self.experts = tuple(experts)
        self.model = model
        self.heads: dict[str, LoadedHead] = {}
        self.errors: dict[str, str] = {}
        self._on_change = on_change
        self._retry = retry_seconds
        self._full = full_refresh_seconds
        self._tasks: list[asyncio.Task[None]] = []
        self._wake = asyncio.Event()
        self._names: set[str] = set()  # the feed's keys (ns/name) of the references
        for ref in self.refs.values():
            with contextlib.suppress(RefError):  # a bad one is refused by refresh()
                self._names.add(HeadRef.parse(ref).head)
        for role, path in (files or {}).items():
            # A file is read once (the config was checked with it; a file gone since
            # leaves the head missing, with the reason).
            try:
                self._set(role, from_file(path))
            except HeadError as exc:
                self.errors[role] = str(exc)
                log.error("trained head unusable (%s); the semantic signal falls back", exc)

    @classmethod
    def of(cls, sem: RouterSemantic | None, experts: Sequence[str],
           client: AsyncCatalogClient | None, *,
           on_change: Callable[[str, LoadedHead | None], None] | None = None
           ) -> HeadSource | None:
        """The heads a config's semantic section names (None: none, examples decide):
        ``headFile`` read once as the serving head, or ``head`` followed in the
        catalog; ``canary.head``, the candidate, from the catalog beside either. The
        one place the router builds its heads."""
        if sem is None or (sem.head_file is None and sem.head is None):
            return None
        refs = {"stable": sem.head}
        if sem.canary is not None and client is not None:
            refs["candidate"] = sem.canary.head
        files = {"stable": sem.head_file} if sem.head_file is not None else {}
        return cls(client if any(refs.values()) else None, refs, experts, sem.model,
                   files=files, on_change=on_change)

    @property
    def stable(self) -> LoadedHead | None:
        return self.heads.get("stable")

    @property
    def candidate(self) -> LoadedHead | None:
        return self.heads.get("candidate")

    @property
    def wanted(self) -> bool:
        """Whether a head is configured at all (else examples decide)."""
        return bool(self.refs) or bool(self.heads) or bool(self.errors)

    # --- lifecycle -----------------------------------------------------------------

    async def start(self, bound: float = 5.0) -> None:
        """Resolve every reference (within ``bound`` seconds: the catalog being slow or
        down must not hold the router's start), then keep them current."""
        if self.client is None or not self.refs:
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(bound):
                await self.refresh()
        self._tasks = [asyncio.create_task(self._follow(), name="mol-heads")]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []

    def on_events(self, events: Sequence[dict[str, Any]]) -> None:
        """The catalog's feed (from the adapter resolver): a change to one of the
        configured heads wakes the refresh."""
        for event in events:
            if str(event.get("type", "")).startswith(EVENT_PREFIX) \
                    and event.get("adapter") in self._names:
                self._wake.set()
                return

    async def _follow(self) -> None:
        while True:
            missing = any(role not in self.heads for role in self.refs)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._retry if missing else self._full):
                    await self._wake.wait()
            self._wake.clear()
            await self.refresh()

    # --- resolving -----------------------------------------------------------------

    async def refresh(self) -> None:
        """Resolve each reference; fetch and check a head whose digest changed."""
        await asyncio.gather(*(self._refresh(role, ref) for role, ref in self.refs.items()))

    async def _refresh(self, role: str, ref: str) -> None:
        assert self.client is not None
        try:
            parsed = HeadRef.parse(ref)
            meta = await self.client.router_head(parsed.namespace, parsed.name, parsed.ref)
            current = self.heads.get(role)
            if current is not None and current.digest == meta.digest:
                self.errors.pop(role, None)
                return
            raw = await self.client.router_head_document(parsed.namespace, parsed.name,
                                                         meta.version)
            loaded = from_bytes(raw, ref, f"{parsed.head}@v{meta.version}", meta.digest)
            check_for(loaded.head, self.experts, self.model)
        except asyncio.CancelledError:
            raise
        except (HeadError, RefError) as exc:
            self._refuse(role, ref, str(exc))
            return
        except Exception as exc:  # the catalog is down or answered an error
            self._refuse(role, ref, f"cannot fetch {ref} from the catalog: "
                         f"{exc or type(exc).__name__}")
            return
        self._set(role, loaded)
        log.info("router head %s (%s): %s, %s", role, ref, loaded.label, loaded.digest)

    def _refuse(self, role: str, ref: str, why: str) -> None:
        if self.errors.get(role) != why:
            keeping = self.heads.get(role)
            log.error("router head %s (%s) refused: %s%s", role, ref, why,
                      f"; still serving {keeping.label}" if keeping else "")
        self.errors[role] = why

    def _set(self, role: str, loaded: LoadedHead) -> None:
        self.heads[role] = loaded
        self.errors.pop(role, None)
        if self._on_change is not None:
            self._on_change(role, loaded)

    def status(self) -> dict[str, Any]:
        """What ``/status`` shows: each role's reference, head and digest, or why not."""
        out: dict[str, Any] = {}
        for role in ROLES:
            loaded = self.heads.get(role)
            ref = self.refs.get(role)
            if loaded is None and ref is None and role not in self.errors:
                continue
            out[role] = {"ref": ref or (loaded.ref if loaded else None),
                         "head": loaded.label if loaded else None,
                         "digest": loaded.digest if loaded else None,
                         "error": self.errors.get(role)}
        return out

