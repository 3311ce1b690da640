"""bench/_http_leg.py: ours over HTTP books each send's prefix keys, as the proxy does.

Both legs send through ``_fleet.pick_and_book``. Over HTTP, on two simulated replicas
(their own process, real /metrics and SSE), two sessions' first turns go out together
(so they land apart); their second turns, each alone on an idle fleet, must go back to
where their history is, which only the booked prefix keys tell the router.
"""

from __future__ import annotations

import sys
from pathlib import Path

import aiohttp
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

from _fleet import FleetShape, pick_and_book, route_prefix, route_request  # noqa: E402
from _http_leg import run_ours  # noqa: E402
from _prefix_bound import ideal  # noqa: E402
from _workload import Arrival  # noqa: E402
from mol_router.replicas.policy import make_policy  # noqa: E402
from mol_router.replicas.tracker import EngineTracker  # noqa: E402

SHAPE = FleetShape(replicas=2, max_loras=2, max_num_seqs=4, ttft_s=0.01, itl_s=0.01,
                   lora_load_s=0.0, scrape_interval=1.0, lora_disk_load_s=0.0,
                   prefill_s_per_token=0.0, kv_cache_blocks=4096)  # fmt: skip


def turn(t: float, session: str, k: int) -> Arrival:
    segments = [(f"sys-{session}", 400), (f"{session}-m0", 20)]
    if k:
        segments += [(f"{session}-r0", 30), (f"{session}-m1", 20)]
    frozen = tuple(segments)
    return Arrival(t, None, session, sum(n for _, n in frozen), 4, frozen, session)


TRACE = [turn(0.0, "a", 0), turn(0.0, "b", 0), turn(1.5, "a", 1), turn(3.0, "b", 1)]


async def test_a_pick_is_booked_with_the_prompts_prefix_keys() -> None:
    async with aiohttp.ClientSession() as session:
        tracker = EngineTracker(session, scrape_interval=1.0)
        urls = ["http://r0", "http://r1"]
        tracker.set_endpoints(urls)
        for u in urls:
            tracker.record_health(u, True)
        request = route_request(TRACE[0])
        assert request.prefix
        assert request.prefix == route_prefix(TRACE[0])
        endpoint = pick_and_book(make_policy("mol-affinity"), tracker, urls,
                                 tracker.snapshot(), request)  # fmt: skip
        assert endpoint in urls
        index = tracker.snapshot().prefix
        assert index is not None
        # the index now places the second turn's prefix (the first turn's prompt) there
        later = route_request(TRACE[2])
        assert index.matches(later.prefix, urls).get(endpoint, 0) > 0


@pytest.mark.timeout(120)
def test_ours_over_http_sends_second_turns_back_to_their_history(tmp_path: Path) -> None:
    result = run_ours("mol-affinity", 1, TRACE, SHAPE, 4, 1.0, 20.0, tmp_path / "leg.log")
    assert result.errors == 0
    best = ideal(TRACE, SHAPE.block_size)
    assert result.prefix_queries == best.queries
    assert result.prefix_hits == best.hits > 0  # both second turns found their history
