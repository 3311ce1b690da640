"""The MoLDeployment spec: what a user gets told at `kubectl apply` time."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from mol_platform.contract.spec import CanarySpec, MoLDeployment, MoLDeploymentSpec, parse_duration

EXAMPLE = Path(__file__).parents[2] / "deploy" / "examples" / "macaron.yaml"

BASE: dict[str, Any] = {
    "baseModel": {"name": "qwen3-8b", "uri": "s3://models/qwen3-8b/"},
    "engine": {"maxLoras": 4, "maxLoraRank": 64},
    "replicas": 2,
    "experts": [
        {"name": "chat", "adapter": "acme/chat@stable"},
        {"name": "coding", "adapter": "acme/coding@v3"},
    ],
    "router": {"mode": "auto", "classifier": {"expert": "chat"}, "default": "chat"},
}


def spec_with(**changes: Any) -> dict[str, Any]:
    data = copy.deepcopy(BASE)
    for dotted, value in changes.items():
        node: Any = data
        *path, last = dotted.split("__")
        for key in path:
            node = node[key] if not key.isdigit() else node[int(key)]
        if value is _DELETE:
            del node[last]
        else:
            node[last] = value
    return data


_DELETE = object()


def test_example_manifest_parses() -> None:
    obj = MoLDeployment.from_yaml(EXAMPLE.read_text())
    assert obj.metadata.name == "macaron"
    assert [e.name for e in obj.spec.experts] == ["chat", "agent", "coding", "ui", "router"]
    coding = obj.spec.expert("coding")
    assert coding.canary is not None
    assert coding.canary.steps == [10, 25, 50, 100]
    assert coding.canary.interval_seconds == 300
    assert obj.spec.engine.max_lora_rank == 16
    assert obj.spec.router.handoff.max_hops == 2


def test_valid_spec_and_defaults() -> None:
    spec = MoLDeploymentSpec.model_validate(BASE)
    assert spec.engine.max_cpu_loras == 32
    assert spec.serving.mode == "raw"
    assert spec.effective_replicas == 2
    assert spec.default_expert == "chat"
    dumped = spec.model_dump(by_alias=True, exclude_none=True)
    assert dumped["baseModel"]["name"] == "qwen3-8b"
    assert dumped["engine"]["maxLoraRank"] == 64
    assert MoLDeploymentSpec.model_validate(dumped) == spec


def test_autoscaling_min_replicas_is_effective() -> None:
    data = spec_with(replicas=_DELETE, autoscaling={"minReplicas": 3, "maxReplicas": 5})
    assert MoLDeploymentSpec.model_validate(data).effective_replicas == 3


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"experts__0__name": "Chat_Bot"}, "must be a DNS label"),
        ({"experts__0__adapter": "acme/chat"}, "invalid adapter reference"),
        ({"experts__0__adapter": "acme/../etc@stable"}, "invalid adapter reference"),
        ({"experts__0__adapter": "ACME/chat@stable"}, "invalid adapter reference"),
        ({"experts__1__adapter": "acme/coding@sha256:abc"}, "invalid adapter reference"),
        ({"engine__maxLoraRank": 48}, "maxLoraRank 48 is not supported"),
        ({"engine__maxLoras": 8, "engine__maxCpuLoras": 4}, "maxCpuLoras must be >= spec.engine"
         ".maxLoras (4 < 8)"),
        ({"autoscaling": {"maxReplicas": 4}}, "either spec.replicas or spec.autoscaling"),
        ({"experts__1__name": "chat"}, "expert names must be unique; repeated: chat"),
        ({"router__default": "nope"}, "router.default must name one of spec.experts: 'nope'"),
        ({"router__classifier": {"expert": "nope"}}, "router.classifier.expert must name one"),
        ({"router__classifier": _DELETE}, "(or auto) needs spec.router.classifier.expert"),
        ({"experts": []}, "at least 1 item"),
        ({"baseModel__name": "Qwen/3"}, "name 'Qwen/3' must be 1-63 lowercase"),
        ({"adapterNamespaces": ["ok", "Bad!"]}, "name 'Bad!' must be 1-63 lowercase"),
        ({"adapterNamespaces": ["ok", "ok"]}, "adapterNamespaces must be unique; repeated: ok"),
        ({"engine__bogus": 1}, "Extra inputs are not permitted"),
        ({"experts__1__canary": {"adapter": "acme/coding@candidate", "steps": [10, 5]}},
         "strictly increasing"),
        ({"experts__1__canary": {"adapter": "acme/coding@candidate", "steps": [50, 150]}},
         "less than or equal to 100"),
        ({"experts__1__canary": {"adapter": "acme/coding@candidate", "interval": "5 minutes"}},
         "canary.interval '5 minutes' must be a number and s, m or h"),
        ({"experts__1__canary": {"adapter": "nope"}}, "invalid adapter reference"),
    ],
)
def test_invalid_specs_say_what_to_fix(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError) as info:
        MoLDeploymentSpec.model_validate(spec_with(**changes))
    assert message in str(info.value)


@pytest.mark.parametrize("rank", [1, 8, 16, 32, 64, 128, 256, 320, 512])
def test_allowed_ranks(rank: int) -> None:
    spec = MoLDeploymentSpec.model_validate(spec_with(engine__maxLoraRank=rank))
    assert spec.engine.max_lora_rank == rank


def test_canary_steps_may_end_below_100() -> None:
    data = spec_with(experts__1__canary={"adapter": "acme/coding@v4", "steps": [5, 20]})
    canary = MoLDeploymentSpec.model_validate(data).expert("coding").canary
    assert canary is not None
    assert canary.steps == [5, 20]


def test_metadata_name_must_be_dns_label() -> None:
    for bad in ("Bad_Name", "1abc", "a" * 64, "a.b"):
        with pytest.raises(ValidationError, match=r"metadata\.name must be a DNS-1035 label"):
            MoLDeployment.model_validate({"metadata": {"name": bad}, "spec": BASE})
    assert MoLDeployment.model_validate({"metadata": {"name": "a" * 63}, "spec": BASE})


def test_wrong_kind_rejected() -> None:
    with pytest.raises(ValidationError):
        MoLDeployment.model_validate({"kind": "Deployment", "metadata": {"name": "x"},
                                      "spec": BASE})


@pytest.mark.parametrize(("text", "seconds"), [
    ("30s", 30), ("5m", 300), ("2h", 7200), ("90", 90), ("2d", 172800), ("1h30m", 5400),
    (" 1H ", 3600)])
def test_parse_duration(text: str, seconds: int) -> None:
    assert parse_duration(text) == seconds


def test_parse_duration_rejects_garbage() -> None:
    with pytest.raises(ValueError, match="invalid duration"):
        parse_duration("soon")
    for bad in ("", "5x", "1h 30m", "m5", "-5s", "٣s"):
        with pytest.raises(ValueError, match="invalid duration"):
            parse_duration(bad)


def test_canary_interval_keeps_the_schema_form() -> None:
    """The CRD's pattern allows one number and unit; the validator says so too."""
    with pytest.raises(ValueError, match="must be a number and s, m or h"):
        CanarySpec.model_validate({"adapter": "acme/chat@v1", "interval": "1h30m"})
    assert CanarySpec.model_validate({"adapter": "acme/chat@v1",
                                      "interval": "2m"}).interval_seconds == 120


@pytest.mark.parametrize(("gpus", "tp", "ok"), [
    (1, 1, True), (2, 2, True), (4, 2, True), (0, 1, True),  # 0 GPUs: a CPU engine
    (1, 2, False), (0, 2, False), (2, 4, False),
])
def test_gpus_per_replica_must_cover_tensor_parallel(gpus: int, tp: int, ok: bool) -> None:
    changes = {"nodePool": {"gpusPerReplica": gpus}, "engine": {"tensorParallelSize": tp}}
    if ok:
        MoLDeploymentSpec.model_validate(spec_with(**changes))
        return
    with pytest.raises(ValidationError, match=r"gpusPerReplica must be >= spec\.engine\.tensorPar"):
        MoLDeploymentSpec.model_validate(spec_with(**changes))
