"""``mol demo build``: a tiny random Llama and PEFT LoRA adapters for it.

The demo model exists to exercise the serving path (engine, adapters, router, catalog)
on a laptop or a CI runner without downloading weights: it is random, so its answers
are noise, but they are deterministic and each adapter visibly changes them.
Built with numpy, safetensors and tokenizers only (the ``demo`` extra), no torch.
"""

from mol_platform.apps.demo.adapters import DEMO_ADAPTERS, AdapterRecipe, write_adapter
from mol_platform.apps.demo.build import DEMO_BASE_NAME, DemoResult, build_demo
from mol_platform.apps.demo.model import DemoModelConfig, write_base_model

__all__ = [
    "DEMO_ADAPTERS",
    "DEMO_BASE_NAME",
    "AdapterRecipe",
    "DemoModelConfig",
    "DemoResult",
    "build_demo",
    "write_adapter",
    "write_base_model",
]
