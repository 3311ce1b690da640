"""Child names: every name a MoLDeployment may have (up to 63 characters) gives children
whose names Kubernetes accepts, stable across reconciles and distinct across parents."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from mol_operator.builders import Defaults, Facts, Names, build_all
from mol_operator.builders.common import knative_child_name
from mol_operator.reconcile import parse
from mol_platform.contract.names import child_name
from mol_platform.contract.refs import is_valid_name
from mol_platform.contract.router_config import profile_name
from mol_platform.contract.spec import MoLDeployment

ROOT = Path(__file__).resolve().parents[2]
DNS_1035 = re.compile(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?")
LONGEST = "a" + "b" * 55 + "-cdefg"  # 62: every "-engine" child needs shortening
NAMES = ["macaron", "m" * 56, "x" * 57, LONGEST, "y" * 63, "a-" * 31 + "z"]


def _obj(name: str, **spec: Any) -> MoLDeployment:
    data = yaml.safe_load((ROOT / "deploy/examples/macaron.yaml").read_text())
    data["metadata"]["name"] = name
    data["spec"].update(spec)
    return MoLDeployment.model_validate(data)


def _facts(obj: MoLDeployment) -> Facts:
    return Facts(obj=obj, uid="uid-1", token="t", token_id=1, token_scopes=("read:demo",),
                 defaults=Defaults(prometheus_url="http://prometheus:9090"))


def test_short_names_keep_their_plain_form() -> None:
    names = Names("macaron")
    assert (names.engine, names.router, names.catalog_secret) == (
        "macaron-engine", "macaron-router", "macaron-catalog")
    assert names.kserve_workload_service == "macaron-kserve-workload-svc"
    assert profile_name("macaron", "default") == "default.macaron"
    assert child_name("m" * 56, "-engine") == "m" * 56 + "-engine"


@pytest.mark.parametrize("name", NAMES, ids=[str(len(n)) for n in NAMES])
def test_every_valid_name_parses_and_every_child_name_is_a_dns_label(name: str) -> None:
    body = yaml.safe_load((ROOT / "deploy/examples/macaron.yaml").read_text())
    body["metadata"]["name"] = name
    obj = parse(body)
    for variant in ({}, {"serving": {"mode": "kserve"}},
                    {"replicas": None, "autoscaling": {"minReplicas": 0, "maxReplicas": 3}}):
        for manifest in build_all(_facts(_obj(name, **variant))):
            child = manifest["metadata"]["name"]
            assert len(child) <= 63, (manifest["kind"], child)
            assert DNS_1035.fullmatch(child), (manifest["kind"], child)
            assert manifest["metadata"]["labels"]["app.kubernetes.io/instance"] == name
    assert is_valid_name(profile_name(obj.metadata.name, "n" * 63))


def test_long_names_are_shortened_stably_and_apart() -> None:
    a, b = "q" * 60 + "one", "q" * 60 + "two"
    assert Names(a).engine == Names(a).engine != Names(b).engine
    engine = Names(a).engine
    assert len(engine) == 63
    assert engine.startswith("q" * 47 + "-")
    assert engine.endswith("-engine")
    assert profile_name(a, "team") != profile_name(b, "team")
    assert len(profile_name(a, "team")) == 63


def test_shortened_names_drop_a_cut_dash() -> None:
    parent = "a" * 46 + "-" + "b" * 16  # the kept head (47 characters) ends on the dash
    digest = hashlib.sha256(parent.encode()).hexdigest()[:8]
    assert child_name(parent, "-engine") == f"{'a' * 46}-{digest}-engine"


def test_references_between_children_use_the_shortened_names() -> None:
    name = "y" * 63
    objects = {(o["kind"], o["metadata"]["name"]): o for o in build_all(_facts(_obj(name)))}
    names = Names(name)
    engine = objects[("Deployment", names.engine)]["spec"]["template"]["spec"]
    refs = [e["valueFrom"]["secretKeyRef"]["name"] for c in engine["containers"]
            for e in c.get("env", []) if "valueFrom" in e and "secretKeyRef" in e["valueFrom"]]
    assert refs == [names.catalog_secret]
    router = objects[("Deployment", names.router)]["spec"]["template"]["spec"]
    assert router["serviceAccountName"] == names.router
    volumes = {v["name"]: v for v in router["volumes"]}
    assert volumes["config"]["configMap"]["name"] == names.router
    binding = objects[("RoleBinding", names.router)]
    assert binding["roleRef"]["name"] == names.router


def test_kserve_workload_service_is_named_as_kserve_names_it() -> None:
    """knative's kmeta.ChildName: head, md5 of the parent, suffix (63 characters)."""
    parent = "z" * 50
    digest = hashlib.md5(parent.encode()).hexdigest()
    assert knative_child_name(parent, "-kserve-workload-svc") == (
        f"{'z' * 11}{digest}-kserve-workload-svc")
    assert Names(parent).kserve_workload_service == f"{'z' * 11}{digest}-kserve-workload-svc"
