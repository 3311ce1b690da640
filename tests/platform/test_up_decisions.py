"""``mol up`` records automatic decisions in its local catalog unless the spec says
otherwise, so the head loop (train, publish, label, retrain) runs on the demo as it is."""

from __future__ import annotations

from pathlib import Path

from mol_platform.apps.up.banner import stack_banner
from mol_platform.apps.up.stack import load_spec, record_locally
from mol_platform.contract.router_config import RouterConfig, router_config_from_spec
from mol_platform.contract.spec import MoLDeployment

EXAMPLE = Path(__file__).parents[2] / "deploy" / "examples" / "macaron-local.yaml"


def _config(obj: MoLDeployment) -> RouterConfig:
    return router_config_from_spec(obj, endpoints=["http://127.0.0.1:8001"],
                                   catalog_url="http://127.0.0.1:8080",
                                   embeddings_url="http://127.0.0.1:8002")


def test_the_demo_records_decisions_and_the_banner_says_how_to_label_them(
        tmp_path: Path) -> None:
    obj = load_spec(EXAMPLE)
    plain = _config(obj)
    assert plain.semantic is not None
    assert not plain.semantic.record_decisions
    local = record_locally(plain, obj.spec)
    assert local.semantic is not None
    assert local.semantic.record_decisions
    assert RouterConfig.model_validate(local.model_dump()) == local, "still a valid config"
    text = stack_banner(obj, "http://127.0.0.1:8000", "http://127.0.0.1:8001",
                        "http://127.0.0.1:8080", tmp_path, None, {}, False,
                        label_namespace=local.home_namespace)
    assert (f"router label <x-request-id> <expert> -n {local.home_namespace} --catalog "
            "http://127.0.0.1:8080") in text
    assert "head=ns/name@vN" in text


def test_a_spec_that_turns_recording_off_is_obeyed() -> None:
    text = EXAMPLE.read_text().replace("    semantic:\n",
                                       "    semantic:\n      recordDecisions: false\n", 1)
    obj = MoLDeployment.from_yaml(text)
    assert obj.spec.router.semantic is not None
    config = record_locally(_config(obj), obj.spec)
    assert config.semantic is not None
    assert not config.semantic.record_decisions
