"""The engine-args builder: a MoLDeployment spec -> vLLM flags and env."""

from __future__ import annotations

from typing import Any

import pytest

from mol_platform.contract.engine_args import (
    ENGINE_DRAIN_SECONDS,
    EngineLaunch,
    PluginSettings,
    cpu_env,
    engine_args,
    format_env,
    lora_flags,
)
from mol_platform.contract.spec import MoLDeploymentSpec


def make_spec(**overrides: Any) -> MoLDeploymentSpec:
    data: dict[str, Any] = {
        "baseModel": {"name": "qwen3-8b", "uri": "s3://models/qwen3-8b/"},
        "experts": [{"name": "chat", "adapter": "acme/chat@stable"}],
    }
    for key, value in overrides.items():
        data[key] = value
    return MoLDeploymentSpec.model_validate(data)


def flag_value(flags: list[str], name: str) -> str | None:
    """The value after the last occurrence of ``name`` (argparse semantics)."""
    idx = [i for i, f in enumerate(flags) if f == name]
    return flags[idx[-1] + 1] if idx else None


DEFAULTS = make_spec()


@pytest.mark.parametrize(
    ("engine", "expected"),
    [
        (
            {},
            {"--max-loras": "4", "--max-lora-rank": "64", "--max-cpu-loras": "32",
             "--tensor-parallel-size": "1", "--gpu-memory-utilization": "0.9",
             "--max-model-len": None},
        ),
        (
            {"maxLoras": 8, "maxLoraRank": 16, "maxCpuLoras": 100, "maxModelLen": 4096,
             "tensorParallelSize": 2, "gpuMemoryUtilization": 0.85},
            {"--max-loras": "8", "--max-lora-rank": "16", "--max-cpu-loras": "100",
             "--max-model-len": "4096", "--tensor-parallel-size": "2",
             "--gpu-memory-utilization": "0.85"},
        ),
        (
            {"maxLoras": 1, "maxLoraRank": 8, "maxCpuLoras": None},
            {"--max-loras": "1", "--max-lora-rank": "8", "--max-cpu-loras": None},
        ),
    ],
)
def test_engine_fields_map_to_flags(engine, expected):
    # A replica needs at least as many GPUs as the model is sharded over.
    gpus = {"gpusPerReplica": engine.get("tensorParallelSize", 1)}
    launch = engine_args(make_spec(engine=engine, nodePool=gpus))
    assert "--enable-lora" in launch.flags
    for flag, value in expected.items():
        assert flag_value(launch.flags, flag) == value, flag


@pytest.mark.parametrize(
    ("handoff", "tool_flags"),
    [
        ({"enabled": True}, True),
        ({"enabled": False}, False),
        (None, False),
    ],
)
def test_handoff_turns_on_tool_calling(handoff, tool_flags):
    router = {} if handoff is None else {"handoff": handoff}
    flags = engine_args(make_spec(router=router)).flags
    assert ("--enable-auto-tool-choice" in flags) is tool_flags
    assert (flag_value(flags, "--tool-call-parser") == "hermes") is tool_flags


def test_model_and_served_name_default_to_the_base_model():
    launch = engine_args(DEFAULTS)
    assert launch.model == "s3://models/qwen3-8b/"
    assert launch.serve_args[:2] == ["serve", "s3://models/qwen3-8b/"]
    assert flag_value(launch.flags, "--served-model-name") == "qwen3-8b"
    local = engine_args(DEFAULTS, model="/models/qwen3", served_model_name="base",
                        host="0.0.0.0", port=8000)
    assert local.serve_args[1] == "/models/qwen3"
    assert flag_value(local.flags, "--served-model-name") == "base"
    assert flag_value(local.flags, "--host") == "0.0.0.0"
    assert flag_value(local.flags, "--port") == "8000"


def test_sigterm_drains_requests_in_flight():
    """vLLM's default shutdown timeout (0) aborts every request in flight on SIGTERM;
    ours waits for them, and a user's extra argument still wins."""
    assert flag_value(engine_args(DEFAULTS).flags, "--shutdown-timeout") == \
        str(ENGINE_DRAIN_SECONDS)
    assert ENGINE_DRAIN_SECONDS > 0
    spec = make_spec(engine={"extraArgs": ["--shutdown-timeout", "5"]})
    assert flag_value(engine_args(spec).flags, "--shutdown-timeout") == "5"


def test_extra_args_come_last_and_win():
    spec = make_spec(engine={"maxLoras": 4, "extraArgs": ["--max-loras", "6", "--enforce-eager"]})
    flags = engine_args(spec, cpu=True).flags
    assert flags[-3:] == ["--max-loras", "6", "--enforce-eager"]
    assert flag_value(flags, "--max-loras") == "6"


@pytest.mark.parametrize(
    ("cpu", "dtype", "env_keys"),
    [
        (False, None, {"VLLM_ALLOW_RUNTIME_LORA_UPDATING"}),
        (
            True,
            "float32",
            {"VLLM_ALLOW_RUNTIME_LORA_UPDATING", "VLLM_CPU_KVCACHE_SPACE",
             "VLLM_CPU_NUM_OF_RESERVED_CPU", "HF_HUB_OFFLINE", "VLLM_NO_USAGE_STATS"},
        ),
    ],
)
def test_cpu_variant(cpu, dtype, env_keys):
    launch = engine_args(DEFAULTS, cpu=cpu)
    assert flag_value(launch.flags, "--dtype") == dtype
    assert set(launch.env) == env_keys
    assert launch.env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "True"
    if cpu:
        assert launch.env["VLLM_CPU_NUM_OF_RESERVED_CPU"] == "0"
        assert launch.env["HF_HUB_OFFLINE"] == "1"
        assert launch.env["VLLM_CPU_KVCACHE_SPACE"] == "1"
        assert engine_args(DEFAULTS, cpu=True, cpu_kvcache_gib=4).env[
            "VLLM_CPU_KVCACHE_SPACE"] == "4"


@pytest.mark.parametrize(
    ("settings", "env"),
    [
        (PluginSettings(), {"MOL_COUNT_ADAPTER_LOADS": "true"}),
        (PluginSettings(count_loads=False), {}),
        (
            PluginSettings(catalog_url="http://catalog:8080", catalog_token="t0k",
                           serving_profile="qwen3-gpu", cache_dir="/cache",
                           cache_bytes=10 * 2**30, plugins=("mol",)),
            {"MOL_CATALOG_URL": "http://catalog:8080", "MOL_CATALOG_TOKEN": "t0k",
             "MOL_SERVING_PROFILE": "qwen3-gpu", "MOL_ADAPTER_CACHE_DIR": "/cache",
             "MOL_ADAPTER_CACHE_BYTES": str(10 * 2**30), "VLLM_PLUGINS": "mol",
             "MOL_COUNT_ADAPTER_LOADS": "true"},
        ),
        (PluginSettings(plugins=(), count_loads=False), {"VLLM_PLUGINS": ""}),
        (PluginSettings(plugins=("a", "b"), count_loads=False), {"VLLM_PLUGINS": "a,b"}),
    ],
)
def test_plugin_settings_become_env(settings, env):
    launch = engine_args(DEFAULTS, plugin=settings)
    plugin_env = {k: v for k, v in launch.env.items()
                  if k.startswith("MOL_") or k == "VLLM_PLUGINS"}
    assert plugin_env == env


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (PluginSettings(cache_bytes=0), "positive bytes"),
        (PluginSettings(plugins=("a,b",)), "contain no ','"),
        (PluginSettings(plugins=("",)), "non-empty"),
    ],
)
def test_bad_plugin_settings_are_refused(settings, message):
    with pytest.raises(ValueError, match=message):
        engine_args(DEFAULTS, plugin=settings)


def test_extra_env_is_added_last():
    env = engine_args(DEFAULTS, cpu=True, extra_env={"VLLM_CPU_KVCACHE_SPACE": "8"}).env
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "8"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_loras": 0, "max_lora_rank": 16}, "at least 1"),
        ({"max_loras": 2, "max_lora_rank": 12}, "not supported by vLLM"),
        ({"max_loras": 4, "max_lora_rank": 16, "max_cpu_loras": 2}, "must be >= max_loras"),
        ({"max_loras": 2, "max_lora_rank": 16, "lora_modules": {"a=b": "/x"}}, "invalid LoRA"),
    ],
)
def test_bad_lora_settings_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        lora_flags(**kwargs)


def test_lora_modules_are_name_equals_path():
    flags = lora_flags(max_loras=2, max_lora_rank=16,
                       lora_modules={"chat": "/a/chat", "coding": "/a/coding"})
    assert flags[-3:] == ["--lora-modules", "chat=/a/chat", "coding=/a/coding"]
    launch = engine_args(DEFAULTS, lora_modules={"chat": "/a/chat"})
    assert "chat=/a/chat" in launch.flags


@pytest.mark.parametrize("port", [0, 70000])
def test_bad_port_is_refused(port):
    with pytest.raises(ValueError, match="port"):
        engine_args(DEFAULTS, port=port)


def test_cpu_env_refuses_zero_kv_cache():
    with pytest.raises(ValueError, match="at least 1 GiB"):
        cpu_env(0)


def test_format_env_masks_tokens():
    text = format_env({"MOL_CATALOG_URL": "http://c", "MOL_CATALOG_TOKEN": "secret"})
    assert text == "MOL_CATALOG_URL=http://c MOL_CATALOG_TOKEN=***"
    assert format_env({"A": "1", "B": "2"}, keys=["B"]) == "B=2"


def test_launch_is_a_value():
    a = engine_args(DEFAULTS)
    assert a == engine_args(DEFAULTS)
    assert isinstance(a, EngineLaunch)


def test_launcher_imports_only_the_standard_library():
    """The engine venv has mol-platform without dependencies: the launcher must not need them."""
    import subprocess
    import sys

    code = (
        "import sys; import mol_platform.apps.engine_launcher; "
        "print(sorted(m for m in sys.modules "
        "if m.split('.')[0] not in sys.stdlib_module_names and not m.startswith('_')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == str(["mol_platform", "mol_platform.apps",
                               "mol_platform.apps.engine_launcher"])


def test_launcher_answers_for_vllm_only_when_the_cpu_build_is_there():
    import importlib.metadata

    from mol_platform.apps import engine_launcher as launcher

    assert importlib.metadata.version is launcher._version  # installed at import
    assert importlib.metadata.version("pytest") == launcher._original_version("pytest")
    if launcher.vllm_version() is None:  # the dev venv has no vLLM
        with pytest.raises(importlib.metadata.PackageNotFoundError):
            importlib.metadata.version("vllm")
    else:
        assert importlib.metadata.version("vllm").endswith("+cpu")


@pytest.mark.parametrize(("endpoint", "url"), [
    ("http://otel-collector:4318", "http://otel-collector:4318/v1/traces"),
    ("http://otel-collector:4318/", "http://otel-collector:4318/v1/traces"),
    ("http://c:4318/v1/traces", "http://c:4318/v1/traces"),
])
def test_tracing_turns_on_vllm_spans_over_otlp_http(endpoint, url):
    launch = engine_args(DEFAULTS, otlp_traces_endpoint=endpoint)
    assert flag_value(launch.flags, "--otlp-traces-endpoint") == url
    assert launch.env["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"] == "http/protobuf"
    assert launch.env["OTEL_SERVICE_NAME"] == "mol-engine"


def test_no_tracing_flag_by_default():
    launch = engine_args(DEFAULTS)
    assert "--otlp-traces-endpoint" not in launch.flags
    assert not any(k.startswith("OTEL_") for k in launch.env)
