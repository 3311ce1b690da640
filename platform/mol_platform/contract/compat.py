"""Does a LoRA adapter fit a base model, and a serving profile? Decided from headers alone.

The catalog decides compatibility when a version is published, the operator and the
vLLM resolver plugin refuse what does not fit, so the rules live here, pure and shared:
every tensor is a LoRA A/B (or embedding A/B) tensor, module names exist in the base,
layer indices are in range, A is ``[r, in]`` and B is ``[out, r]`` for the base's real
shapes (so GQA k/v projections are checked against their true width), the rank matches
the adapter config, no DoRA, no ``modules_to_save``, bias ``none``, ``peft_type`` LORA;
under a profile the rank is at most its max and the modules are ones it supports.

Every problem is returned as a :class:`Reason` (a metric-label ``code`` and a message
naming the tensor or setting with expected vs actual), not just the first one.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeGuard

from mol_platform.contract.safetensors_header import TensorInfo

PEFT_PREFIX = "base_model.model."
LORA_PEFT_TYPE = "LORA"

# <module>.(lora_A|lora_B|lora_embedding_A|lora_embedding_B)[.<adapter>][.weight]
_LORA_KEY_RE = re.compile(
    r"^(?P<module>.+)\.(?P<part>lora_A|lora_B|lora_embedding_A|lora_embedding_B)"
    r"(?:\.default)?(?:\.weight)?$"
)
# ...(layers|h|blocks).<i>.<kind>
_LAYER_RE = re.compile(r"(?:^|\.)(?:layers|h|blocks|block)\.(?P<index>\d+)\.(?P<kind>.+)$")


@dataclass(frozen=True)
class Reason:
    """Why an adapter does not fit: ``code`` is a metric label, ``message`` is for people."""

    code: str
    message: str


class AdapterConfigError(ValueError):
    """adapter_config.json is unreadable or invalid (not an object, no usable ``r``, ...)."""


class BaseModelError(ValueError):
    """A base model's config and tensor shapes cannot describe its modules."""


def _config_error(setting: str, expected: str, value: Any) -> AdapterConfigError:
    return AdapterConfigError(
        f"adapter_config.json: {setting} must be {expected}, got {value!r}"
    )


def _str_tuple(config: Mapping[str, Any], key: str) -> tuple[str, ...]:
    value = config.get(key)
    if value is None:
        return ()
    if isinstance(value, str):  # PEFT accepts one regex / "all-linear" as a string
        return (value,)
    if isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise _config_error(key, "a list of module names", value)


def _positive_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


@dataclass(frozen=True)
class AdapterInfo:
    """What the checks need from adapter_config.json and the adapter's safetensors header."""

    peft_type: str | None
    rank: int
    alpha: float
    target_modules: tuple[str, ...]
    base_model_name_or_path: str | None
    use_dora: bool
    modules_to_save: tuple[str, ...]
    bias: str
    tensors: dict[str, tuple[int, ...]]
    rank_pattern: dict[str, int] = field(default_factory=dict)

    @classmethod
    def from_files(cls, config: Any, header: Mapping[str, TensorInfo]) -> AdapterInfo:
        """Build from the parsed adapter_config.json and the adapter's header."""
        if not isinstance(config, dict):
            raise AdapterConfigError(
                f"adapter_config.json must be a JSON object, got {type(config).__name__}"
            )
        peft_type = config.get("peft_type")
        if peft_type is not None and not isinstance(peft_type, str):
            raise _config_error("peft_type", "a string such as 'LORA'", peft_type)
        if "r" not in config:
            raise AdapterConfigError("adapter_config.json: the LoRA rank 'r' is missing")
        rank = config["r"]
        if not _positive_int(rank):
            raise _config_error("r", "a positive integer", rank)
        alpha = config.get("lora_alpha", 8)
        if isinstance(alpha, bool) or not isinstance(alpha, int | float):
            raise _config_error("lora_alpha", "a number", alpha)
        base = config.get("base_model_name_or_path")
        if base is not None and not isinstance(base, str):
            raise _config_error("base_model_name_or_path", "a string", base)
        use_dora = config.get("use_dora", False)
        if use_dora is None:
            use_dora = False
        if not isinstance(use_dora, bool):
            raise _config_error("use_dora", "true or false", use_dora)
        bias = config.get("bias", "none")
        if bias is None:
            bias = "none"
        if not isinstance(bias, str):
            raise _config_error("bias", "'none', 'all' or 'lora_only'", bias)
        rank_pattern = config.get("rank_pattern") or {}
        if not isinstance(rank_pattern, dict) or not all(
            isinstance(k, str) and _positive_int(v) for k, v in rank_pattern.items()
        ):
            raise _config_error("rank_pattern", "an object of module pattern -> rank", rank_pattern)
        for pattern in rank_pattern:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise _config_error(f"rank_pattern key {pattern!r}", "a valid regex",
                                    str(exc)) from None
        return cls(
            peft_type=peft_type,
            rank=rank,
            alpha=float(alpha),
            target_modules=_str_tuple(config, "target_modules"),
            base_model_name_or_path=base,
            use_dora=use_dora,
            modules_to_save=_str_tuple(config, "modules_to_save"),
            bias=bias,
            tensors={name: tuple(info.shape) for name, info in header.items()},
            rank_pattern=dict(rank_pattern),
        )

    def rank_for(self, module: str) -> int:
        """The configured rank of one module path (``rank_pattern`` wins over ``r``)."""
        for pattern, rank in self.rank_pattern.items():
            if re.match(rf"(.*\.)?({pattern})$", module):
                return rank
        return self.rank

    @property
    def max_rank(self) -> int:
        """The largest rank any module uses (what the engine's max LoRA rank must cover)."""
        ranks = [self.rank, *self.rank_pattern.values()]
        for name, shape in self.tensors.items():
            m = _LORA_KEY_RE.match(name)
            if m and len(shape) == 2:
                ranks.append(shape[0] if m["part"] in ("lora_A", "lora_embedding_A") else shape[1])
        return max(ranks)

    def target_kinds(self) -> set[str]:
        """Module kinds (``self_attn.q_proj``, ``embed_tokens``) the LoRA tensors target."""
        kinds = set()
        for name in self.tensors:
            m = _LORA_KEY_RE.match(name)
            if m:
                kinds.add(module_kind(strip_prefix(m["module"]))[1])
        return kinds


def strip_prefix(name: str) -> str:
    return name[len(PEFT_PREFIX):] if name.startswith(PEFT_PREFIX) else name


def module_kind(module: str) -> tuple[int | None, str]:
    """``model.layers.3.self_attn.q_proj`` -> (3, ``self_attn.q_proj``);
    ``model.embed_tokens`` -> (None, ``embed_tokens``)."""
    m = _LAYER_RE.search(module)
    if m:
        return int(m["index"]), m["kind"]
    return None, module.rsplit(".", 1)[-1]


@dataclass(frozen=True)
class BaseShapes:
    """A base model's layer count and, per module kind, its weight's (out, in) features."""

    architecture: str
    num_layers: int
    modules: dict[str, tuple[int, int]]

    @classmethod
    def from_config_and_tensors(
        cls, config: Mapping[str, Any], tensors: Mapping[str, list[int] | tuple[int, ...]]
    ) -> BaseShapes:
        """Build from config.json and the base's safetensors header shapes."""
        archs = config.get("architectures")
        if isinstance(archs, list) and archs and isinstance(archs[0], str):
            architecture = archs[0]
        else:
            architecture = str(config.get("model_type") or "unknown")
        modules: dict[str, tuple[int, int]] = {}
        max_layer = -1
        for name, shape in tensors.items():
            if not name.endswith(".weight") or len(shape) != 2:
                continue
            layer, kind = module_kind(name[: -len(".weight")])
            dims = (int(shape[0]), int(shape[1]))
            if layer is not None:
                max_layer = max(max_layer, layer)
            if kind in modules and modules[kind] != dims:
                raise BaseModelError(
                    f"tensor {name}: shape {list(dims)} differs from {list(modules[kind])} "
                    f"of the same module kind {kind!r} elsewhere in the model"
                )
            modules[kind] = dims
        if not modules:
            raise BaseModelError("the base model's tensors contain no 2-D weight matrices")
        if "lm_head" not in modules and "embed_tokens" in modules and config.get(
            "tie_word_embeddings", False
        ):
            modules["lm_head"] = modules["embed_tokens"]
        num_layers = config.get("num_hidden_layers")
        if not _positive_int(num_layers):
            if max_layer < 0:
                raise BaseModelError("config.json has no num_hidden_layers and no layer tensors")
            num_layers = max_layer + 1
        elif max_layer >= num_layers:
            raise BaseModelError(
                f"config.json says num_hidden_layers={num_layers} but tensors reach layer "
                f"{max_layer}"
            )
        return cls(architecture=architecture, num_layers=int(num_layers), modules=modules)


@dataclass(frozen=True)
class ServingProfileSpec:
    """The limits of a place adapters are served (a vLLM engine configuration)."""

    name: str
    max_lora_rank: int
    supported_modules: tuple[str, ...] | None = None



class _Reasons:
    """Collects reasons; one problem repeated over many layers becomes one reason with a count."""

    def __init__(self) -> None:
        self._groups: dict[tuple[Any, ...], list[Any]] = {}

    def add(self, code: str, message: str, group: tuple[Any, ...] | None = None) -> None:
        key = (code, *(group if group is not None else (message,)))
        if key in self._groups:
            self._groups[key][1] += 1
        else:
            self._groups[key] = [Reason(code, message), 1]

    def result(self) -> list[Reason]:
        out = []
        for reason, count in self._groups.values():
            if count > 1:
                reason = Reason(reason.code, f"{reason.message} (and {count - 1} more like it)")
            out.append(reason)
        return out


_A_PARTS = ("lora_A", "lora_embedding_A")
_FAMILIES = (("lora_A", "lora_B"), ("lora_embedding_A", "lora_embedding_B"))


def _check_settings(adapter: AdapterInfo, out: _Reasons) -> None:
    if adapter.peft_type != LORA_PEFT_TYPE:
        out.add("peft_type", f"adapter_config.json peft_type: expected {LORA_PEFT_TYPE!r}, "
                f"got {adapter.peft_type!r}")
    if adapter.use_dora:
        out.add("dora", "adapter_config.json use_dora: expected false (DoRA adapters cannot be "
                "served), got true")
    if adapter.modules_to_save:
        out.add("modules_to_save", "adapter_config.json modules_to_save: expected none (fully "
                f"trained modules cannot be served), got {list(adapter.modules_to_save)}")
    if adapter.bias != "none":
        out.add("bias", f"adapter_config.json bias: expected 'none', got {adapter.bias!r}")
    if not adapter.tensors:
        out.add("no_tensors", "adapter_model.safetensors: expected LoRA A/B tensors, "
                "found no tensors")


def _check_other_tensor(
    name: str, shape: tuple[int, ...], adapter: AdapterInfo, base: BaseShapes, out: _Reasons
) -> None:
    """A tensor that is not LoRA A/B: say which kind of unsupported thing it is."""
    short = strip_prefix(name)
    if "lora_magnitude_vector" in name:
        out.add("dora", f"tensor {name}: a DoRA magnitude vector; expected LoRA A/B tensors "
                "only", group=())
        return
    if name.endswith(".bias"):
        out.add("bias", f"tensor {name}: a bias tensor; expected bias 'none' (no bias tensors)",
                group=())
        return
    parts = short.split(".")
    saved = "modules_to_save" in parts or any(m in parts for m in adapter.modules_to_save)
    if not saved and short.endswith(".weight"):
        kind = module_kind(short[: -len(".weight")])[1]
        saved = tuple(shape) == base.modules.get(kind)
    if saved:
        out.add("modules_to_save", f"tensor {name}: a fully trained copy of a base module "
                "(modules_to_save); expected LoRA A/B tensors only", group=())
        return
    out.add("not_lora_tensor", f"tensor {name} (shape {list(shape)}): not a LoRA tensor; "
            "expected names ending in lora_A/lora_B[.weight] or lora_embedding_A/B")


def _check_lora_tensor(
    name: str, module: str, part: str, shape: tuple[int, ...], adapter: AdapterInfo,
    base: BaseShapes, out: _Reasons,
) -> None:
    layer, kind = module_kind(module)
    if kind not in base.modules:
        out.add("unknown_module", f"tensor {name}: module {kind!r} does not exist in the base "
                f"({base.architecture}); base modules: {', '.join(sorted(base.modules))}",
                group=(kind,))
        return
    if layer is not None and layer >= base.num_layers:
        out.add("layer_out_of_range", f"tensor {name}: layer {layer} is out of range: the base "
                f"has {base.num_layers} layers (0-{base.num_layers - 1})", group=())
        return
    out_f, in_f = base.modules[kind]
    is_a = part in _A_PARTS
    if part.startswith("lora_embedding"):  # PEFT embedding: A [r, num_embeddings], B [dim, r]
        feat, side = (out_f, "num_embeddings") if is_a else (in_f, "embedding dim")
    else:
        feat, side = (in_f, "in_features") if is_a else (out_f, "out_features")
    rank = adapter.rank_for(module)
    expected = [rank, feat] if is_a else [feat, rank]
    if len(shape) != 2:
        out.add("shape_mismatch", f"tensor {name}: expected shape {expected}, got {list(shape)} "
                "(a LoRA tensor is a 2-D matrix)", group=(kind, part, shape))
        return
    got_rank, got_feat = (shape[0], shape[1]) if is_a else (shape[1], shape[0])
    if got_feat != feat:
        out.add("shape_mismatch", f"tensor {name}: expected shape {expected}, got {list(shape)} "
                f"(the base's {kind} has {side} {feat})", group=(kind, part, shape))
    if got_rank != rank:
        out.add("rank_mismatch", f"tensor {name}: rank {got_rank} but adapter_config.json sets "
                f"rank {rank} for it (expected shape {expected}, got {list(shape)})",
                group=(kind, part, got_rank))


def check_base(adapter: AdapterInfo, base: BaseShapes) -> list[Reason]:
    """Every reason the adapter cannot run on the base; an empty list means it fits."""
    out = _Reasons()
    _check_settings(adapter, out)
    seen: dict[str, dict[str, str]] = {}
    for name, shape in sorted(adapter.tensors.items()):
        m = _LORA_KEY_RE.match(name)
        if m is None or "lora_magnitude_vector" in name:
            _check_other_tensor(name, shape, adapter, base, out)
            continue
        module, part = strip_prefix(m["module"]), m["part"]
        parts = seen.setdefault(module, {})
        if part in parts:
            out.add("duplicate_tensor", f"tensor {name}: same module and part as {parts[part]}; "
                    "expected one tensor each")
            continue
        parts[part] = name
        _check_lora_tensor(name, module, part, shape, adapter, base, out)
    for module, parts in seen.items():
        for family in _FAMILIES:
            present = [p for p in family if p in parts]
            if len(present) == 1:
                missing = next(p for p in family if p not in parts)
                out.add("missing_tensor", f"module {module}: has {present[0]} "
                        f"({parts[present[0]]}) but no {missing}; expected both", group=(family,))
    return out.result()


def check_profile(adapter: AdapterInfo, profile: ServingProfileSpec) -> list[Reason]:
    """Every reason the adapter cannot be served under the profile (rank, modules)."""
    out = _Reasons()
    rank = adapter.max_rank
    if rank > profile.max_lora_rank:
        out.add("rank_above_max", f"adapter rank {rank} exceeds serving profile "
                f"{profile.name!r} max_lora_rank {profile.max_lora_rank}")
    if profile.supported_modules is not None:
        supported = set(profile.supported_modules)
        for kind in sorted(adapter.target_kinds()):
            if kind not in supported and kind.rsplit(".", 1)[-1] not in supported:
                out.add("unsupported_module", f"module {kind!r}: not supported by serving "
                        f"profile {profile.name!r} (supported: "
                        f"{', '.join(sorted(supported)) or 'none'})")
    return out.result()
