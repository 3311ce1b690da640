"""The paths to a first answer chain: what the chart's NOTES and ``deploy/kind/up.sh``
publish is what the example they apply serves, its weights are where the engine image
puts them, and the kind path renders CPU engines with the CPU engine image."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import helm_python as helm
import pytest
import yaml

from mol_operator.builders import Defaults, Facts, build_all
from mol_platform.contract.refs import AdapterRef
from mol_platform.contract.spec import MoLDeployment

from .conftest import render

ROOT = Path(__file__).resolve().parents[2]
UP = ROOT / "deploy" / "kind" / "up.sh"
DOCKERFILE = ROOT / "deploy" / "images" / "engine.Dockerfile"


def _notes(chart: helm.Chart) -> str:
    out = chart.render({}, name="mol", namespace="mol-system", is_install=True)
    return next(text for path, text in out.items() if path.endswith("NOTES.txt"))


def _commands(text: str) -> list[list[str]]:
    """Shell words of each ``mol``/``kubectl`` command, ``for e in ...`` loops expanded."""
    out: list[list[str]] = []
    loop: list[str] = []
    for raw in re.split(r"\n|&&|;", text.replace("\\\n", " ")):
        line = raw.strip()
        if line.count("'") % 2:  # the edges of an `sh -c '...'` script
            line = line.strip("'")
        m = re.match(r"for (\w+) in (.+)", line)
        if m:
            loop = [m[2].split(" do")[0].strip(), m[1]]
            continue
        try:
            words = shlex.split(line, comments=True)
        except ValueError:  # a fragment of a JSON body or a script, not a command
            continue
        words = [w for w in words if w != "do"]
        if words and words[0] in ("mol", "kubectl"):
            if loop and any(f"${loop[1]}" in w for w in words):
                out += [[w.replace(f"${loop[1]}", v) for w in words] for v in loop[0].split()]
            else:
                out.append(words)
        if "done" in line:
            loop = []
    return out


def _flag(words: list[str], name: str) -> str:
    return words[words.index(name) + 1]


def _published(commands: list[list[str]]) -> tuple[set[str], set[str], dict[str, str]]:
    """(registered bases, published name@alias, folder of each base)."""
    bases = {_flag(c, "--name"): c[4] for c in commands
             if c[1:4] == ["catalog", "base", "register"]}
    refs = {f"{_flag(c, '--name')}@{_flag(c, '--alias')}" for c in commands
            if c[1:3] == ["catalog", "publish"]}
    return set(bases), refs, bases


def _example_refs(obj: MoLDeployment) -> set[str]:
    refs = set()
    for e in obj.spec.experts:
        for ref in (e.adapter, *([e.canary.adapter] if e.canary else [])):
            parsed = AdapterRef.parse(ref)
            refs.add(f"{parsed.namespace}/{parsed.name}@{ref.rpartition('@')[2]}")
    return refs


def _baked_models() -> list[str]:
    return re.findall(r"^COPY --from=demo \S+ (\S+)$", DOCKERFILE.read_text(), re.M)


def _check_chain(commands: list[list[str]], example: Path) -> MoLDeployment:
    obj = MoLDeployment.from_yaml(example.read_text())
    bases, refs, folders = _published(commands)
    assert bases == {obj.spec.base_model.name}
    missing = _example_refs(obj) - refs
    assert not missing, f"{example.name} serves adapters never published: {missing}"
    # The weights the engine loads are the demo base the catalog was told about.
    uri = obj.spec.base_model.uri.removeprefix("file://")
    assert uri in _baked_models()
    assert uri.endswith(folders[obj.spec.base_model.name])
    return obj


def test_notes_steps_chain_into_one_example(chart: helm.Chart) -> None:
    commands = _commands(_notes(chart))
    applied = [_flag(c, "-f") for c in commands if "apply" in c]
    assert applied == ["deploy/examples/macaron.yaml"]
    obj = _check_chain(commands, ROOT / applied[0])
    forwards = [c for c in commands if "port-forward" in c]
    assert f"svc/{obj.metadata.name}-router" in forwards[-1]


def _up_commands() -> list[list[str]]:
    text = UP.read_text()
    text = text.replace('"$EXAMPLE"', "deploy/examples/macaron-cpu.yaml")
    return _commands(text)


def _up_var(name: str) -> str:
    m = re.search(rf'^{name}="([^"$]+)"', UP.read_text(), re.M)
    assert m, name
    return m[1]


def test_kind_path_publishes_what_its_example_serves() -> None:
    assert re.search(r'^EXAMPLE="\$ROOT/deploy/examples/macaron-cpu.yaml"', UP.read_text(), re.M)
    _check_chain(_up_commands(), ROOT / "deploy/examples/macaron-cpu.yaml")


def test_kind_path_renders_cpu_engines_with_the_image_it_builds() -> None:
    obj = MoLDeployment.from_yaml((ROOT / "deploy/examples/macaron-cpu.yaml").read_text())
    engine_image = _up_var("ENGINE_IMAGE")
    assert obj.spec.engine.image == engine_image
    assert not engine_image.endswith(":latest")
    build = re.search(r"docker build -f \"\$ROOT/deploy/images/engine.Dockerfile\"(.*?)\"\$ROOT\"",
                      UP.read_text(), re.S)
    assert build
    assert '-t "$ENGINE_IMAGE"' in build[1]
    assert "VLLM_IMAGE=$CPU_VLLM" in build[1]
    # Built on vLLM's CPU image of the same version as the GPU one.
    tag = engine_image.rpartition(":")[2]
    cpu = rf'^CPU_VLLM="\$\{{MOL_VLLM_CPU_IMAGE:-[^}}]*vllm-cpu[^}}]*:v{re.escape(tag)}\}}"'
    assert re.search(cpu, UP.read_text(), re.M)
    facts = Facts(obj=obj, uid="u", token="t", token_id=1, defaults=Defaults())
    engine = next(o for o in build_all(facts) if o["kind"] == "Deployment"
                  and o["metadata"]["name"].endswith("-engine"))
    container = engine["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == engine_image
    assert "nvidia.com/gpu" not in yaml.safe_dump(container["resources"])
    assert "--dtype" in container["args"]


def _set_value(text: str) -> Any:
    """A ``--set`` value as Helm reads it: ``{a,b}`` lists, booleans, else strings."""
    text = text.strip("'\"")
    if text.startswith("{") and text.endswith("}"):
        return [v for v in text[1:-1].split(",") if v]
    return {"true": True, "false": False}.get(text, text)


def _set_values(text: str) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for key, value in re.findall(r"--set ([\w.]+)=(\S+)", text):
        node = values
        *parents, last = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = _set_value(value) if "$" not in value else "x"
    return values


def test_kind_path_helm_values_exist_and_render(chart: helm.Chart) -> None:
    values = _set_values(UP.read_text())
    assert values["engine"]["resources"]["requests"]
    chart.validate_schema(values)
    assert render(chart, values)


@pytest.mark.parametrize("example", sorted((ROOT / "deploy" / "examples").glob("*.yaml")))
def test_no_example_runs_an_unpinned_image(example: Path) -> None:
    obj = MoLDeployment.from_yaml(example.read_text())
    assert not obj.spec.engine.image.endswith(":latest")
    assert ":" in obj.spec.engine.image.rpartition("/")[2]


def _walkthrough() -> str:
    docs = (ROOT / "docs" / "kubernetes.md").read_text()
    section = docs.split("## From `helm install` to a first answer", 1)[1].split("\n## ", 1)[0]
    m = re.search(r"```bash\n(.*?)```", section, re.S)
    assert m
    return m[1]


def test_docs_walk_from_helm_install_to_a_first_answer(chart: helm.Chart) -> None:
    text = _walkthrough()
    commands = _commands(text)
    assert any(c[:2] == ["helm", "install"] for c in _helm(text))
    assert re.search(r"helm install kube-prometheus-stack .*\n", text)
    assert re.search(r"helm install keda kedacore/keda", text)
    obj = _check_chain(commands, ROOT / "deploy/examples/macaron.yaml")
    (apply,) = [c for c in commands if "apply" in c]
    namespace = _flag(apply, "-n")
    # The install: real values, a namespaced operator watching the example's namespace,
    # monitors and rules labelled for kube-prometheus-stack, KEDA granted.
    (install,) = [c for c in _helm(text) if c[:3] == ["helm", "install", "mol"]]
    values = _set_values(" ".join(install))
    chart.validate_schema(values)
    assert values["operator"]["watchNamespaces"] == [namespace]
    assert values["keda"]["enabled"] is True
    assert values["monitoring"]["serviceMonitors"]["labels"] == {
        "release": "kube-prometheus-stack"}
    assert render(chart, values)
    assert f"label namespace {namespace} pod-security.kubernetes.io/enforce=restricted" in text
    assert f"svc/{obj.metadata.name}-router" in text


def _helm(text: str) -> list[list[str]]:
    out = []
    for line in text.replace("\\\n", " ").splitlines():
        words = shlex.split(line, comments=True) if line.strip().startswith("helm") else []
        if words:
            out.append(words)
    return out
