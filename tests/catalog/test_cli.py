"""``mol catalog`` verbs and the catalog client against a real catalog server.

The server is started through ``mol catalog serve`` itself (SQLite + local blobs, auth
on) once for this module; each test uses its own namespace so tests stay independent.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import yaml
from safetensors.numpy import load, save
from typer.testing import CliRunner, Result

from mol_catalog.cli import app
from mol_platform.apps.demo import build_demo
from mol_platform.apps.pull import plan, pull
from mol_platform.clients.catalog import CatalogClient, CatalogError
from mol_platform.contract.model_folder import read_base_model_folder
from mol_platform.contract.safetensors_header import read_header
from mol_testkit.net import free_port, port_open, stop_process

ADMIN = "mol_" + "t" * 43


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A catalog started with ``python -m mol_platform catalog serve``; yields its URL."""
    tmp = tmp_path_factory.mktemp("catalog")
    port = free_port()
    env = {**os.environ, "MOL_CATALOG_ADMIN_TOKEN": ADMIN}
    for key in ("MOL_CATALOG_AUTH", "MOL_CATALOG_URL", "MOL_CATALOG_TOKEN"):
        env.pop(key, None)
    cmd = [sys.executable, "-m", "mol_platform", "catalog", "serve", "--port", str(port),
           "--db", f"sqlite:///{tmp / 'catalog.db'}", "--blobs", f"file://{tmp / 'blobs'}"]
    with (tmp / "server.log").open("wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        for _ in range(600):
            if port_open(port) or proc.poll() is not None:
                break
            proc_wait(proc, 0.1)
        if not port_open(port):
            pytest.fail(f"mol catalog serve did not start: {(tmp / 'server.log').read_text()}")
        yield f"http://127.0.0.1:{port}"
    finally:
        stop_process(proc)


def proc_wait(proc: subprocess.Popen[bytes], seconds: float) -> None:
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=seconds)


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_demo(tmp_path_factory.mktemp("demo"), seed=3).base.parent


def mol(url: str, *args: str | Path, token: str | None = ADMIN) -> Result:
    """Run ``mol catalog <args>`` in-process against ``url``."""
    head = ["--catalog-url", url] + (["--token", token] if token else [])
    result = CliRunner().invoke(app, [*head, *map(str, args)])
    assert "Traceback" not in result.output + result.stderr
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result


@pytest.fixture(scope="module")
def base(server: str, demo: Path) -> str:
    """The demo base registered as ``tiny``, profiles ``big`` (rank 64) and ``small`` (8)."""
    result = mol(server, "base", "register", demo / "tiny-llama", "--name", "tiny")
    assert result.exit_code == 0, result.stderr
    ref = result.stdout.split()[2]
    for name, rank in (("big", 64), ("small", 8)):
        out = mol(server, "profile", "set", name, "--base", ref, "--max-lora-rank", str(rank),
                  "--max-loras", "2", "--engine", "vllm==0.32.0")
        assert out.exit_code == 0, out.stderr
        assert f"max LoRA rank {rank}" in out.stdout
    return ref


def test_base_register_uses_a_content_revision_and_is_idempotent(
    server: str, demo: Path, base: str
) -> None:
    folder = read_base_model_folder(demo / "tiny-llama")
    assert base == f"tiny@{folder.default_revision()}"
    again = mol(server, "base", "register", demo / "tiny-llama", "--name", "tiny")
    assert again.exit_code == 0
    assert base in again.stdout
    shown = json.loads(mol(server, "base", "show", "tiny", "-o", "json").stdout)
    (revision,) = shown["revisions"]
    assert revision["revision"] == base.split("@")[1]
    assert revision["tensors"] == folder.tensors
    assert "model.layers.0.self_attn.k_proj.weight" in folder.tensors


def test_sharded_base_gets_the_same_revision(server: str, demo: Path, base: str,
                                             tmp_path: Path) -> None:
    header = read_header(demo / "tiny-llama" / "model.safetensors")
    names = sorted(header)
    shards = {"model-00001-of-00002.safetensors": names[::2],
              "model-00002-of-00002.safetensors": names[1::2]}
    weight_map = {}
    for shard, members in shards.items():
        save_file = {n: np.zeros(header[n].shape, np.float32) for n in members}
        (tmp_path / shard).write_bytes(save(save_file))
        weight_map.update(dict.fromkeys(members, shard))
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    (tmp_path / "config.json").write_bytes((demo / "tiny-llama" / "config.json").read_bytes())
    result = mol(server, "base", "register", tmp_path, "--name", "tiny")
    assert result.exit_code == 0, result.stderr
    assert base in result.stdout


def test_publish_resolve_and_verdicts(server: str, demo: Path, base: str) -> None:
    chat = mol(server, "publish", demo / "adapters" / "chat", "--name", "pub/chat",
               "--alias", "stable", "--base", base, "--tag", "chat", "--source", "git://x")
    assert chat.exit_code == 0, chat.stderr
    assert chat.stdout.startswith("published pub/chat v1 (sha256:")
    assert "alias stable -> v1" in chat.stdout
    assert "big: compatible" in chat.stdout
    assert "small: compatible" in chat.stdout

    coding = mol(server, "publish", demo / "adapters" / "coding", "--name", "pub/coding",
                 "--base", base)
    assert coding.exit_code == 0, coding.stderr
    assert "small: incompatible" in coding.stdout
    assert "[rank_above_max] adapter rank 16 exceeds serving profile 'small'" in coding.stdout

    again = mol(server, "publish", demo / "adapters" / "coding", "--name", "pub/coding",
                "--base", base)
    assert again.exit_code == 0
    assert again.stdout.startswith("already published: pub/coding v1")

    resolved = mol(server, "resolve", "pub/chat@stable", "--profile", "small", "-o", "json")
    assert resolved.exit_code == 0, resolved.stderr
    body = json.loads(resolved.stdout)
    assert body["version"] == 1
    assert body["digest"] == chat.stdout.split("(")[1].split(")")[0]
    assert body["verdict"]["compatible"] is True
    assert {f["path"] for f in body["files"]} == {"adapter_config.json",
                                                   "adapter_model.safetensors"}

    refused = mol(server, "resolve", "pub/coding@latest", "--profile", "small")
    assert refused.exit_code == 1
    assert "verdict (small): incompatible" in refused.stdout
    assert "incompatible with serving profile small" in refused.stderr
    assert "rank_above_max" in refused.stderr
    assert mol(server, "resolve", "pub/coding@v1", "--profile", "big").exit_code == 0


def test_publish_rejects_an_adapter_that_does_not_fit(server: str, demo: Path, base: str,
                                                      tmp_path: Path) -> None:
    """An adapter made for a non-GQA model: k/v projections as wide as q."""
    src = demo / "adapters" / "chat"
    header = read_header(src / "adapter_model.safetensors")
    arrays = {}
    for name, info in header.items():
        shape = info.shape
        if ("k_proj.lora_B" in name or "v_proj.lora_B" in name):
            shape = (shape[0] * 2, shape[1])
        arrays[name] = np.zeros(shape, np.float32)
    (tmp_path / "adapter_model.safetensors").write_bytes(save(arrays))
    (tmp_path / "adapter_config.json").write_bytes((src / "adapter_config.json").read_bytes())
    result = mol(server, "publish", tmp_path, "--name", "bad/chat", "--base", base)
    assert result.exit_code == 1
    assert result.stdout == ""
    assert "shape_mismatch" in result.stderr
    assert "v_proj.lora_B" in result.stderr
    assert "HTTP 422" in result.stderr
    reasons = [line for line in result.stderr.splitlines() if "[shape_mismatch]" in line]
    assert reasons
    for line in reasons:  # each reason once: not in the summary line as well
        message = line.split("] ", 1)[1]
        assert result.stderr.count(message) == 1, result.stderr


def test_ls_table_quiet_json_and_pages(server: str, demo: Path, base: str) -> None:
    for name in ("agent", "ui", "router"):
        out = mol(server, "publish", demo / "adapters" / name, "--name", f"lst/{name}",
                  "--base", base, "--tag", "listed")
        assert out.exit_code == 0, out.stderr
    quiet = mol(server, "ls", "--namespace", "lst", "-q")
    assert sorted(quiet.stdout.split()) == ["lst/agent", "lst/router", "lst/ui"]
    table = mol(server, "ls", "--tag", "listed").stdout.splitlines()
    assert table[0].split() == ["ADAPTER", "LATEST", "BASE", "TAGS", "UPDATED"]
    assert len(table) == 4
    assert all(base in row for row in table[1:])
    limited = json.loads(mol(server, "ls", "--namespace", "lst", "--limit", "2",
                             "-o", "json").stdout)
    assert len(limited) == 2
    with CatalogClient(server, ADMIN) as client:
        paged = list(client.list_adapters(namespace="lst", page_size=1))
    assert sorted(i.adapter for i in paged) == ["lst/agent", "lst/router", "lst/ui"]


def test_alias_history_and_yank(server: str, demo: Path, base: str) -> None:
    for adapter in ("chat", "agent"):
        assert mol(server, "publish", demo / "adapters" / adapter, "--name", "yk/x",
                   "--base", base).exit_code == 0
    assert mol(server, "alias", "set", "yk/x@stable", "v1").stdout == "yk/x@stable -> v1\n"
    blocked = mol(server, "yank", "yk/x@v1", "--reason", "broken")
    assert blocked.exit_code == 1
    assert "stable" in blocked.stderr
    moved = mol(server, "alias", "set", "yk/x@stable", "2")
    assert moved.stdout == "yk/x@stable -> v2 (was v1)\n"
    yanked = mol(server, "yank", "yk/x@v1", "--reason", "broken")
    assert yanked.exit_code == 0, yanked.stderr
    assert yanked.stdout == "yank" + "ed yk/x v1: broken\n"
    status = json.loads(mol(server, "resolve", "yk/x@v1", "-o", "json").stdout)
    assert status["status"] == "yanked"
    assert json.loads(mol(server, "resolve", "yk/x@latest", "-o", "json").stdout)["version"] == 2
    history = mol(server, "alias", "history", "yk/x@stable").stdout.splitlines()
    assert [row.split()[:2] for row in history[1:]] == [["v2", "v1"], ["v1", "-"]]
    assert mol(server, "alias", "set", "yk/x@canary", "v1").exit_code == 1  # yanked
    by_alias = mol(server, "yank", "yk/x@stable", "--reason", "x")
    assert by_alias.exit_code == 1
    assert "immutable reference" in by_alias.stderr
    shown = mol(server, "show", "yk/x").stdout
    assert "stable -> v2" in shown
    assert "yanked" in shown


def test_alias_set_with_the_alias_apart_names_the_form_to_type(server: str) -> None:
    apart = mol(server, "alias", "set", "demo/chat", "stable", "1")
    assert apart.exit_code == 2
    assert "Got unexpected extra argument" not in apart.stderr
    assert "alias set takes NS/NAME@ALIAS VERSION" in apart.stderr
    assert "did you mean: mol catalog alias set demo/chat@stable 1" in apart.stderr
    bare = mol(server, "alias", "set", "demo/chat", "1")
    assert bare.exit_code == 1
    assert "name the alias in the reference, NS/NAME@ALIAS VERSION, e.g. demo/chat@stable 1" \
        in bare.stderr
    history = mol(server, "alias", "history", "demo/chat")
    assert history.exit_code == 1
    assert "e.g. demo/chat@stable" in history.stderr
    assert mol(server, "alias", "set", "--help").stdout.count("NS/NAME ALIAS") == 0


def test_tokens_scopes_and_revoke(server: str, demo: Path, base: str) -> None:
    created = mol(server, "token", "create", "ci-tok", "--scope", "publish:tok")
    assert created.exit_code == 0, created.stderr
    token = created.stdout.strip()
    assert token.startswith("mol_")
    assert len(token) == 47
    assert "shown only once" in created.stderr
    other = mol(server, "publish", demo / "adapters" / "chat", "--name", "elsewhere/chat",
                "--base", base, token=token)
    assert other.exit_code == 1
    assert "HTTP 403" in other.stderr
    own = mol(server, "publish", demo / "adapters" / "chat", "--name", "tok/chat",
              "--base", base, token=token)
    assert own.exit_code == 0, own.stderr
    listed = json.loads(mol(server, "token", "list", "-o", "json").stdout)
    (mine,) = [t for t in listed if t["name"] == "ci-tok"]
    assert "token" not in mine
    assert mine["revoked_at"] is None
    assert mol(server, "token", "revoke", str(mine["id"])).exit_code == 0
    after = mol(server, "ls", token=token)
    assert after.exit_code == 1
    assert "HTTP 401" in after.stderr


def test_gc(server: str, base: str) -> None:
    result = mol(server, "gc", "--grace", "1h30m")
    assert result.exit_code == 0, result.stderr
    assert result.stdout.startswith("deleted ")
    assert mol(server, "gc", "--grace", "soon").exit_code == 2


def test_errors_are_one_line_on_stderr(server: str, tmp_path: Path) -> None:
    unreachable = mol(f"http://127.0.0.1:{free_port()}", "ls")
    assert unreachable.exit_code == 1
    assert "cannot reach the catalog" in unreachable.stderr
    bad_ref = mol(server, "resolve", "not-a-ref")
    assert bad_ref.exit_code == 1
    assert "invalid adapter reference 'not-a-ref'" in bad_ref.stderr
    unknown = mol(server, "resolve", "nobody/nothing@stable")
    assert unknown.exit_code == 1
    assert "HTTP 404" in unknown.stderr
    no_files = mol(server, "publish", tmp_path, "--name", "a/b")
    assert no_files.exit_code == 1
    assert "missing adapter_config.json, adapter_model.safetensors" in no_files.stderr
    anonymous = mol(server, "ls", token=None)
    assert anonymous.exit_code == 1
    assert "HTTP 401" in anonymous.stderr


def test_client_reports_upload_progress_and_error_fields(server: str, demo: Path,
                                                         base: str) -> None:
    seen: list[tuple[int, int]] = []
    folder = demo / "adapters" / "ui"
    with CatalogClient(server, ADMIN) as client:
        result = client.publish(folder, "prog/ui", base=base, tags=["a", "b"],
                                progress=lambda sent, total: seen.append((sent, total)))
        with pytest.raises(CatalogError) as info:
            client.get_adapter("prog/missing")
        events = client.events(after=0, limit=500)
    assert result.version == 1
    sizes = sum(f.stat().st_size for f in folder.iterdir())
    total = seen[-1][1]
    assert seen[-1][0] == total
    assert total > sizes
    assert [s for s, _ in seen] == sorted(s for s, _ in seen)
    assert info.value.status == 404
    assert info.value.error
    assert "prog/missing" in info.value.detail
    assert any(e.type == "version.published" and e.adapter == "prog/ui"
               for e in events.items)


def test_environment_settings_and_option_override(server: str, base: str) -> None:
    env = {"MOL_CATALOG_URL": server, "MOL_CATALOG_TOKEN": ADMIN}
    assert CliRunner().invoke(app, ["ls", "-q"], env=env).exit_code == 0
    wrong = CliRunner().invoke(app, ["--token", "mol_wrong", "ls"], env=env)
    assert wrong.exit_code == 1
    assert "HTTP 401" in wrong.stderr


COMMANDS = [["serve"], ["publish"], ["resolve"], ["ls"], ["show"], ["alias", "set"],
            ["alias", "history"], ["yank"], ["base", "register"], ["base", "show"],
            ["profile", "set"], ["profile", "list"], ["profile", "show"], ["token", "create"],
            ["token", "list"], ["token", "revoke"], ["gc"], ["verify"], ["pull"], ["delete"],
            ["events"], ["eval", "attach"], ["eval", "list"]]


@pytest.mark.parametrize("command", COMMANDS, ids=[" ".join(c) for c in COMMANDS])
def test_every_verb_has_help_with_an_example(command: list[str]) -> None:
    result = CliRunner().invoke(app, [*command, "--help"])
    assert result.exit_code == 0
    example = result.stdout.split("Example:", 1)[1]
    assert "mol catalog " + " ".join(command) in example


@pytest.mark.parametrize("command", COMMANDS[1:], ids=[" ".join(c) for c in COMMANDS[1:]])
def test_every_verb_that_prints_takes_output(command: list[str]) -> None:
    result = CliRunner().invoke(app, [*command, "--help"])
    assert "-o, --output <text|json|yaml>" in result.stdout


def test_output_json_and_yaml_carry_the_same_answer(server: str, demo: Path, base: str) -> None:
    published = mol(server, "publish", demo / "adapters" / "chat", "--name", "out/chat",
                    "--base", base, "--alias", "stable", "-o", "yaml")
    assert published.exit_code == 0, published.stderr
    assert yaml.safe_load(published.stdout)["version"] == 1
    for args in (["show", "out/chat"], ["ls", "--namespace", "out"], ["profile", "list"],
                 ["alias", "history", "out/chat@stable"], ["resolve", "out/chat@stable"]):
        as_json = json.loads(mol(server, *args, "-o", "json").stdout)
        as_yaml = yaml.safe_load(mol(server, *args, "--output", "YAML").stdout)
        assert as_json == as_yaml, args
    assert mol(server, "ls", "-o", "xml").exit_code == 2


def test_publish_labels(server: str, demo: Path, base: str) -> None:
    out = mol(server, "publish", demo / "adapters" / "ui", "--name", "lbl/ui", "--base", base,
              "--label", "team=search", "--label", "tier=gold/1")
    assert out.exit_code == 0, out.stderr
    shown = json.loads(mol(server, "show", "lbl/ui", "-o", "json").stdout)
    assert shown["labels"] == {"team": "search", "tier": "gold/1"}
    assert "labels: team=search, tier=gold/1" in mol(server, "show", "lbl/ui").stdout
    for bad in ("team", "=x", "-a=b", "t=1 --label t=2"):
        refused = mol(server, "publish", demo / "adapters" / "ui", "--name", "lbl/ui",
                      "--base", base, *(f"--label {bad}".split()))
        assert refused.exit_code == 2, bad
        assert "--label" in refused.stderr


def test_profile_list_and_show(server: str, base: str) -> None:
    table = mol(server, "profile", "list").stdout.splitlines()
    assert table[0].split()[:3] == ["NAME", "BASE", "ENGINE"]
    assert [row.split()[:3] for row in table[1:]] == [["big", base, "vllm==0.32.0"],
                                                     ["small", base, "vllm==0.32.0"]]
    small = json.loads(mol(server, "profile", "show", "small", "-o", "json").stdout)
    assert (small["max_lora_rank"], small["max_loras"], small["base_model"]) == (8, 2, base)
    missing = mol(server, "profile", "show", "nope")
    assert missing.exit_code == 1
    assert "HTTP 404" in missing.stderr


def _sha256(path: Path) -> str:
    return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()


def test_pull_writes_a_verified_peft_folder_once(server: str, demo: Path, base: str,
                                                 tmp_path: Path) -> None:
    assert mol(server, "publish", demo / "adapters" / "coding", "--name", "pl/coding",
               "--base", base, "--alias", "candidate").exit_code == 0
    target = tmp_path / "coding"
    first = mol(server, "pull", "pl/coding@candidate", "--local-dir", target)
    assert first.exit_code == 0, first.stderr
    assert first.stdout.strip() == str(target.resolve())
    resolved = json.loads(mol(server, "resolve", "pl/coding@v1", "-o", "json").stdout)
    assert sorted(p.name for p in target.iterdir()) == ["adapter_config.json",
                                                        "adapter_model.safetensors"]
    for f in resolved["files"]:
        assert _sha256(target / f["path"]) == f["digest"]
        assert (target / f["path"]).read_bytes() == (demo / "adapters" / "coding" /
                                                     f["path"]).read_bytes()
    again = json.loads(mol(server, "pull", "pl/coding@v1", "--local-dir", target,
                           "-o", "json").stdout)
    assert again["downloaded"] == []
    assert sorted(again["unchanged"]) == ["adapter_config.json", "adapter_model.safetensors"]
    (target / "adapter_config.json").write_text("{}")
    repaired = json.loads(mol(server, "pull", "pl/coding@v1", "--local-dir", target,
                              "-o", "json").stdout)
    assert repaired["downloaded"] == ["adapter_config.json"]
    assert _sha256(target / "adapter_config.json") == next(
        f["digest"] for f in resolved["files"] if f["path"] == "adapter_config.json")
    assert not [p for p in target.iterdir() if p.name.startswith(".")]
    unknown = mol(server, "pull", "pl/nothing@stable", "--local-dir", tmp_path / "x")
    assert unknown.exit_code == 1
    assert "HTTP 404" in unknown.stderr
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("umask", [0o022, 0o077])
def test_pulled_files_follow_the_umask(server: str, demo: Path, base: str, tmp_path: Path,
                                       umask: int) -> None:
    """As curl or huggingface-cli: 0666 less the umask, not the temp file's 0600."""
    published = mol(server, "publish", demo / "adapters" / "coding", "--name",
                    f"pl/mode-{umask:o}", "--base", base)
    assert published.exit_code == 0, published.stderr
    before = os.umask(umask)
    try:
        result = mol(server, "pull", f"pl/mode-{umask:o}@v1", "--local-dir", tmp_path)
    finally:
        os.umask(before)
    assert result.exit_code == 0, result.stderr
    modes = {p.name: p.stat().st_mode & 0o777 for p in tmp_path.iterdir()}
    assert modes == {"adapter_config.json": 0o666 & ~umask,
                     "adapter_model.safetensors": 0o666 & ~umask}


def test_pull_refuses_a_file_whose_digest_differs(server: str, demo: Path, base: str,
                                                  tmp_path: Path) -> None:
    """A wrong byte in transit: nothing lands under the real name, no temp file stays."""
    with CatalogClient(server, ADMIN) as client:
        client.publish(demo / "adapters" / "agent", "pl/agent", base=base)
        answer, files = plan(client, "pl/agent@v1")
        wrong = "sha256:" + "0" * 64
        tampered = [replace(f, digest=wrong) if f.path.endswith(".safetensors") else f
                    for f in files]
        with pytest.raises(CatalogError, match="nothing was written"):
            pull(client, "pl/agent@v1", tmp_path, planned=(answer, tampered))
    assert [p.name for p in tmp_path.iterdir()] == ["adapter_config.json"]


def test_delete_a_version_for_good(server: str, demo: Path, base: str, tmp_path: Path) -> None:
    own = tmp_path / "own"  # files no other test publishes, so gc may take them
    own.mkdir()
    arrays = load((demo / "adapters" / "agent" / "adapter_model.safetensors").read_bytes())
    (own / "adapter_model.safetensors").write_bytes(
        save({k: v + np.float32(0.5) for k, v in arrays.items()}))
    (own / "adapter_config.json").write_bytes(
        (demo / "adapters" / "agent" / "adapter_config.json").read_bytes())
    for folder in (demo / "adapters" / "chat", own):
        assert mol(server, "publish", folder, "--name", "del/x", "--base", base).exit_code == 0
    assert mol(server, "alias", "set", "del/x@stable", "v2").exit_code == 0
    assert mol(server, "alias", "set", "del/x@canary", "v2").exit_code == 0
    v2 = json.loads(mol(server, "resolve", "del/x@v2", "-o", "json").stdout)
    unconfirmed = mol(server, "delete", "del/x@v2")
    assert unconfirmed.exit_code == 2
    assert "--yes" in unconfirmed.stderr
    assert "immutable" in mol(server, "delete", "del/x@stable", "--yes").stderr
    created = mol(server, "token", "create", "del-pub", "--scope", "publish:del")
    forbidden = mol(server, "delete", "del/x@v2", "--yes", token=created.stdout.strip())
    assert forbidden.exit_code == 1
    assert "HTTP 403" in forbidden.stderr

    deleted = mol(server, "delete", f"del/x@{v2['digest']}", "--yes")
    assert deleted.exit_code == 0, deleted.stderr
    assert deleted.stdout == (f"deleted del/x v2 ({v2['digest']}); aliases removed: "
                              "canary, stable\n")
    gone = mol(server, "resolve", "del/x@v2")
    assert gone.exit_code == 1
    assert "HTTP 404" in gone.stderr
    assert json.loads(mol(server, "resolve", "del/x@latest", "-o", "json").stdout)[
        "version"] == 1
    shown = json.loads(mol(server, "show", "del/x", "-o", "json").stdout)
    assert shown["aliases"] == {}
    assert [v["version"] for v in shown["versions"]] == [1]
    history = json.loads(mol(server, "alias", "history", "del/x@stable", "-o", "json").stdout)
    assert [(h["version"], h["previous"]) for h in history] == [(None, 2), (2, None)]
    assert "(removed)" in mol(server, "alias", "history", "del/x@stable").stdout
    with CatalogClient(server, ADMIN) as client:
        feed = client.events(after=0, limit=1000).items
    (event,) = [e for e in feed if e.type == "version.deleted" and e.adapter == "del/x"]
    assert event.version == 2
    assert event.data is not None
    assert event.data["digest"] == v2["digest"]
    assert event.data["aliases_removed"] == ["canary", "stable"]
    assert mol(server, "delete", "del/x@v2", "--yes").exit_code == 1  # 404 now

    v1 = json.loads(mol(server, "resolve", "del/x@v1", "-o", "json").stdout)
    swept = set(json.loads(mol(server, "gc", "--grace", "0", "-o", "json").stdout)["deleted"])
    assert _sha256(own / "adapter_model.safetensors") in swept
    assert not swept & {f["digest"] for f in v1["files"]}
    again = mol(server, "publish", own, "--name", "del/x", "--base", base)
    assert again.stdout.startswith("published del/x v3 ")  # numbers are never reused


def test_events_follow_streams_until_ctrl_c(server: str, demo: Path, base: str) -> None:
    with CatalogClient(server, ADMIN) as client:
        last = client.events(after=0, limit=1000).last
    # PYTHONFAULTHANDLER: a CLI that does not stop is told SIGABRT and dumps its stacks.
    env = {**os.environ, "MOL_CATALOG_URL": server, "MOL_CATALOG_TOKEN": ADMIN,
           "PYTHONFAULTHANDLER": "1"}
    cmd = [sys.executable, "-m", "mol_platform", "catalog", "events", "--follow",
           "--after", str(last), "-o", "json"]
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env) as proc:
        try:
            with CatalogClient(server, ADMIN) as client:
                client.publish(demo / "adapters" / "ui", "ev/ui", base=base)
            assert proc.stdout is not None
            event = json.loads(proc.stdout.readline())
            assert (event["type"], event["adapter"], event["version"]) == (
                "version.published", "ev/ui", 1)
            assert event["id"] > last
            proc.send_signal(signal.SIGINT)
            try:
                _, err = proc.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                proc.send_signal(signal.SIGABRT)
                _, err = proc.communicate(timeout=30)
                pytest.fail("events --follow still ran 30 s after Ctrl-C; its stacks:\n"
                            + err.decode(errors="replace")[-6000:])
            assert proc.returncode == 0
            assert b"Traceback" not in err
        finally:
            stop_process(proc)
    page = mol(server, "events", "--after", str(last))
    assert page.exit_code == 0
    assert "version.published  ev/ui v1" in page.stdout


def test_ctrl_c_stops_the_follow_loop_even_where_python_drops_the_interrupt(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A Ctrl-C that lands while a finaliser runs loses its KeyboardInterrupt ("Exception
    ignored in ..."); the follow loop still sees the flag once its long-poll returns."""
    from mol_catalog.cli.versions import _interrupt_flag

    dropped: list[sys.UnraisableHookArgs] = []
    monkeypatch.setattr(sys, "unraisablehook", dropped.append)

    class Finalised:
        def __del__(self) -> None:
            os.kill(os.getpid(), signal.SIGINT)

    # As in a terminal, whatever the test process inherited (a background job's is SIG_IGN).
    inherited = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with _interrupt_flag() as interrupted:
            assert not interrupted
            Finalised()  # dropped at once: the handler runs inside __del__
            assert interrupted
        assert [d.exc_type for d in dropped] == [KeyboardInterrupt]
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, inherited)


def test_protected_alias_refused_by_publish_and_alias_set_then_forced(
        server: str, demo: Path, base: str) -> None:
    """The demo's coding adapter does not fit profile ``small`` (rank 8): ``stable``,
    protected by default, does not move to it; an admin's --force moves it on record."""
    assert mol(server, "protected", "list", "pa").stdout == "stable (default)\n"
    pub = mol(server, "publish", demo / "adapters" / "coding", "--name", "pa/coding",
              "--base", base, "--alias", "stable")
    assert pub.exit_code == 3, pub.output
    assert "published pa/coding v1" in pub.stdout
    assert "alias stable -> v1" not in pub.stdout
    assert "alias stable was not moved to v1 (the version is stored)" in pub.stderr
    assert "[incompatible]" in pub.stderr
    assert "'small'" in pub.stderr
    assert "aliases: -" in mol(server, "show", "pa/coding").stdout
    refused = mol(server, "alias", "set", "pa/coding@stable", "v1")
    assert refused.exit_code == 1
    assert "HTTP 409" in refused.stderr
    assert "[incompatible]" in refused.stderr
    forced = mol(server, "alias", "set", "pa/coding@stable", "v1", "--force")
    assert forced.exit_code == 0, forced.stderr
    assert forced.stdout == "pa/coding@stable -> v1\n"
    assert "forced past 1 refusal reason(s)" in forced.stderr
    history = mol(server, "alias", "history", "pa/coding@stable").stdout.splitlines()
    assert history[0].split()[-1] == "FORCED"
    assert history[1].split()[0] == "v1"
    assert history[1].split()[-1] == "incompatible"
    # Not protected any more: the same move goes ahead without force.
    out = mol(server, "protected", "set", "pa", "prod", "canary")
    assert out.stdout == "pa: protected canary prod\n"
    assert mol(server, "alias", "set", "pa/coding@stable", "v1").exit_code == 0
    assert mol(server, "alias", "set", "pa/coding@prod", "v1").exit_code == 1
    assert mol(server, "protected", "set", "pa").exit_code == 1  # neither aliases nor --none
    assert mol(server, "protected", "set", "pa", "--none").stdout == "pa: protected (none)\n"
    assert mol(server, "alias", "set", "pa/coding@prod", "v1").exit_code == 0


def test_signed_publish_with_openssl_keys(server: str, demo: Path, base: str,
                                          tmp_path: Path) -> None:
    """The documented flow: an openssl key pair, keys add, policy set, publish
    --sign-key; unsigned and wrongly signed publishes are refused with the reason."""
    key, pub = tmp_path / "release.pem", tmp_path / "release.pub"
    subprocess.run(["openssl", "ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out",
                    str(key)], check=True)
    subprocess.run(["openssl", "ec", "-in", str(key), "-pubout", "-out", str(pub)], check=True,
                   capture_output=True)
    added = mol(server, "keys", "add", "sig", "release-2026", pub)
    assert added.exit_code == 0, added.stderr
    kid = added.stdout.split()[1]
    assert len(kid) == 64
    listed = mol(server, "keys", "ls", "sig")
    assert kid in listed.stdout
    assert "release-2026" in listed.stdout
    assert mol(server, "keys", "policy", "set", "sig", "--require", "--key", kid).exit_code == 0
    shown = mol(server, "keys", "policy", "show", "sig")
    assert shown.stdout.strip() == f"sig: signatures required, by {kid}"
    chat = demo / "adapters" / "chat"
    unsigned = mol(server, "publish", chat, "--name", "sig/chat", "--base", base)
    assert unsigned.exit_code == 1
    assert "missing_signature" in unsigned.stderr or "requires a model-signing" in (
        unsigned.stderr)
    other = tmp_path / "other.pem"
    subprocess.run(["openssl", "ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out",
                    str(other)], check=True)
    wrong = mol(server, "publish", chat, "--name", "sig/chat", "--base", base,
                "--sign-key", other)
    assert wrong.exit_code == 1
    assert "is not registered in namespace 'sig'" in wrong.stderr
    signed = mol(server, "publish", chat, "--name", "sig/chat", "--base", base,
                 "--sign-key", key)
    assert signed.exit_code == 0, signed.stderr
    shown_version = json.loads(mol(server, "show", "sig/chat", "-o", "json").stdout)
    assert [(v["signed"], v["signed_by"]) for v in shown_version["versions"]] == [(True, kid)]
    assert kid[:16] in mol(server, "show", "sig/chat").stdout
    revoked = mol(server, "keys", "revoke", "sig", kid)
    assert revoked.exit_code == 0
    assert "revoked at" in revoked.stdout
    both = mol(server, "publish", chat, "--name", "sig/chat", "--sign-key", key,
               "--signature", key)
    assert both.exit_code == 2
