"""What ``mol up`` prints once everything is up: how to call each part, as commands
that run when pasted (tests run them as printed).

The banner is the first thing a new user reads, so it leads with what to try next (the
console, one ``model: auto`` request and how to read its ``x-mol-route`` header, ``mol
router explain`` for why), then the endpoint and each part's details: where ``mol`` is
when the virtual environment is not activated, and every alias the catalog holds (not
only the demo's: a restarted ``mol up`` shows what was published since).
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

from mol_platform.contract.spec import MoLDeployment

# The automatic example's prompt holds no keyword of the example deployment's experts,
# so its example utterances decide (x-mol-route: semantic; ...), not a keyword.
AUTO_PROMPT = "Write a haiku about autumn leaves"
FORCED_PROMPT = "Write a haiku about code"
MODE_ORDER = {
    "explicit": "no expert named, so the default expert answers",
    "classifier": "the router expert picks",
    "semantic": "keywords first, then the nearest example utterances, then the default",
    "semantic-then-classifier": "keywords first, then the nearest example utterances, "
                                "then the router expert, then the default",
}
ROUTE_LINE = ("# x-mol-expert: who answered; x-mol-route: what decided: router (named by "
              "the request), keywords, semantic (example utterances), head (a trained "
              "head, named head=ns/name@vN), classifier (the router expert) or default, "
              "with scores (docs/router.md)")
MAX_ALIASES = 12  # banner lines for aliases; the rest is one `catalog ls` away


def mol_command() -> str:
    """``mol`` as a shell can run it: the bare name when PATH finds this installation's
    script, else the script's full path (a virtual environment that is not activated,
    as after ``make demo``), else this interpreter with ``-m mol_platform``."""
    script = Path(sys.executable).parent / "mol"
    found = shutil.which("mol")
    if found is not None and script.exists() and Path(found).resolve() == script.resolve():
        return "mol"
    return str(script) if script.exists() else f"{sys.executable} -m mol_platform"


def path_hint() -> list[str]:
    """How to get a bare ``mol``, when it is not on PATH (README's CLI section uses it)."""
    command = mol_command()
    activate = Path(sys.executable).parent / "activate"
    if command == "mol" or not Path(command).is_file() or not activate.is_file():
        return []
    return [f"          (`mol` is {command}; `source {activate}` puts it on PATH)"]


def bearer(token: str | None) -> str:
    return f" -H 'Authorization: Bearer {token}'" if token else ""


def alias_lines(aliases: dict[str, int], more: bool) -> list[str]:
    """One line per alias, at most MAX_ALIASES; ``more``: adapters were left out."""
    lines = [f"          {ref} -> v{v}" for ref, v in list(aliases.items())[:MAX_ALIASES]]
    if len(aliases) > MAX_ALIASES or more:
        lines.append("          ... and more: `mol catalog ls`, the console")
    return lines


def catalog_banner(url: str, data_dir: Path, token: str | None, *,
                   console: bool = True, hint: bool = True) -> str:
    """``console``, ``hint``: with the console's line and the PATH hint (the stack's
    banner may have shown them before)."""
    lines = [f"catalog   {url}  (SQLite {data_dir.resolve() / 'catalog.db'}, "
             f"blobs {data_dir.resolve() / 'blobs'})",
             f"          curl{bearer(token)} {url}/v1/adapters",
             (f"          MOL_CATALOG_URL={url}"
              + (f" MOL_CATALOG_TOKEN={token}" if token else "")
              + f" {mol_command()} catalog ls"),
             *(path_hint() if hint else []),
             (f"          console: {url}/ui   API docs: {url}/docs" if console
              else f"          API docs: {url}/docs")]
    if token:
        lines += [f"          admin token (kept in {data_dir / 'admin-token'}): {token}",
                  "          (the console's login takes it; a wrong one is a 401: "
                  f"curl -H 'Authorization: Bearer wrong' {url}/v1/tokens)",
                  f"          a narrower one: {mol_command()} catalog token create me "
                  "--scope read:demo (same env as `catalog ls`)"]
    return "\n".join(lines)


def curl_examples(router_url: str, deployment: str, key: str | None = None) -> list[str]:
    """The two chat calls: one naming the coding expert, one the router decides
    (``model: auto``; the deployment's name means the same)."""
    def body(extra: dict[str, object], prompt: str) -> str:
        return json.dumps({"model": deployment, **extra,
                           "messages": [{"role": "user", "content": prompt}],
                           "max_tokens": 32})

    post = (f"curl -si {router_url}/v1/chat/completions{bearer(key)} "
            "-H 'content-type: application/json' -d '{}'")
    return [post.format(body({"router": "coding"}, FORCED_PROMPT)),
            post.format(body({"model": "auto"}, AUTO_PROMPT))]


def stack_banner(obj: MoLDeployment, router_url: str, engine_url: str, catalog_url: str,
                 data_dir: Path, token: str | None, aliases: dict[str, int], more: bool = False,
                 embeddings_url: str | None = None, api_key: str | None = None,
                 label_namespace: str | None = None) -> str:
    """``label_namespace``: where automatic decisions are recorded (None: they are not),
    so the banner shows how to label one for the next ``mol router train``."""
    experts = ", ".join(e.name for e in obj.spec.experts)
    mode = obj.spec.router.mode
    forced, automatic = curl_examples(router_url, obj.metadata.name, api_key)
    logs = data_dir / "logs"
    mol = mol_command()
    lines = ["", f"MoL Platform is up: {obj.metadata.name} (experts {experts})",
             f"try next  the console: {catalog_url}/ui  (the stack's live figures, a "
             "playground that chats with the experts, the adapters)",
             f"          # the router picks ({mode} mode: {MODE_ORDER.get(mode, mode)}):",
             f"          {automatic}",
             f"          {ROUTE_LINE}"]
    explain = obj.spec.router.semantic is not None
    if explain:
        lines += ["          # why: each expert's score for that prompt, and what would decide "
                  "(no model is called):",
                  f"          {mol} router explain -c {data_dir.resolve() / 'router.yaml'} "
                  f"'{AUTO_PROMPT}'", *path_hint()]
    lines += [f"endpoint  {router_url}/v1  (OpenAI API; model 'auto' or "
              f"'{obj.metadata.name}': the router picks; or an expert's name)",
              "          # the coding expert, named by the request:",
              f"          {forced}"]
    if api_key:
        lines.append(f"          API key (tenant local, kept in {data_dir / 'router-api-key'})"
                     f": {api_key}; none or a wrong one is a 401")
    if label_namespace is not None:
        lines += ["          # automatic decisions are recorded in the local catalog; say which "
                  "expert was right for one (its x-request-id header), then export the "
                  "labels to train a head (docs/router.md):",
                  f"          {mol} router label <x-request-id> <expert> -n {label_namespace}"
                  f" --catalog {catalog_url}{' --token ' + token if token else ''}"]
    lines += [f"engine    {engine_url}  (vLLM; log {logs / 'engine.log'})",
              *([f"embedding {embeddings_url}  (vLLM pooling runner, started beside the "
                 f"engine; log {logs / 'embedding.log'})"] if embeddings_url else []),
              f"router    config {data_dir / 'router.yaml'}, log {logs / 'router.log'}",
              catalog_banner(catalog_url, data_dir, token, console=False, hint=not explain),
              *alias_lines(aliases, more)]
    return "\n".join(lines)
