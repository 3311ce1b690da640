"""Seed the embedded catalog with the demo model so ``mol up --demo`` has something to show.

Runs through the catalog's public REST API (the same calls a user makes), so it also
proves the local stack end to end: register the base (shapes only), declare a serving
profile, publish each demo adapter as ``demo/<name>`` with alias ``stable``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from mol_platform.catalog_client import CatalogClient

DEMO_NAMESPACE = "demo"
LOCAL_PROFILE = "local"


@dataclass
class SeedResult:
    base: str
    profile: str
    adapters: dict[str, int] = field(default_factory=dict)  # ref -> version


def seed_demo(catalog_url: str, work_dir: Path, *, max_lora_rank: int = 16) -> SeedResult:
    """Build the demo assets (once) and publish them; idempotent across restarts."""
    from mol_platform.demo import DEMO_BASE_NAME, build_demo

    demo = build_demo(work_dir)
    with CatalogClient(catalog_url) as client:
        base = client.register_base(demo.base, DEMO_BASE_NAME)
        base_ref = f"{DEMO_BASE_NAME}@{base['revision']}"
        client.set_profile(LOCAL_PROFILE, base_model=base_ref, max_lora_rank=max_lora_rank,
                           max_loras=4, engine="vllm")
        result = SeedResult(base=base_ref, profile=LOCAL_PROFILE)
        for name, folder in sorted(demo.adapters.items()):
            published = client.publish(folder, f"{DEMO_NAMESPACE}/{name}", base=base_ref,
                                       alias="stable", tags=["demo"])
            result.adapters[f"{DEMO_NAMESPACE}/{name}@stable"] = int(published["version"])
    return result
