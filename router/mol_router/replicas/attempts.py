"""The attempt plan: after one try at an engine, whom to blame and where to try next.

One set of rules for every attempt of a request, before the engine's response head
(:meth:`mol_router.serving.upstream.Upstreams.send`) and after it (the hop loop,
:mod:`mol_router.serving.relay`), for whole answers and streams alike:

- **blame.** A connect error or a refused connection, a timeout, an answer broken
  after its head: the replica's. A 5xx answer: the replica's, or the (replica, adapter)
  pair's when it is confined to that adapter (the tracker decides). An engine saying it
  could not load the adapter: the pair's. A client that went away (it dropped the
  stream, it timed out, it pressed Stop): nobody's. Counting those against the engine
  would eject healthy engines whenever clients give up, under overload most of all.
- **retry.** Never once a byte of this answer reached the client, never after a
  timeout (the engine may still be working), never for a client that went away. A
  connect error, a 5xx or an adapter the engine could not load: up to ``max_tries``
  tries in all. An answer broken after its head, before any byte reached the client:
  one more try per request.
- **where.** Not a replica already tried for this hop; not one where the adapter
  failed lately while another ready replica can take it.

Pure: callers pass what they know, the plan answers; no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import Literal

Outcome = Literal["ok", "status", "adapter", "connect", "down", "timeout", "broken",
                  "cancelled"]
"""How one try ended: ``ok`` an answer below 500 read whole (or relayed whole);
``status`` a 5xx answer; ``adapter`` the engine could not load the adapter; ``connect``
no connection (``down``: nothing listens there); ``timeout`` no answer in time;
``broken`` the answer broke after its head; ``cancelled`` the client went away."""

Blame = Literal["none", "success", "replica", "down", "pair", "error"]
"""``error``: a 5xx, the replica's or the pair's (see the module docstring)."""

_BLAME: dict[Outcome, Blame] = {
    "ok": "success", "status": "error", "adapter": "pair", "connect": "replica",
    "down": "down", "timeout": "replica", "broken": "replica", "cancelled": "none",
}
_BEFORE_HEAD_RETRIES: frozenset[Outcome] = frozenset({"status", "adapter", "connect", "down"})

RETRY_REASON: dict[Outcome, str] = {
    "status": "status", "adapter": "adapter", "connect": "connect", "down": "connect",
    "broken": "broken",
}
"""The ``reason`` label of ``mol_router_retries_total`` for a retry after each outcome."""

NOTHING: frozenset[str] = frozenset()


def blame(outcome: Outcome) -> Blame:
    """Whom ``outcome`` counts against."""
    return _BLAME[outcome]


def may_retry(outcome: Outcome, *, wrote: bool, tries: int, max_tries: int,
              broken_retried: bool) -> bool:
    """Whether the request may go to another replica after ``outcome``: ``wrote`` when
    bytes of this answer reached the client, ``tries`` the tries of this hop so far
    (this one included), ``broken_retried`` when the one retry of an answer broken after
    its head was spent. Whether such a replica is ready is :func:`candidates`' part."""
    if wrote:
        return False
    if outcome == "broken":
        return not broken_retried
    return outcome in _BEFORE_HEAD_RETRIES and tries < max_tries


def excluded(tried: Collection[str], ready: Iterable[str], avoid: Collection[str]
             ) -> frozenset[str]:
    """The replicas not to pick now: the ones tried, and those avoided for the adapter
    (``avoid``) as long as another ready replica can take it."""
    exclude = frozenset(tried) if tried else NOTHING
    if avoid and any(e not in avoid and e not in exclude for e in ready):
        exclude = exclude | frozenset(avoid)
    return exclude


def candidates(tried: Collection[str], ready: Iterable[str], avoid: Collection[str] = NOTHING
               ) -> list[str]:
    """The ready replicas a next try may go to (those :func:`excluded` leaves)."""
    ready = list(ready)
    exclude = excluded(tried, ready, avoid)
    return [e for e in ready if e not in exclude]


def answered(status: int) -> Outcome:
    """The outcome of an answer read whole with this status."""
    return "status" if status >= 500 else "ok"
