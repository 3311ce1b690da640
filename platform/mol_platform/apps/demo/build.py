"""Build the whole demo: OUT/tiny-llama and OUT/adapters/<name>."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from mol_platform.apps.demo.adapters import DEMO_ADAPTERS, AdapterRecipe, write_adapter
from mol_platform.apps.demo.model import DemoModelConfig, write_base_model

# The base folder's name is the catalog name adapters default to (their
# base_model_name_or_path ends in it), so `mol catalog publish` needs no --base.
DEMO_BASE_NAME = "tiny-llama"


@dataclass(frozen=True)
class DemoResult:
    """Where the demo landed: the base model folder and one folder per adapter."""

    base: Path
    adapters: dict[str, Path] = field(default_factory=dict)


def build_demo(
    out: Path,
    *,
    seed: int = 0,
    config: DemoModelConfig | None = None,
    adapters: Sequence[AdapterRecipe] = DEMO_ADAPTERS,
) -> DemoResult:
    """Write the tiny random Llama to ``out/tiny-llama`` and its adapters to ``out/adapters``.

    Deterministic: the same seed writes byte-identical files. Existing files are
    overwritten; other files in ``out`` are left alone.
    """
    cfg = config or DemoModelConfig()
    out = Path(out).resolve()
    if out.exists() and not out.is_dir():
        raise NotADirectoryError(f"demo output {out} exists and is not a folder")
    base = write_base_model(out / DEMO_BASE_NAME, cfg, seed)
    written: dict[str, Path] = {}
    for recipe in adapters:
        if recipe.name in written:
            raise ValueError(f"adapter name {recipe.name!r} is given twice")
        written[recipe.name] = write_adapter(
            out / "adapters" / recipe.name, recipe, cfg, base_model=str(base), seed=seed
        )
    return DemoResult(base=base, adapters=written)
