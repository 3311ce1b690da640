"""What the GPU check measures, at GPU size and as the CPU dry run, and the files it needs.

Two plans, one code path: the GPU plan serves a 0.63B random-weight Llama with
Qwen2-0.5B's dimensions (24 layers, hidden 896, 14 heads over 2 KV heads, intermediate
4864, vocabulary 151936; untied embeddings and no q/k/v bias, so a little larger than
Qwen2-0.5B) in bfloat16; the dry run serves the demo's tiny Llama on vLLM's CPU build,
with fewer ranks, adapters and requests, so that ``make test`` walks every step in a
couple of minutes. No weights are downloaded: both bases are written here from a seed
(``mol_platform.apps.demo``), as ``mol demo build`` writes the demo.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mol_platform.apps.demo.adapters import ALL_LINEAR, AdapterRecipe, write_adapter
from mol_platform.apps.demo.model import DemoModelConfig, write_base_model
from mol_platform.apps.demo.tokenizer import COMMON_WORDS

QWEN2_05B_SHAPE = DemoModelConfig(
    num_hidden_layers=24, hidden_size=896, intermediate_size=4864, num_attention_heads=14,
    num_key_value_heads=2, vocab_size=151_936, max_position_embeddings=4096)
THROUGHPUT_RANK = 8
NAMESPACE = "bench"


@dataclass(frozen=True)
class Plan:
    """Sizes of one run. ``adapter_counts``: distinct adapters in the batch of each
    throughput run (the engine needs that many GPU slots, ``max_loras``)."""

    mode: str  # "gpu" or "cpu-dry-run"
    base_name: str
    model: DemoModelConfig
    ranks: tuple[int, ...]
    adapter_counts: tuple[int, ...]
    max_lora_rank: int
    max_cpu_loras: int
    repeats: int  # samples of each load tier, per rank
    requests: int  # per throughput run
    concurrency: int
    max_tokens: int
    prompt_words: int
    serve_runs: int  # publish -> first token samples
    max_model_len: int
    engine_args: tuple[str, ...] = ()
    gpu_memory_utilization: float = 0.9
    engine_timeout_s: float = 300.0

    def __post_init__(self) -> None:
        if not self.ranks or not self.adapter_counts:
            raise ValueError("a plan needs at least one rank and one adapter count")
        if max(self.ranks) > self.max_lora_rank:
            raise ValueError(f"rank {max(self.ranks)} exceeds max_lora_rank {self.max_lora_rank}")
        if self.max_cpu_loras < self.max_loras + self.repeats * len(self.ranks) + 2:
            raise ValueError("max_cpu_loras must hold every adapter the check loads, or the "
                             "host tier would be measured from disk")
        for n in (self.repeats, self.requests, self.concurrency, self.max_tokens,
                  self.serve_runs):
            if n < 1:
                raise ValueError(f"plan sizes must be positive, got {n}")

    @property
    def max_loras(self) -> int:
        """GPU slots: the largest batch of distinct adapters; the load tiers fill them
        all to push an adapter out to the host cache."""
        return max(self.adapter_counts)

    @property
    def prompt(self) -> str:
        """A fixed prompt of ``prompt_words`` common words (about one token each)."""
        words = [COMMON_WORDS[i % len(COMMON_WORDS)] for i in range(self.prompt_words)]
        return " ".join(words)

    def params(self) -> int:
        total = 0
        for shape in self.model.tensor_shapes().values():
            n = 1
            for d in shape:
                n *= d
            total += n
        return total

    def describe(self) -> dict[str, object]:
        m = self.model
        return {"base": self.base_name, "params": self.params(), "layers": m.num_hidden_layers,
                "hidden": m.hidden_size, "intermediate": m.intermediate_size,
                "heads": m.num_attention_heads, "kv_heads": m.num_key_value_heads,
                "vocab": m.vocab_size}


GPU = Plan(
    mode="gpu", base_name="qwen2-0.5b-shape", model=QWEN2_05B_SHAPE, ranks=(8, 32, 64),
    adapter_counts=(1, 8, 64), max_lora_rank=64, max_cpu_loras=128, repeats=3,
    requests=256, concurrency=64, max_tokens=128, prompt_words=128, serve_runs=5,
    max_model_len=2048, engine_args=("--dtype", "bfloat16"), gpu_memory_utilization=0.85,
    engine_timeout_s=300.0)
DRY_RUN = Plan(
    mode="cpu-dry-run", base_name="tiny-llama", model=DemoModelConfig(), ranks=(8, 16),
    adapter_counts=(1, 2), max_lora_rank=16, max_cpu_loras=16, repeats=2, requests=8,
    concurrency=4, max_tokens=8, prompt_words=16, serve_runs=2, max_model_len=512,
    engine_timeout_s=300.0)


@dataclass(frozen=True)
class Assets:
    """The base folder, one adapter per rank (the load tiers) and ``max_loras``
    throughput adapters (rank 8), each a PEFT folder targeting every linear module."""

    base: Path
    by_rank: dict[int, Path]
    throughput: list[Path]


def throughput_name(i: int) -> str:
    return f"{NAMESPACE}/t-{i}"


def build_assets(plan: Plan, out: Path) -> Assets:
    """Write the random base and the adapters (deterministic: seed 0)."""
    base = write_base_model(out / plan.base_name, plan.model, seed=0)
    by_rank = {r: write_adapter(out / "adapters" / f"rank-{r}", AdapterRecipe(f"rank-{r}", r,
                                ALL_LINEAR), plan.model, base_model=str(base), seed=r)
               for r in plan.ranks}
    throughput = [write_adapter(out / "adapters" / f"t-{i}",
                                AdapterRecipe(f"t-{i}", THROUGHPUT_RANK, ALL_LINEAR),
                                plan.model, base_model=str(base), seed=1000 + i)
                  for i in range(plan.max_loras)]
    return Assets(base, by_rank, throughput)
