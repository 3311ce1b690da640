"""bench/_seed.py and _shapes.py: the catalog benchmark's rows are what a publish writes."""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import _shapes  # noqa: E402
from _seed import COLUMNS, Layout, Rows, SeedBase  # noqa: E402
from mol_catalog.shared_docs import digest_of  # noqa: E402
from mol_platform.contract.compat import AdapterInfo, BaseShapes, check_base  # noqa: E402
from mol_platform.contract.safetensors_header import TensorInfo  # noqa: E402

BASES = [SeedBase(1, "qwen3-8b", "r1", "qwen3-8b-pool", 1, 1),
         SeedBase(2, _shapes.BIG_BASE, "r1", "big-pool", 2, 1),
         SeedBase(3, "mistral-7b", "r1", "mistral-7b-pool", 3, 1)]


def _fits(family: _shapes.Family, config: dict[str, object]) -> list[str]:
    header = {n: TensorInfo(n, "BF16", tuple(s), (0, 0))
              for n, s in _shapes.lora_shapes(family).items()}
    info = AdapterInfo.from_files(config, header)
    dims = family.dims
    base = BaseShapes.from_config_and_tensors(_shapes.base_config(dims),
                                              _shapes.base_tensors(dims))
    return [r.code for r in check_base(info, base)]


def test_llama_8b_all_linear_r16_has_448_real_shaped_tensors() -> None:
    family = _shapes.LLAMA_8B_ALL_LINEAR_R16
    shapes = _shapes.lora_shapes(family)
    assert len(shapes) == 448
    layer = "base_model.model.model.layers.31"
    assert shapes[f"{layer}.self_attn.k_proj.lora_B.weight"] == (1024, 16)
    assert shapes[f"{layer}.mlp.down_proj.lora_A.weight"] == (16, 14336)
    assert shapes[f"{layer}.mlp.gate_proj.lora_B.weight"] == (14336, 16)
    assert 30_000 < len(json.dumps({k: list(v) for k, v in shapes.items()})) < 40_000
    for f in (family, *_shapes.SMALL_FAMILIES):
        assert _fits(f, _shapes.adapter_config("b", f.rank, f.targets)) == []


def test_seeded_versions_reference_content_addressed_docs_and_mix_shapes() -> None:
    n = 300
    rows = Rows(n, BASES)
    docs = {}
    for line in rows.shared_docs():
        digest, body = line.rstrip("\n").split("\t")
        assert digest_of(json.loads(body)) == digest
        docs[digest] = json.loads(body)
    columns = COLUMNS["versions"][0]
    versions = [dict(zip(columns, line.rstrip("\n").split("\t"), strict=True))
                for line in rows.versions()]
    assert len(versions) == 3 * n
    tensors: Counter[int] = Counter()
    for v in versions:
        config, shapes = docs[v["config_digest"]], docs[v["tensors_digest"]]
        assert config["r"] == int(v["rank"])
        assert sorted(config["target_modules"]) == json.loads(v["target_modules"])
        tensors[len(shapes)] += 1
        files = {f["path"]: f for f in json.loads(v["files"])}
        assert int(v["size"]) == sum(f["size"] for f in files.values())
    assert tensors[448] >= len(versions) / 3
    assert len(tensors) >= 3  # and a spread of smaller adapters
    big = next(b for b in BASES if b.name == _shapes.BIG_BASE)
    for i in range(1, n + 1):
        on_big = Layout.family(i) is _shapes.LLAMA_8B_ALL_LINEAR_R16
        assert (rows.base(i) == big) == on_big


def test_seeded_tag_rows_carry_their_adapters_names() -> None:
    rows = Rows(50, BASES)
    names = {line.split("\t")[0]: line.split("\t")[3] for line in rows.adapters()}
    columns = COLUMNS["adapter_tags"][0]
    tags = [dict(zip(columns, line.rstrip("\n").split("\t"), strict=True))
            for line in rows.adapter_tags()]
    assert len(tags) == 100
    assert all(t["full_name"] == names[t["adapter_id"]] for t in tags)
