"""Protected aliases: whether an alias may move to a version, as one pure function.

``refusals(facts, policy)`` turns what is known of the move (the target version's
status and its verdicts under the profiles the alias is served under) and the
namespace's policy into the reasons to refuse it; no reason: the move goes ahead. Each
check is one function of ``CHECKS``: a new rule is one more entry there. ``gather``
reads the facts inside the move's transaction.

"Served under": the profiles the alias was resolved under within the retention window
(``mol_catalog.namespaces.service.BindingRecorder`` records them), else every profile
declared for the adapter's base revision.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from mol_catalog.adapters import repository as repo
from mol_catalog.adapters.repository import AdapterRow, VersionRow
from mol_catalog.db import UnitOfWork
from mol_catalog.errors import Conflict, Forbidden
from mol_catalog.evals import repository as evals_repo
from mol_catalog.namespaces import repository as ns_repo
from mol_catalog.profiles import repository as profiles_repo
from mol_catalog.profiles import service as profiles
from mol_catalog.signing import repository as signing_repo

DEFAULT_PROTECTED: tuple[str, ...] = ("stable",)


@dataclass(frozen=True)
class ServedVerdict:
    profile: str
    compatible: bool
    reasons: tuple[dict[str, Any], ...]


@dataclass(frozen=True)
class MoveFacts:
    """What a check may look at: the alias, the target version and its verdicts under the
    profiles the alias is served under (``served_by``: "resolves" or "base profiles")."""

    adapter: str
    alias: str
    version: int
    status: str
    yank_reason: str | None
    served: tuple[ServedVerdict, ...]
    served_by: str
    signed_by: str | None = None
    """The key id the version's signature verified with at publish (None: unsigned)."""
    eval_suites: frozenset[str] = frozenset()
    """The suites the version has eval reports of."""


@dataclass(frozen=True)
class Policy:
    """The namespace's rules for alias moves."""

    protected: frozenset[str]
    require_signatures: bool = False
    required_evals: frozenset[str] = frozenset()


Reason = dict[str, Any]


def _yanked(facts: MoveFacts, policy: Policy) -> list[Reason]:
    """No alias, protected or not, points at a yanked version."""
    if facts.status != "yanked":
        return []
    return [{"code": "yanked", "message": (
        f"{facts.adapter} v{facts.version} is yanked ({facts.yank_reason}): point "
        f"{facts.alias!r} at a ready version, or publish a fixed one")}]


def _incompatible(facts: MoveFacts, policy: Policy) -> list[Reason]:
    """A protected alias only moves to a version every serving profile it is served
    under can load."""
    if facts.alias not in policy.protected:
        return []
    out = []
    for v in facts.served:
        if not v.compatible:
            why = "; ".join(str(r.get("message", r)) for r in v.reasons) or "incompatible"
            out.append({"code": "incompatible", "profile": v.profile, "message": (
                f"v{facts.version} is incompatible with serving profile {v.profile!r} "
                f"that {facts.alias!r} is served under ({facts.served_by}): {why}; publish "
                "a version that fits the profile, or change the profile")})
    return out


def _unsigned(facts: MoveFacts, policy: Policy) -> list[Reason]:
    """Where the namespace requires signatures, a protected alias only moves to a signed
    version (one published before the requirement may be unsigned)."""
    if facts.alias not in policy.protected or not policy.require_signatures or facts.signed_by:
        return []
    return [{"code": "unsigned", "message": (
        f"{facts.adapter} v{facts.version} is unsigned and namespace "
        f"{facts.adapter.split('/', 1)[0]!r} requires signatures: publish it again with "
        "--sign-key")}]


def _missing_eval(facts: MoveFacts, policy: Policy) -> list[Reason]:
    """A protected alias only moves to a version with a report of every eval suite the
    namespace requires."""
    if facts.alias not in policy.protected:
        return []
    return [{"code": "missing_eval", "suite": suite, "message": (
        f"{facts.adapter} v{facts.version} has no {suite!r} eval report, which namespace "
        f"{facts.adapter.split('/', 1)[0]!r} requires for {facts.alias!r}: run the suite "
        f"and `mol catalog eval attach {facts.adapter}@v{facts.version} --suite {suite} "
        "...`")} for suite in sorted(policy.required_evals - facts.eval_suites)]


CHECKS: tuple[Callable[[MoveFacts, Policy], list[Reason]], ...] = (
    _yanked,
    _incompatible,
    _unsigned,
    _missing_eval,
)


def refusals(facts: MoveFacts, policy: Policy) -> list[Reason]:
    """Every reason the move is refused, in CHECKS order; empty: allowed."""
    return [reason for check in CHECKS for reason in check(facts, policy)]


async def policy_of(uow: UnitOfWork, namespace: str) -> Policy:
    found = await ns_repo.policy(uow.conn, namespace)
    signing = await signing_repo.policy(uow.conn, namespace)
    return Policy(frozenset(found[0] if found is not None else DEFAULT_PROTECTED),
                  require_signatures=bool(signing is not None and signing.required),
                  required_evals=frozenset(found[3] if found is not None else ()))


@dataclass(frozen=True)
class MoveTarget:
    """The version an alias is to point at."""

    id: int
    number: int
    status: str
    yank_reason: str | None
    signed_by: str | None = None

    @classmethod
    def of(cls, v: VersionRow) -> MoveTarget:
        return cls(v.id, v.number, v.status, v.yank_reason, v.signed_by)


async def gather(uow: UnitOfWork, row: AdapterRow, alias: str, v: MoveTarget,
                 bindings_since: datetime, policy: Policy) -> MoveFacts:
    """The facts of moving ``alias`` of ``row`` to ``v``. Verdicts are read only for a
    protected alias (the only checks that use them); missing or stale ones are judged and
    stored, as a resolve would."""
    served: list[ServedVerdict] = []
    served_by = "base profiles"
    if alias in policy.protected:
        names = await ns_repo.bound_profiles(uow.conn, row.full_name, alias, bindings_since)
        if names:
            served_by = "resolves"
            found = [await profiles_repo.get(uow.conn, n) for n in names]
            targets = [p for p in found if p is not None]
        else:
            targets = await profiles_repo.of_base(uow.conn, row.base_model_id)
        current = await repo.verdicts_for_version(uow.conn, v.id)
        for p in targets:
            verdict = current.get(p.name)
            if verdict is None:
                ok, reasons = await profiles.judge_stored(uow, v.id, p)
            else:
                ok, reasons = verdict["compatible"], verdict["reasons"]
            served.append(ServedVerdict(p.name, bool(ok), tuple(reasons)))
    suites: frozenset[str] = frozenset()
    if alias in policy.protected and policy.required_evals:
        suites = frozenset(r.suite for r in await evals_repo.of_version(uow.conn, v.id))
    return MoveFacts(row.full_name, alias, v.number, v.status, v.yank_reason, tuple(served),
                     served_by, v.signed_by, suites)


@dataclass(frozen=True)
class Decision:
    """A move's outcome: ``reasons`` refused it, unless ``forced`` (then they are the ones
    overridden)."""

    reasons: list[Reason]
    forced: bool

    @property
    def allowed(self) -> bool:
        return not self.reasons or self.forced


def decide(reasons: list[Reason], force: bool, admin: bool) -> Decision:
    """Whether refusal ``reasons`` stand: only an admin's ``force`` overrides them (403 for
    anyone else who asks to force)."""
    if force and not admin:
        raise Forbidden("only an admin may force an alias move (needs scope 'admin')")
    return Decision(reasons, force and bool(reasons))


def refused(full_name: str, alias: str, version: int, reasons: list[Reason]) -> Conflict:
    return Conflict(f"{full_name}@{alias} may not move to v{version}: "
                    + "; ".join(r["message"] for r in reasons)
                    + " (an admin may override with force)", reasons=reasons)
