from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from mol_platform.router_config import (
    EndpointSliceSelector,
    RouterConfig,
    profile_name,
    router_config_from_spec,
)
from mol_platform.spec import MoLDeployment

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
    assert cfg.mode == "auto"
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
            experts=[{"name": "chat", "adapter": "a/b@v1"}],  # type: ignore[list-item]
            default="x",
            endpoints=["http://e"],
        )
