from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from mol_platform.contract.router_config import (
    EndpointSliceSelector,
    RouterConfig,
    profile_name,
    router_config_from_spec,
)
from mol_platform.contract.spec import MoLDeployment

EXAMPLE = Path(__file__).parents[2] / "deploy" / "examples" / "macaron.yaml"


def test_from_spec_carries_every_field() -> None:
    obj = MoLDeployment.from_yaml(EXAMPLE.read_text())
    cfg = router_config_from_spec(
        obj,
        endpoints=["http://127.0.0.1:9001"],
        catalog_url="http://catalog:8080",
        canary_weights={"coding": 25.0},
    )
    assert cfg.deployment == "macaron"
    assert cfg.profile == profile_name("macaron", "default") == "default.macaron"
    assert cfg.mode == "classifier"  # "auto", its former name, in the file
    assert cfg.classifier == "router"
    assert cfg.default == "chat"
    assert cfg.handoff_enabled is True
    assert cfg.handoff_max_hops == 2
    assert cfg.adapter_namespaces == ["acme"]
    coding = cfg.expert("coding")
    assert coding is not None
    assert coding.canary is not None
    assert (coding.canary.adapter, coding.canary.weight) == ("demo/coding@candidate", 25.0)
    chat = cfg.expert("chat")
    assert chat is not None
    assert chat.canary is None
    assert cfg.expert("missing") is None


def test_round_trips_through_yaml_file() -> None:
    obj = MoLDeployment.from_yaml(EXAMPLE.read_text())
    cfg = router_config_from_spec(
        obj, endpoint_slice=EndpointSliceSelector(namespace="default", service_name="macaron")
    )
    text = yaml.safe_dump(cfg.model_dump(by_alias=True, mode="json"))
    assert "endpointSlice" in text
    assert RouterConfig.model_validate(yaml.safe_load(text)) == cfg


def test_needs_engines() -> None:
    obj = MoLDeployment.from_yaml(EXAMPLE.read_text())
    with pytest.raises(ValidationError, match="set endpoints or endpointSlice"):
        router_config_from_spec(obj)


def test_default_must_be_an_expert() -> None:
    with pytest.raises(ValidationError, match="default 'x' is not an expert"):
        RouterConfig(
            deployment="d",
            profile="p",
            experts=[{"name": "chat", "adapter": "a/b@v1"}],
            default="x",
            endpoints=["http://e"],
        )


def test_router_knobs_default_and_round_trip(tmp_path: Path) -> None:
    from mol_platform.contract.router_config import DEFAULT_BODY_LIMIT, load_router_config

    obj = MoLDeployment.from_yaml(EXAMPLE.read_text())
    cfg = router_config_from_spec(obj, endpoints=["http://e:8000"], policy="round_robin",
                                  catalog_token_file="/etc/mol/catalog/token")
    assert cfg.body_limit_bytes == DEFAULT_BODY_LIMIT
    assert cfg.timeouts.classifier == 2.0
    assert cfg.policy == "round_robin"
    assert cfg.api_keys_file is None  # the example sets no router.apiKeys
    path = tmp_path / "router.yaml"
    path.write_text(yaml.safe_dump(cfg.model_dump(by_alias=True, mode="json")))
    assert "bodyLimitBytes" in path.read_text()
    assert "headerRead" in path.read_text()
    assert load_router_config(path) == cfg


def test_api_keys_secret_gives_the_default_keys_file() -> None:
    from mol_platform.contract.router_config import DEFAULT_API_KEYS_FILE

    obj = MoLDeployment.from_yaml(EXAMPLE.read_text())
    data = obj.model_dump(by_alias=True)
    data["spec"]["router"]["apiKeys"] = {"secretRef": "macaron-keys"}
    cfg = router_config_from_spec(MoLDeployment.model_validate(data),
                                  endpoints=["http://e:8000"])
    assert cfg.api_keys_file == DEFAULT_API_KEYS_FILE


def test_api_keys_file_format(tmp_path: Path) -> None:
    from mol_platform.contract.router_config import ApiKeysFile

    path = tmp_path / "keys.yaml"
    path.write_text(
        "keys:\n"
        "  - tenant: acme\n    key: sk-acme-0123456789abcdef\n    namespaces: [acme]\n"
        "    requestsPerMinute: 60\n    tokensPerMinute: 10000\n"
        "  - tenant: ops\n    keySha256: " + "a" * 64 + "\n"
    )
    keys = ApiKeysFile.load(path)
    assert [k.tenant for k in keys.keys] == ["acme", "ops"]
    assert keys.keys[0].namespaces == ["acme"]
    assert keys.keys[1].namespaces == ["*"]
    assert keys.keys[0].tokens_per_minute == 10000
    with pytest.raises(ValidationError, match="exactly one of key and keySha256"):
        ApiKeysFile.model_validate({"keys": [{"tenant": "x"}]})
    with pytest.raises(ValidationError, match="64 lowercase hex"):
        ApiKeysFile.model_validate({"keys": [{"tenant": "x", "keySha256": "zz"}]})
    with pytest.raises(ValidationError, match="appears twice"):
        ApiKeysFile.model_validate({"keys": [{"tenant": "a", "key": "k" * 20},
                                             {"tenant": "b", "key": "k" * 20}]})


@pytest.mark.parametrize(("field", "value"), [("bodyLimitBytes", 10), ("queueLimit", -1),
                                               ("timeouts", {"classifier": 0}),
                                               ("maxAttempts", 0), ("unknown", 1)])
def test_out_of_range_knobs_are_refused(field: str, value: object) -> None:
    base = {"deployment": "d", "profile": "p", "experts": [{"name": "chat", "adapter": "a/b@v1"}],
            "default": "chat", "endpoints": ["http://e"]}
    with pytest.raises(ValidationError):
        RouterConfig.model_validate({**base, field: value})


def test_semantic_needs_examples_or_a_trained_head() -> None:
    """A trained head (headFile) stands in for the experts' examples; with neither, the
    semantic signal could decide nothing, and the config says so."""
    from mol_platform.contract.router_config import RouterSemantic

    base = {"embeddingsUrl": "http://127.0.0.1:1", "model": "mini"}
    head = RouterSemantic.model_validate({**base, "headFile": "/heads/h.json"})
    assert (head.head_file, head.experts) == ("/heads/h.json", [])
    assert RouterSemantic.model_validate(
        {**base, "experts": [{"name": "chat", "examples": ["hi"]}]}).head_file is None
    with pytest.raises(ValidationError, match="examples or a trained head"):
        RouterSemantic.model_validate(base)
    with pytest.raises(ValidationError, match="at least 1 character"):
        RouterSemantic.model_validate({**base, "headFile": ""})
