"""Replica-picking policies: table-driven cases of each rule, plus the properties that
make ours usable from independent router replicas (determinism, bounded spread)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

import pytest

from mol_router.replicas.policy import (
    DEFAULT_POLICY,
    POLICY_NAMES,
    EngineStats,
    RouteRequest,
    make_policy,
)
from mol_router.replicas.policy.gie import lora_affinity_score
from mol_router.replicas.policy.hashing import home, ranking
from mol_router.replicas.policy.interface import Demand, FleetStats
from mol_router.replicas.policy.llmd import LlmdLoraLoadState
from mol_router.replicas.policy.mol import eviction_cost, has_free_slot, session_home
from mol_router.replicas.policy.prefix import PrefixIndex
from tests.router.test_prefix import conversation_keys

A = "acme/bot@v1"
EPS = [f"http://e{i}" for i in range(4)]


def S(**kw: object) -> EngineStats:
    kw.setdefault("max_lora", 4)
    return EngineStats(**kw)  # type: ignore[arg-type]


def idle() -> dict[str, EngineStats]:
    return {e: S() for e in EPS}


def test_registry_names_default_first_and_rejects_bad_input() -> None:
    assert POLICY_NAMES[0] == DEFAULT_POLICY == "mol-affinity"
    assert set(POLICY_NAMES) == {
        "mol-affinity", "round-robin", "least-loaded", "gie-lora-affinity", "llmd-lora-load-state",
        "llmd-precise-prefix",
    }  # fmt: skip
    with pytest.raises(ValueError, match="choose one of mol-affinity"):
        make_policy("fastest")
    with pytest.raises(ValueError, match="no knob"):
        make_policy("mol-affinity", {"loadfactor": 2})
    with pytest.raises(ValueError, match=r"must be in \[1"):
        make_policy("mol-affinity", {"load_factor": 0.5})
    with pytest.raises(ValueError, match="integer"):
        make_policy("mol-affinity", {"candidates": 1.5})
    with pytest.raises(ValueError, match="takes no knobs"):
        make_policy("round-robin", {"x": 1})


@pytest.mark.parametrize("name", POLICY_NAMES)
def test_every_policy_skips_unhealthy_and_excluded_and_returns_none_when_empty(name: str) -> None:
    stats = idle()
    stats["http://e0"] = S(healthy=False)
    policy = make_policy(name)
    picks = {policy.pick(EPS, stats, RouteRequest(A), frozenset({"http://e1"})) for _ in range(20)}
    assert picks <= {"http://e2", "http://e3"}
    assert picks
    assert policy.pick(EPS, stats, RouteRequest(A), frozenset(EPS)) is None
    assert policy.pick([], {}, RouteRequest(None)) is None


def test_round_robin_cycles() -> None:
    p = make_policy("round-robin")
    assert [p.pick(EPS, idle(), RouteRequest(A)) for _ in range(5)] == [*EPS, EPS[0]]


@pytest.mark.parametrize(
    ("stats", "expected"),
    [
        ({"http://e0": S(running=3), "http://e1": S(running=1, waiting=1)}, "http://e1"),
        ({"http://e0": S(running=1), "http://e1": S(running=0, inflight=4)}, "http://e0"),
        ({"http://e0": S(running=2, kv_cache_usage=0.9), "http://e1": S(running=2)}, "http://e1"),
    ],
    ids=["running+waiting", "own-inflight-beats-stale-scrape", "kv-breaks-ties"],
)
def test_least_loaded(stats: Mapping[str, EngineStats], expected: str) -> None:
    assert make_policy("least-loaded").pick(list(stats), stats, RouteRequest(A)) == expected


@pytest.mark.parametrize(
    ("stats", "score"),
    [
        (S(running_adapters=frozenset({A, "x"})), 1.0),
        (S(running_adapters=frozenset({"x"})), 0.8),  # 1 running, counted in both lists: 2 < 4
        (S(running_adapters=frozenset({"x", "y"})), 0.0),  # 2 + 2 = 4: full by the rule
        (S(max_lora=8, running_adapters=frozenset({"x", "y", "z"})), 0.8),
        (S(max_lora=1, running_adapters=frozenset({A})), 1.0),
    ],
)
def test_gie_lora_affinity_table(stats: EngineStats, score: float) -> None:
    assert lora_affinity_score(stats, A) == score


def test_gie_combines_queue_kv_and_affinity() -> None:
    p = make_policy("gie-lora-affinity")
    active = frozenset({A})
    stats = {
        "http://e0": S(running_adapters=active, waiting=10),  # affinity 1 but longest queue
        "http://e1": S(waiting=0),  # free slot 0.8, empty queue
    }
    assert p.pick(list(stats), stats, RouteRequest(A)) == "http://e1"
    stats["http://e0"] = S(running_adapters=active, waiting=1)
    stats["http://e1"] = S(waiting=1, kv_cache_usage=0.2)
    assert p.pick(list(stats), stats, RouteRequest(A)) == "http://e0"


def _homes(n_busy: int, waiting: int, others_waiting: int = 0) -> dict[str, EngineStats]:
    out = {e: S(waiting=others_waiting) for e in EPS}
    for e in EPS[:n_busy]:
        out[e] = S(running_adapters=frozenset({A}), waiting=waiting)
    return out


@pytest.mark.parametrize(
    ("stats", "max_replicas", "kept"),
    [
        (idle(), 2, EPS),  # no home: every endpoint passes
        (_homes(1, waiting=0), 2, EPS[:1]),  # sticky to the home with room
        (_homes(2, waiting=9), 2, EPS[:2]),  # homes saturated, cap reached: homes anyway
        (_homes(1, waiting=9), 2, EPS[1:]),  # saturated, under the cap: one new copy elsewhere
        (_homes(1, waiting=9, others_waiting=9), 2, EPS[:1]),  # nowhere has room
        (_homes(3, waiting=9), 0, EPS[3:]),  # 0 = unbounded
    ],
    ids=["no-home", "sticky", "cap-blocked", "spread", "fleet-saturated", "unbounded"],
)
def test_llmd_residency_filter(
    stats: dict[str, EngineStats], max_replicas: int, kept: list[str]
) -> None:
    p = LlmdLoraLoadState({"max_replicas": max_replicas})
    out = p.residency_filter(list(stats.items()), A)
    assert [e for e, _ in out] == kept


def test_llmd_load_state_tiers_and_home_bonus() -> None:
    stats = {
        "http://e0": S(running_adapters=frozenset({A})),
        "http://e1": S(running_adapters=frozenset({"x"})),
        "http://e2": S(running_adapters=frozenset({"w", "x", "y", "z"})),
    }
    scored = LlmdLoraLoadState.load_state_scores(list(stats.items()), A)
    scores = dict(zip(stats, scored, strict=True))
    preferred = home(A, list(stats))
    base = {"http://e0": 1.0, "http://e1": 0.6, "http://e2": 0.0}
    for e, s in scores.items():
        tier = base[e] * 0.94
        bonus = 0.03 if e == preferred and e != "http://e0" else 0.0
        headroom = 0.03 * (4 - len(stats[e].running_adapters)) / 4
        assert s == pytest.approx(tier + bonus + headroom)
    assert scores["http://e0"] > scores["http://e1"] > scores["http://e2"]


def test_hash_ranking_is_stable_and_moves_little_when_an_endpoint_leaves() -> None:
    eps = [f"http://10.0.0.{i}:8000" for i in range(16)]
    names = [f"ns/a{i}@v1" for i in range(400)]
    before = {n: ranking(n, eps)[0] for n in names}
    assert before == {n: ranking(n, list(reversed(eps)))[0] for n in names}  # order-free
    gone = eps[5]
    after = {n: ranking(n, [e for e in eps if e != gone])[0] for n in names}
    moved = [n for n in names if before[n] != after[n]]
    assert all(before[n] == gone for n in moved)
    assert 0 < len(moved) < len(names) / 8
    assert len(set(before.values())) == 16  # every endpoint is somebody's home


def test_mol_goes_home_when_idle_and_agrees_across_instances() -> None:
    eps = [f"http://e{i}" for i in range(8)]
    stats = {e: S() for e in eps}
    a, b = make_policy("mol-affinity"), make_policy("mol-affinity")
    for n in (f"ns/a{i}@v1" for i in range(50)):
        pa = a.pick(eps, stats, RouteRequest(n))
        assert pa == b.pick(list(reversed(eps)), stats, RouteRequest(n)) == ranking(n, eps)[0]


@pytest.mark.parametrize(
    ("stats", "expected"),
    [
        # resident (running) beats home; among resident, least loaded
        ({"h": S(), "r1": S(running=3, running_adapters=frozenset({A})),
          "r2": S(running=1, recent_adapters=frozenset({A}))}, "r2"),
        # resident but over the bound: skipped
        ({"h": S(), "r1": S(running=20, running_adapters=frozenset({A}))}, "h"),
        # home full of other adapters: the next candidate with a free slot
        ({"h": S(running_adapters=frozenset("wxyz")), "n": S()}, "n"),
        # every candidate full: home anyway (wait for a slot, no extra copy)
        ({"h": S(running_adapters=frozenset("wxyz")), "n": S(running_adapters=frozenset("wxyz"))},
         "h"),
        # home over the bound: spill to the next in the adapter's order
        ({"h": S(running=14), "n": S(running=1)}, "n"),
        # the home's last slot went to an adapter sent since the last scrape
        ({"h": S(running_adapters=frozenset("xyz"), pending_adapters=frozenset("w")),
          "n": S()}, "n"),
    ],
    ids=["resident-least-loaded", "resident-over-bound", "free-slot", "all-full", "spill",
         "sent-since-scrape"],
)  # fmt: skip
def test_mol_rules(stats: dict[str, EngineStats], expected: str) -> None:
    # Name the endpoints so that "h" is the adapter's home and "n" comes next.
    order = ranking(A, [f"http://p{i}" for i in range(len(stats))])
    names = {k: v for k, v in (("h", order[0]), ("n", order[1])) if k in stats}
    rest = iter(e for e in order if e not in names.values())
    real = {(names[k] if k in names else next(rest)): v for k, v in stats.items()}
    back = {v: k for k, v in zip(stats, real, strict=True)}
    pick = make_policy("mol-affinity").pick(list(real), real, RouteRequest(A))
    assert pick is not None
    assert back[pick] == expected


@pytest.mark.parametrize(
    ("stats", "share", "free"),
    [
        (S(running_adapters=frozenset("xyz")), 1.0, True),  # 3 of 4 slots busy
        (S(running_adapters=frozenset("wxyz")), 1.0, False),
        (S(running_adapters=frozenset({A, "x", "y", "z"})), 1.0, True),  # runs there
        (S(running_adapters=frozenset("wxyz"), pending_adapters=frozenset({A})), 1.0, True),
        # ours waiting for a slot, or sent since the scrape, will take one
        (S(running_adapters=frozenset("xyz"), pending_adapters=frozenset("w")), 1.0, False),
        (S(running_adapters=frozenset("xy"), pending_adapters=frozenset("x")), 1.0, True),
        # one of 4 routers: each of its unseen adapters stands for about 4 sent there
        (S(running_adapters=frozenset("x"), pending_adapters=frozenset("w")), 2.0, True),
        (S(running_adapters=frozenset("x"), pending_adapters=frozenset("w")), 4.0, False),
        (S(max_lora=0, running_adapters=frozenset("wxyz")), 4.0, True),  # no slot limit
    ],
    ids=["room", "full", "running", "ours-in-flight", "ours-take-the-last", "ours-running",
         "two-routers", "four-routers", "no-limit"],
)  # fmt: skip
def test_free_slot_counts_the_adapters_in_flight_the_scrape_did_not_show(
    stats: EngineStats, share: float, free: bool
) -> None:
    assert has_free_slot(stats, A, share) is free


def test_mol_hot_adapter_spreads_over_a_few_replicas_only() -> None:
    """Feed back the in-flight load: one hot adapter fills its home up to the bound and
    spills down its own order; the other replicas stay free for other adapters."""
    eps = [f"http://e{i}" for i in range(16)]
    inflight: Counter[str] = Counter()
    p = make_policy("mol-affinity")
    for _ in range(24):
        stats = {e: S(inflight=inflight[e], recent_adapters=frozenset({A}) if inflight[e] else
                      frozenset()) for e in eps}  # fmt: skip
        e = p.pick(eps, stats, RouteRequest(A))
        assert e is not None
        inflight[e] += 1
    used = [e for e in eps if inflight[e]]
    assert 2 <= len(used) <= 12
    assert set(used) == set(ranking(A, eps)[: len(used)])


def test_mol_base_model_requests_go_to_least_loaded() -> None:
    stats = {"http://e0": S(running=4), "http://e1": S(running=1), "http://e2": S(running=2)}
    assert make_policy("mol-affinity").pick(list(stats), stats, RouteRequest(None)) == "http://e1"


# Eviction by demand: a load goes where it evicts nothing hotter than the adapter.

HOT, COLD = "ns/hot@v1", "ns/cold@v1"


def demand_of(counts: Mapping[str, int]) -> Demand:
    d = Demand(half_life=1_000_000)
    for name, n in counts.items():
        for _ in range(n):
            d.add(name)
    return d


@pytest.mark.parametrize(
    ("stats", "counts", "expected"),
    [
        ({"slot_adapters": ("x", "y")}, {}, 0.0),  # a slot is empty
        ({"slot_adapters": ("x", "y", "z", "w")}, {"x": 1, "y": 3}, 0.25),  # LRU idle: x
        ({"slot_adapters": ("x", "y", "z", "w"), "running_adapters": frozenset({"x"})},
         {"x": 1, "y": 3}, 0.75),  # x is running: y goes
        ({"slot_adapters": ("x", "y", "z", "w")}, None, 0.0),  # no demand estimate
        ({"recent_adapters": frozenset("xyzw")}, {"x": 1, "y": 3}, 0.75),  # no order: worst
    ],
    ids=["free-slot", "lru-victim", "running-kept", "no-demand", "unordered"],
)  # fmt: skip
def test_eviction_cost(
    stats: dict[str, object], counts: Mapping[str, int] | None, expected: float
) -> None:
    demand = demand_of(counts) if counts is not None else None
    assert eviction_cost(S(**stats), demand) == pytest.approx(expected, rel=1e-4)


def _named(adapter: str, stats: dict[str, EngineStats]) -> dict[str, EngineStats]:
    """Rename keys "h", "n", "m" to the adapter's first, second and third endpoints."""
    order = ranking(adapter, [f"http://p{i}" for i in range(len(stats))])
    return {order["hnm".index(k)]: v for k, v in stats.items()}


@pytest.mark.parametrize(
    ("adapter", "stats", "expected"),
    [
        # a cold adapter passes over a home whose LRU idle adapter is hot
        (COLD, {"h": S(slot_adapters=(HOT, "c1", "c2", "c3")),
                "n": S(slot_adapters=("c4", "c5", "c6", "c7"))}, "n"),
        # a hot adapter may evict a colder one at its home
        (HOT, {"h": S(slot_adapters=(COLD, "c1", "c2", "c3")),
               "n": S(slot_adapters=("c4", "c5", "c6", "c7"))}, "h"),
        # nowhere cheap enough: the lowest eviction cost, not the home
        ("c9", {"h": S(slot_adapters=(HOT, "c1", "c2", "c3")),
                "n": S(slot_adapters=(COLD, "c4", "c5", "c6")),
                "m": S(slot_adapters=(HOT, "c7", "c8", "c1"))}, "n"),
        # a home that cannot start it now is skipped even when eviction is free
        (COLD, {"h": S(running_adapters=frozenset("wxyz"), slot_adapters=tuple("wxyz")),
                "n": S(slot_adapters=(HOT, "c1", "c2", "c3"))}, "n"),
    ],
    ids=["cold-spares-hot", "hot-evicts-cold", "cheapest", "no-free-slot"],
)  # fmt: skip
def test_mol_loads_where_it_evicts_nothing_hotter(
    adapter: str, stats: dict[str, EngineStats], expected: str
) -> None:
    counts = {HOT: 500, COLD: 2, "c9": 1, **{f"c{i}": 1 for i in range(1, 9)}}
    real = FleetStats.of(_named(adapter, stats), demand_of(counts))
    back = {v: k for k, v in zip(stats, _named(adapter, stats), strict=True)}
    pick = make_policy("mol-affinity").pick(list(real), real, RouteRequest(adapter))
    assert pick is not None
    assert back[pick] == expected


def test_mol_agrees_across_instances_with_the_same_demand() -> None:
    eps = [f"http://e{i}" for i in range(8)]
    names = [f"ns/a{i}@v1" for i in range(40)]
    counts = {n: 40 - i for i, n in enumerate(names)}
    base = {e: S(slot_adapters=tuple(names[4 * i: 4 * i + 4])) for i, e in enumerate(eps)}
    one, two = FleetStats.of(base, demand_of(counts)), FleetStats.of(base, demand_of(counts))
    a, b = make_policy("mol-affinity"), make_policy("mol-affinity")
    for n in (f"ns/new{i}@v1" for i in range(30)):
        assert a.pick(eps, one, RouteRequest(n)) == b.pick(list(reversed(eps)), two,
                                                           RouteRequest(n))  # fmt: skip


def test_demand_shares_decay_and_stay_bounded() -> None:
    d = Demand(half_life=10, limit=8)
    assert d.share(A) == 0.0
    for _ in range(10):
        d.add(A)
    for _ in range(10):
        d.add(HOT)
    # the last 10 requests weigh twice the first 10: 1/3 vs 2/3
    assert d.share(A) == pytest.approx(1 / 3, rel=0.05)
    assert d.share(HOT) == pytest.approx(2 / 3, rel=0.05)
    for _ in range(20_000):  # weights rescale instead of overflowing
        d.add(HOT)
    assert d.share(HOT) == pytest.approx(1.0)
    for i in range(20):  # more names than the limit: the rarest are forgotten
        d.add(f"ns/x{i}@v1")
    rest = [d.share(f"ns/x{i}@v1") for i in range(20)]
    assert d.share(HOT) > max(rest)
    assert 0 < sum(s > 0 for s in rest) < 20
    with pytest.raises(ValueError, match="half_life"):
        Demand(half_life=0)


# Sessions across independent routers: each saw some turns; all agree on a home.

SYSTEM = b"You are a careful travel agent. " * 100  # ~3.2 KB shared by every session


def _conversation(name: bytes, turns: int) -> list[tuple[int, ...]]:
    return conversation_keys(SYSTEM, A, name, turns, message=b" plans trip %d ", repeat=40,
                             reply=200)  # fmt: skip


def _router_index(*sent: tuple[tuple[int, ...], str]) -> PrefixIndex:
    index = PrefixIndex()
    for keys, endpoint in sent:
        index.record(keys, endpoint)
    return index


ALICE, BOB, CAROL = (_conversation(name, 6) for name in (b"alice", b"bob", b"carol"))
ALICE_KEY = _router_index((ALICE[0], "x"), (BOB[0], "x")).session(ALICE[0])


def _queues(
    per_engine: int, ours: dict[str, int], resident: frozenset[str]
) -> dict[str, EngineStats]:
    """Scraped queues of ``per_engine`` everywhere, ``ours`` of them this router's
    (1 where not given); the adapter running on ``resident``."""
    return {e: S(running=per_engine, inflight=ours.get(e, 1),
                 running_adapters=frozenset({A}) if e in resident else frozenset())
            for e in EPS}  # fmt: skip


HOME = ranking(f"{ALICE_KEY:016x}", EPS)[0]
AWAY = next(e for e in EPS if e != HOME)


@pytest.mark.parametrize(
    ("stats", "expected"),
    [
        # one of four routers (scraped queues 4x its own), every endpoint resident
        (_queues(4, {}, frozenset(EPS)), HOME),
        # alone (its own requests are the whole queue): no home, it prices what it knows
        (_queues(1, {}, frozenset(EPS)), None),
        # the home is among the endpoints where the adapter is resident only
        (_queues(4, {}, frozenset({AWAY})), AWAY),
        (_queues(4, {}, frozenset()), None),
    ],
    ids=["one-of-four", "alone", "resident-only", "resident-nowhere"],
)  # fmt: skip
def test_session_home(stats: dict[str, EngineStats], expected: str | None) -> None:
    index = _router_index((ALICE[0], "x"), (BOB[0], "x"))
    request = RouteRequest(A, prompt_tokens=4000, prefix=ALICE[5])
    share = sum(s.running for s in stats.values()) / sum(s.inflight for s in stats.values())
    assert session_home(request, stats, index, share) == expected


@pytest.mark.parametrize(
    ("ours_at_home", "to_home"),
    # 3/4 of 4,000 tokens believed cached at home: less than one more request of ours
    # in flight there (the mean of 2,000 tokens times the traffic share, 3.2 with two
    # of ours there, and the scrape, which shows the same 4 everywhere)
    [(1, True), (2, False)],
    ids=["home-as-busy", "home-busier"],
)
def test_independent_routers_send_a_session_to_its_home(ours_at_home: int, to_home: bool) -> None:
    """Four routers share nothing; one of them sent Alice's turn 2, another none of
    her turns (both saw other sessions, which show them where the shared prompt
    ends). For turn 6 both weigh
    the session's home as holding 3/4 of the prompt and agree on it, unless their own
    queue there costs more than that."""
    seen_turn_2 = _router_index((BOB[0], AWAY), (ALICE[1], AWAY))
    seen_nothing = _router_index((BOB[0], AWAY), (CAROL[1], EPS[-1]))
    request = RouteRequest(A, prompt_tokens=4000, prefix=ALICE[5])
    stats = _queues(4, {HOME: ours_at_home}, frozenset(EPS))
    picks = {make_policy("mol-affinity").pick(EPS, FleetStats.of(stats, Demand(), index), request)
             for index in (seen_turn_2, seen_nothing)}  # fmt: skip
    assert (picks == {HOME}) is to_home
    alone = {e: S(running=1, inflight=1, running_adapters=frozenset({A})) for e in EPS}
    assert make_policy("mol-affinity").pick(EPS, FleetStats.of(alone, Demand(), seen_turn_2),
                                            request) == AWAY  # alone: where it sent turn 2


def test_alone_ties_go_to_the_endpoint_sent_to_least_recently() -> None:
    """Every endpoint runs the adapter and holds the shared prompt, with one request of
    ours each: the pick is the one this router sent to least recently (its batch lanes
    hold the oldest requests, which free first)."""
    index = _router_index(*((ALICE[0], e) for e in EPS))
    request = RouteRequest(A, prompt_tokens=1000, prefix=ALICE[0])
    stats = {e: S(running=1, inflight=1, running_adapters=frozenset({A})) for e in EPS}
    policy = make_policy("mol-affinity")

    def pick(last_sent: dict[str, int]) -> str | None:
        return policy.pick(EPS, FleetStats.of(stats, Demand(), index, last_sent=last_sent),
                           request)  # fmt: skip

    assert pick({EPS[0]: 7, EPS[1]: 5, EPS[2]: 9, EPS[3]: 8}) == EPS[1]
    assert pick({EPS[0]: 7, EPS[1]: 10, EPS[2]: 9, EPS[3]: 8}) == EPS[0]
    assert pick({EPS[0]: 7, EPS[1]: 10, EPS[2]: 9}) == EPS[3]  # never sent there


@pytest.mark.parametrize(
    ("other_running", "expected"),
    # alone (scraped queues are ours: traffic share 4/3), the endpoint with a free slot
    # and nothing of ours costs a copy (2,200 tokens) against three requests ahead; one
    # of several routers (share 8/3) cannot tell a free slot from another router's
    # adapter there, and keeps to where the adapter runs
    [(1, 1), (5, 0)],
    ids=["alone", "one-of-several"],
)  # fmt: skip
def test_alone_it_weighs_every_endpoint_with_room_for_the_adapter(
    other_running: int, expected: int
) -> None:
    eps = EPS[:2]
    index = _router_index((ALICE[0], eps[0]))
    request = RouteRequest(A, prompt_tokens=1000, prefix=ALICE[0])
    stats = {eps[0]: S(running=3, inflight=3, running_adapters=frozenset({A})),
             eps[1]: S(running=other_running, running_adapters=frozenset({"other/x@v1"}))}
    snap = FleetStats.of(stats, Demand(), index)
    assert make_policy("mol-affinity").pick(eps, snap, request) == eps[expected]


@pytest.mark.parametrize(
    ("scraped", "expected"),
    # Both endpoints run the adapter and hold the prompt; this router has 1 request in
    # flight on the first and 2 on the second. Alone (the scrape shows its own 3), the
    # first is cheaper; one of four routers (the scrape shows 12) prices each queue as
    # the mean of its own count times 4 and the scrape, so the first, where the others
    # sent 10, costs 7.5 requests against the second's 4.5
    [((1, 2), 0), ((11, 1), 1), ((5, 7), 0)],
    ids=["alone-own-count", "one-of-four-sees-the-others", "one-of-four-agrees"],
)  # fmt: skip
def test_among_several_routers_the_queue_is_priced_from_both_views(
    scraped: tuple[int, int], expected: int
) -> None:
    eps = EPS[:2]
    index = _router_index((ALICE[0], eps[0]), (ALICE[0], eps[1]))
    request = RouteRequest(A, prompt_tokens=1000, prefix=ALICE[0])
    stats = {e: S(running=r, inflight=i, running_adapters=frozenset({A}))
             for e, r, i in zip(eps, scraped, (1, 2), strict=True)}  # fmt: skip
    snap = FleetStats.of(stats, Demand(), index)
    assert make_policy("mol-affinity").pick(eps, snap, request) == eps[expected]


@pytest.mark.parametrize(
    ("running", "ours", "expected"),
    # The prompt is cached where the adapter runs (the first endpoint); the second is
    # idle with a slot believed empty. Alone (the scrape shows only its requests), two
    # requests ahead cost more than a copy into the empty slot (2,200 tokens); one of
    # two routers (the scrape shows twice its own) prices the same queue, but a slot it
    # believes empty may hold the other router's adapter: a load's 5,000 tokens
    [(2, 2, 1), (2, 1, 0)],
    ids=["alone-copies-into-the-free-slot", "one-of-two-prices-a-load"],
)  # fmt: skip
def test_among_several_routers_a_free_slot_is_priced_as_a_load(
    running: int, ours: int, expected: int
) -> None:
    eps = EPS[:2]
    index = _router_index((ALICE[0], eps[0]))
    request = RouteRequest(A, prompt_tokens=1000, prefix=ALICE[0])
    stats = {eps[0]: S(running=running, inflight=ours, running_adapters=frozenset({A})),
             eps[1]: S()}  # fmt: skip
    snap = FleetStats.of(stats, Demand(), index)
    assert make_policy("mol-affinity").pick(eps, snap, request) == eps[expected]
