"""Seed the embedded catalog with the demo model so ``mol up`` has something to serve.

Runs through the catalog's public REST API (the same calls a user makes): register
the base (shapes only), declare a serving profile, publish each demo adapter as
``demo/<name>@stable`` and a second version of ``coding`` as ``demo/coding@candidate``
(the example's canary). Adapters are published only when absent, so a second ``mol
up`` neither duplicates them nor moves an alias the user has moved since.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from mol_platform.clients.catalog import CatalogClient, CatalogError

DEMO_NAMESPACE = "demo"
LOCAL_PROFILE = "local"
CANDIDATE = ("coding", "candidate")  # (adapter, alias) of the demo's second version
CANDIDATE_SEED = 1


@dataclass
class SeedResult:
    base: str
    profile: str
    model_dir: Path
    adapters: dict[str, int] = field(default_factory=dict)  # ref -> version


def demo_folders(work_dir: Path) -> tuple[Path, dict[str, Path]]:
    """The demo base and adapter folders (built once; later calls reuse them)."""
    from mol_platform.apps.demo import DEMO_ADAPTERS, DEMO_BASE_NAME, build_demo
    from mol_platform.apps.demo.adapters import write_adapter
    from mol_platform.apps.demo.model import DemoModelConfig

    work_dir = work_dir.resolve()
    base = work_dir / DEMO_BASE_NAME
    adapters = {r.name: work_dir / "adapters" / r.name for r in DEMO_ADAPTERS}
    name, _alias = CANDIDATE
    candidate = work_dir / "candidate" / name
    if not demo_built(work_dir):
        built = build_demo(work_dir)
        recipe = next(r for r in DEMO_ADAPTERS if r.name == name)
        write_adapter(candidate, recipe, DemoModelConfig(), base_model=str(built.base),
                      seed=CANDIDATE_SEED)
    return base, {**adapters, f"{name}@candidate": candidate}


def demo_built(work_dir: Path) -> bool:
    """Whether an earlier run built the demo's base and adapter folders in ``work_dir``
    (:func:`demo_folders` then reuses them)."""
    from mol_platform.apps.demo import DEMO_ADAPTERS, DEMO_BASE_NAME

    work_dir = work_dir.resolve()
    ready = [work_dir / DEMO_BASE_NAME / "config.json",
             *(work_dir / "adapters" / r.name / "adapter_config.json" for r in DEMO_ADAPTERS),
             work_dir / "candidate" / CANDIDATE[0] / "adapter_config.json"]
    return all(p.is_file() for p in ready)


def seed_note(work_dir: Path) -> str:
    """What ``mol up`` says before seeding: a second start reuses what the first built
    and published, and says so."""
    if demo_built(work_dir):
        return (f"reusing the demo adapters in {work_dir} (publishing only those the "
                "catalog lacks) ...")
    return "building and publishing the demo adapters ..."


def _publish_if_absent(client: CatalogClient, folder: Path, adapter: str, alias: str,
                       base: str) -> int:
    try:
        return client.resolve(f"{adapter}@{alias}").version
    except CatalogError as exc:
        if exc.status != 404:
            raise
    published = client.publish(folder, adapter, base=base, alias=alias, tags=["demo"])
    return published.version


def seed_demo(catalog_url: str, work_dir: Path, *, token: str | None = None,
              profile: str = LOCAL_PROFILE, max_lora_rank: int = 16, max_loras: int = 4,
              engine: str = "vllm") -> SeedResult:
    """Build the demo assets (once), register them, declare ``profile``; idempotent."""
    from mol_platform.apps.demo import DEMO_BASE_NAME

    base_dir, folders = demo_folders(work_dir)
    with CatalogClient(catalog_url, token) as client:
        base = client.register_base(base_dir, DEMO_BASE_NAME)
        base_ref = f"{DEMO_BASE_NAME}@{base.revision}"
        client.set_profile(profile, base_model=base_ref, max_lora_rank=max_lora_rank,
                           max_loras=max_loras, engine=engine)
        result = SeedResult(base=base_ref, profile=profile, model_dir=base_dir)
        for key, folder in folders.items():  # stable versions first: the candidate is v2
            name, _, alias = key.partition("@")
            ref = f"{DEMO_NAMESPACE}/{name}"
            result.adapters[f"{ref}@{alias or 'stable'}"] = _publish_if_absent(
                client, folder, ref, alias or "stable", base_ref)
    return result


def catalog_aliases(catalog_url: str, first: dict[str, int], *, token: str | None = None,
                    adapters: int = 20) -> tuple[dict[str, int], bool]:
    """Every alias of the catalog's first ``adapters`` adapters (``ref -> version``), the
    demo's (``first``, as the catalog has them now) before the rest, and whether
    adapters were left out. A restarted ``mol up`` thus shows what was published since."""
    found: dict[str, int] = {}
    with CatalogClient(catalog_url, token) as client:
        listed = list(client.list_adapters(limit=adapters + 1))
        for item in listed[:adapters]:
            detail = client.get_adapter(item.adapter)
            for alias, version in sorted(detail.aliases.items()):
                found[f"{item.adapter}@{alias}"] = version
    ordered = {ref: found[ref] for ref in first if ref in found}
    ordered.update((ref, v) for ref, v in sorted(found.items()) if ref not in ordered)
    return ordered, len(listed) > adapters
