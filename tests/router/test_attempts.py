"""The fault path's pure rules as functions: the attempt plan, the back-off helper, 5xx
errors confined to one adapter, and the cap on failure-based ejection."""

from __future__ import annotations

import aiohttp
import pytest

from mol_router.backoff import Backoff, ejection
from mol_router.replicas import attempts
from mol_router.replicas.avoid import CONFINED_WINDOW, AdapterFailures
from mol_router.replicas.tracker import EngineTracker

R0, R1, R2 = "http://r0", "http://r1", "http://r2"


def test_a_client_that_went_away_is_nobodys_failure_and_never_retried() -> None:
    assert attempts.blame("cancelled") == "none"
    assert not attempts.may_retry("cancelled", wrote=False, tries=1, max_tries=3,
                                  broken_retried=False)
    assert attempts.blame("broken") == "replica"
    assert attempts.blame("status") == "error"  # the replica's or the pair's
    assert attempts.blame("adapter") == "pair"
    assert attempts.blame("down") == "down"
    assert attempts.blame("ok") == "success"


@pytest.mark.parametrize(("outcome", "wrote", "tries", "broken_retried", "allowed"), [
    ("connect", False, 1, False, True),
    ("connect", False, 3, False, False),  # the tries are spent
    ("status", False, 2, False, True),
    ("adapter", False, 1, False, True),
    ("timeout", False, 1, False, False),  # the engine may still be working
    ("broken", False, 5, False, True),  # broken after its head: one more, whatever tried
    ("broken", False, 1, True, False),
    ("broken", True, 1, False, False),  # bytes reached the client
    ("status", True, 1, False, False),
    ("ok", False, 1, False, False),
])
def test_which_outcomes_may_be_retried(outcome: attempts.Outcome, wrote: bool, tries: int,
                                       broken_retried: bool, allowed: bool) -> None:
    assert attempts.may_retry(outcome, wrote=wrote, tries=tries, max_tries=3,
                              broken_retried=broken_retried) is allowed


def test_where_a_next_try_may_go() -> None:
    ready = [R0, R1, R2]
    assert attempts.candidates({R0}, ready) == [R1, R2]
    # an avoided pair is left out while another replica can take the adapter...
    assert attempts.candidates(set(), ready, {R1}) == [R0, R2]
    assert attempts.candidates({R0, R2}, ready, {R1}) == [R1]  # ...not when none can
    assert attempts.excluded({R0}, ready, {R1}) == {R0, R1}
    assert attempts.candidates({R0, R1, R2}, ready) == []


def test_backoff_doubles_up_to_its_cap_with_jitter_below_it() -> None:
    b = Backoff(first=2.0, most=10.0, jitter=0.5)
    assert [b.ceiling(n) for n in range(6)] == [0.0, 2.0, 4.0, 8.0, 10.0, 10.0]
    assert b.after(3, lambda: 1.0) == 8.0
    assert b.after(3, lambda: 0.0) == 4.0  # half of it: jitter 0.5
    assert Backoff(1.0, 5.0).after(2) == 2.0  # no jitter: exact
    assert b.ceiling(10_000) == 10.0  # no overflow
    e = ejection(10.0)
    assert (e.first, e.most) == (10.0, 80.0)
    with pytest.raises(ValueError, match="jitter"):
        Backoff(1.0, 2.0, jitter=2.0)


def test_a_5xx_is_the_pairs_only_while_other_adapters_succeed_on_that_replica() -> None:
    f = AdapterFailures()
    assert not f.confined(R0, "a", now=100.0)  # nothing else seen there: the replica's
    f.cleared(R0, "b", now=101.0)
    assert f.confined(R0, "a", now=102.0)  # b succeeds there: a's own
    assert not f.confined(R0, "a", now=101.0 + CONFINED_WINDOW + 1)  # too long ago
    f.cleared(R0, "b", now=200.0)
    assert f.confined(R0, "a", now=201.0)
    assert not f.confined(R0, "c", now=202.0)  # a failed after b's success: the replica
    f.cleared(R0, "c", now=203.0)
    assert f.confined(R0, "a", now=204.0)  # c succeeded since
    assert not f.confined(R1, "a", now=204.0)  # per replica
    f.forget(R0)
    assert not f.confined(R0, "a", now=205.0)


async def _tracker(endpoints: list[str], **kw: object) -> tuple[EngineTracker,
                                                                 aiohttp.ClientSession]:
    session = aiohttp.ClientSession()
    t = EngineTracker(session, scrape_interval=60, eject_after_failures=1, readmit_after=30,
                      **kw)  # type: ignore[arg-type]
    t.set_endpoints(endpoints)
    for e in endpoints:
        t.record_health(e, True)  # every health check passes
    return t, session


async def test_failed_requests_never_empty_a_pool_whose_health_checks_pass() -> None:
    t, session = await _tracker([R0, R1, R2])
    async with session:
        for _ in range(3):
            for e in (R0, R1, R2):
                t.record_failure(e)
        assert len(t.ready_endpoints()) == 2  # 50% of 3: one out for failures
        t100, s100 = await _tracker([R0, R1], max_ejection_percent=100)
        async with s100:
            for _ in range(3):
                for e in (R0, R1):
                    t100.record_failure(e)
            assert len(t100.ready_endpoints()) == 1  # never the last one
        t0, s0 = await _tracker([R0, R1], max_ejection_percent=0)
        async with s0:
            t0.record_failure(R0)
            assert t0.ready_endpoints() == [R0, R1]
            t0.record_failure(R0, down=True)  # nothing answers there: out at once
            t0.record_failure(R1, down=True)
            assert t0.ready_endpoints() == []


async def test_one_adapters_5xx_books_the_pair_and_leaves_the_replica_in() -> None:
    t, session = await _tracker([R0, R1])
    async with session:
        t.record_success(R0, "b")
        assert t.record_error(R0, "a") is not None
        assert t.adapter_failures.avoid("a") == {R0}
        t.record_error(R0, "a")
        assert t.ready_endpoints() == [R0, R1]
        assert t.record_error(R1, "a") is None  # nothing else succeeded on R1: R1's
        assert t.ready_endpoints() == [R0]
