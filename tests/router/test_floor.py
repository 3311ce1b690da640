"""bench/_floor.py: the adapter-load floor is a bound that no policy or schedule beats.

Each hand-made workload (stationary, drifting, bursty, overloaded) is run through every
routing policy on the simulated fleet and through two pooled-slot schedules that know
the future; each one's loads must be at least the floor at the longest wait it made a
request take before starting (a longer allowed wait only lowers the floor).
"""

from __future__ import annotations

import heapq
import math
import random
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

from _fleet import FleetShape, run_policy  # noqa: E402
from _floor import Fleet, belady_misses, load_floor, online_floor  # noqa: E402
from _workload import Arrival, zipf_weights  # noqa: E402
from mol_router.replicas.policy import POLICY_NAMES  # noqa: E402

SHAPE = FleetShape(replicas=4, max_loras=2, max_num_seqs=4, ttft_s=0.05, itl_s=0.01,
                   lora_load_s=0.2, scrape_interval=1.0)  # fmt: skip
FLEET = Fleet(slots=SHAPE.replicas * SHAPE.max_loras, max_num_seqs=SHAPE.max_num_seqs,
              load_s=SHAPE.lora_load_s, replicas=SHAPE.replicas)  # fmt: skip
TOKENS = 8


def service(a: Arrival) -> float:
    return SHAPE.ttft_s + (a.max_tokens - 1) * SHAPE.itl_s


def _poisson(rng: random.Random, names: list[str], rate: float, start: float, stop: float,
             s: float = 1.0) -> list[Arrival]:  # fmt: skip
    weights = zipf_weights(len(names), s)
    out: list[Arrival] = []
    t = start
    while True:
        t += rng.expovariate(rate)
        if t >= stop:
            return out
        out.append(Arrival(t, rng.choices(names, weights)[0], "u", 16, TOKENS))


def _capacity() -> float:
    return SHAPE.capacity(TOKENS)


def stationary() -> list[Arrival]:
    names = [f"ns/a{i}@v1" for i in range(30)]
    return _poisson(random.Random(1), names, 0.6 * _capacity(), 0.0, 20.0)


def drifting() -> list[Arrival]:
    rng = random.Random(2)
    first = [f"ns/a{i}@v1" for i in range(30)]
    second = list(reversed(first))  # the cold ones become the hot ones
    rate = 0.6 * _capacity()
    return _poisson(rng, first, rate, 0.0, 10.0) + _poisson(rng, second, rate, 10.0, 20.0)


def bursty() -> list[Arrival]:
    rng = random.Random(3)
    names = [f"ns/a{i}@v1" for i in range(30)]
    out: list[Arrival] = []
    for k in range(5):  # 1 s at twice the capacity, then 3 s of nothing
        out += _poisson(rng, names[k * 5:(k + 1) * 5 + 5], 2.0 * _capacity(), 4.0 * k,
                        4.0 * k + 1.0)  # fmt: skip
    return out


def overloaded() -> list[Arrival]:
    names = [f"ns/a{i}@v1" for i in range(30)]
    return _poisson(random.Random(4), names, 1.6 * _capacity(), 0.0, 8.0)


WORKLOADS = {"stationary": stationary, "drifting": drifting, "bursty": bursty,
             "overloaded": overloaded}  # fmt: skip


@dataclass
class _Slot:
    adapter: str | None = None
    ready: float = 0.0  # when its load finishes
    running: list[float] | None = None  # end times of its requests
    used: float = 0.0


def pooled_schedule(arrivals: list[Arrival], evict: str) -> tuple[int, float]:
    """A schedule on pooled slots (any adapter in any slot, ``max_num_seqs`` requests
    per slot, the fleet's batch lanes in all), requests started in arrival order as soon
    as possible; ``evict`` is ``lru`` or ``belady`` (the idle slot whose adapter is
    needed again farthest in the future). Returns (loads, longest wait)."""
    slots = [_Slot(running=[]) for _ in range(FLEET.slots)]
    lanes: list[float] = []  # end times of all running requests (a heap)
    loads, longest = 0, 0.0
    for a in arrivals:
        t = a.t
        while True:
            while lanes and lanes[0] <= t:
                heapq.heappop(lanes)
            for s in slots:
                s.running = [e for e in s.running or [] if e > t]
            home = next((s for s in slots if s.adapter == a.adapter
                         and len(s.running or []) < FLEET.max_num_seqs), None)  # fmt: skip
            free_lane = len(lanes) < FLEET.replicas * FLEET.max_num_seqs
            if home is not None and free_lane:
                start = max(t, home.ready)
                break
            idle = [s for s in slots if not s.running and s.ready <= t]
            if idle and free_lane:
                if evict == "lru":
                    victim = min(idle, key=lambda s: s.used)
                else:
                    victim = max(idle, key=lambda s: seen_next(s.adapter, t, arrivals))
                victim.adapter, victim.ready = a.adapter, t + FLEET.load_s
                loads += 1
                home, start = victim, t + FLEET.load_s
                break
            ends = [e for s in slots for e in s.running or []] + [s.ready for s in slots
                                                                   if s.ready > t]
            ends += lanes
            t = min(e for e in ends if e > t)
        end = start + service(a)
        assert home.running is not None
        home.running.append(end)
        home.used = start
        heapq.heappush(lanes, end)
        longest = max(longest, start - a.t)
    return loads, longest


def seen_next(adapter: str | None, t: float, arrivals: list[Arrival]) -> float:
    return next((a.t for a in arrivals if a.t > t and a.adapter == adapter), math.inf)


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_no_policy_or_schedule_beats_the_floor(name: str) -> None:
    arrivals = WORKLOADS[name]()
    assert len(arrivals) > 100
    results: dict[str, tuple[int, float]] = {}
    for policy in POLICY_NAMES:
        run = run_policy(policy, policy, 1, arrivals, SHAPE)
        results[policy] = (run.adapter_loads, max(t - SHAPE.ttft_s for t in run.ttft))
    four = run_policy("x4", POLICY_NAMES[0], 4, arrivals, SHAPE)
    results["x4"] = (four.adapter_loads, max(t - SHAPE.ttft_s for t in four.ttft))
    for evict in ("lru", "belady"):
        results[f"pooled-{evict}"] = pooled_schedule(arrivals, evict)
    for who, (loads, wait) in results.items():
        floor = load_floor(arrivals, FLEET, service, wait_s=max(wait, 0.0) + 1e-9)
        assert floor.infeasible is None, (who, floor.describe())
        assert floor.loads <= loads, (name, who, loads, floor.describe())


def test_floor_gives_way_to_a_longer_wait_and_fewer_slots_raise_it() -> None:
    arrivals = stationary()
    got = [load_floor(arrivals, FLEET, service, wait_s=w) for w in (0, 0.3, 1, 5)]
    # at no wait every cold request would need its adapter loaded before it arrived
    assert got[0].infeasible is not None
    floors = [f.loads for f in got[1:]]
    assert all(f.infeasible is None for f in got[1:])
    assert floors == sorted(floors, reverse=True)
    assert floors[0] > floors[-1]
    fewer = Fleet(FLEET.slots - 2, FLEET.max_num_seqs, FLEET.load_s, FLEET.replicas)
    tight = load_floor(arrivals, fewer, service, wait_s=5.0)
    assert tight.infeasible is None
    assert tight.loads > floors[-1]
    # every adapter requested costs at least its first load
    assert floors[-1] >= len({a.adapter for a in arrivals})


def test_infeasible_instead_of_a_number() -> None:
    over = overloaded()
    floor = load_floor(over, FLEET, service, wait_s=0.0)
    assert floor.infeasible is not None
    assert floor.per_1000 is None
    assert "infeasible" in floor.describe()
    # more adapters than slots, each requested non-stop: no schedule fits them all
    names = [f"ns/c{i}@v1" for i in range(FLEET.slots + 4)]
    steady = [Arrival(k * 0.01, names[k % len(names)], "u", 16, TOKENS) for k in range(600)]
    assert load_floor(steady, FLEET, service, wait_s=0.0).infeasible is not None
    assert load_floor(steady, Fleet(0, 4, 0.2, 4), service).infeasible is not None


def test_belady_by_hand() -> None:
    seq = [Arrival(float(i), f"ns/{c}@v1", "u", 16, 1) for i, c in enumerate("abcabc")]
    assert belady_misses(seq, 2) == 4  # a b c(evict b) a b(evict a) c
    assert belady_misses(seq, 3) == 3
    assert belady_misses(seq, 0) == 6
    assert belady_misses([Arrival(0.0, None, "u", 16, 1)], 1) == 0


def test_one_adapter_with_room_to_spare_loads_once() -> None:
    one = [Arrival(i * 0.05, "ns/a@v1", "u", 16, TOKENS) for i in range(100)]
    floor = load_floor(one, FLEET, service)
    assert floor.loads == 1
    assert run_policy("ours", POLICY_NAMES[0], 1, one, SHAPE).adapter_loads >= floor.loads


def test_online_floor_on_stationary_traffic() -> None:
    """The expectation bound for routers that do not know the future: below every
    policy on stationary traffic, above the offline bound, lower with a longer wait, and
    infeasible when the adapters' least residency exceeds the slots."""
    arrivals = stationary()
    mean = service(arrivals[0])
    online = [online_floor(arrivals, FLEET, mean, wait_s=w) for w in (0.3, 1.0)]
    assert online[0].loads > online[1].loads > 0
    for policy in POLICY_NAMES:
        run = run_policy(policy, policy, 1, arrivals, SHAPE)
        wait = max(t - SHAPE.ttft_s for t in run.ttft)
        assert online_floor(arrivals, FLEET, mean, wait_s=wait).loads <= run.adapter_loads
    assert online[0].loads >= load_floor(arrivals, FLEET, service, wait_s=0.3).loads
    assert online_floor(arrivals, Fleet(1, 4, 0.2, 4), mean).infeasible is not None
