"""``mol catalog keys`` (signing keys and the namespace signature policy) and the signing
step of ``mol catalog publish --sign-key``.

Signing uses the OpenSSF ``model-signing`` library (the ``signing`` extra) with an
elliptic-curve private key: nothing is sent anywhere but the catalog.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Annotated

import typer

from mol_catalog.cli.common import Output, OutputOption, catalog, emit, fail, print_table
from mol_platform.contract.catalog_models import SignaturePolicy
from mol_platform.contract.model_folder import ADAPTER_FILES
from mol_platform.contract.model_signature import MAX_SIGNATURE_BYTES

keys_app = typer.Typer(help="Signing keys per namespace and the signature policy.",
                       no_args_is_help=True, rich_markup_mode=None)
policy_app = typer.Typer(help="Whether a namespace's publishes must be signed, and by which "
                         "keys.", no_args_is_help=True, rich_markup_mode=None)


def sign_folder(folder: Path, private_key: Path, password: str | None = None) -> str:
    """The model-signing signature (Sigstore bundle JSON) of the adapter's two files in
    ``folder``; every other file there is left out of the signature, as the catalog
    receives only those two."""
    try:
        import model_signing
    except ImportError:
        fail("signing needs the model-signing library: pip install 'mol-platform[signing]'")
    try:
        others = [p.name for p in folder.iterdir() if p.name not in ADAPTER_FILES]
        # model-signing's Config constructors carry no annotations.
        hashing_config = model_signing.hashing.Config
        signing_config = model_signing.signing.Config
        hashing = hashing_config().set_ignored_paths(  # type: ignore[no-untyped-call]
            paths=others, ignore_git_paths=True)
        config = signing_config().use_elliptic_key_signer(  # type: ignore[no-untyped-call]
            private_key=private_key, password=password).set_hashing_config(hashing)
        with tempfile.TemporaryDirectory(prefix="mol-sign-") as tmp:
            out = Path(tmp) / "model.sig"
            config.sign(folder, out)
            return out.read_text()
    except (OSError, ValueError, TypeError) as exc:
        fail(f"cannot sign {folder} with {private_key}: {exc} (an unencrypted PEM "
             "elliptic-curve private key on P-256, P-384 or P-521 is expected)")


def read_signature(path: Path) -> str:
    data = path.read_bytes()
    if len(data) > MAX_SIGNATURE_BYTES:
        fail(f"{path} is {len(data)} bytes; a signature has at most {MAX_SIGNATURE_BYTES}")
    return data.decode("utf-8", errors="replace")


@keys_app.command("add")
def keys_add(
    ctx: typer.Context,
    namespace: Annotated[str, typer.Argument(metavar="NAMESPACE")],
    name: Annotated[str, typer.Argument(metavar="NAME", help="A label, e.g. release-2026.")],
    public_key: Annotated[Path, typer.Argument(
        metavar="KEY.pub", help="PEM public key (P-256, P-384 or P-521).")],
    output: OutputOption = Output.text,
) -> None:
    """Register a public key that may sign the namespace's adapters (admin or
    publish:NAMESPACE).

    Example: mol catalog keys add acme release-2026 ./release.pub
    """
    with catalog(ctx) as client:
        key = client.add_key(namespace, name, public_key.read_text())
    emit(output, key, lambda: typer.echo(f"key {key.key_id} ({key.name}) added to {namespace}"))


@keys_app.command("ls")
def keys_ls(
    ctx: typer.Context,
    namespace: Annotated[str, typer.Argument(metavar="NAMESPACE")],
    output: OutputOption = Output.text,
) -> None:
    """List the namespace's keys, revoked ones too.

    Example: mol catalog keys ls acme
    """
    with catalog(ctx) as client:
        items = client.list_keys(namespace)
    emit(output, items, lambda: print_table(
        ["KEY_ID", "NAME", "CREATED", "REVOKED"],
        [[k.key_id, k.name, k.created_at, k.revoked_at or "-"] for k in items]))


@keys_app.command("revoke")
def keys_revoke(
    ctx: typer.Context,
    namespace: Annotated[str, typer.Argument(metavar="NAMESPACE")],
    key_id: Annotated[str, typer.Argument(metavar="KEY_ID", help="As `keys ls` shows it.")],
    output: OutputOption = Output.text,
) -> None:
    """Revoke a key for good: publishes signed by it are refused, and engines that
    require signatures stop loading the versions it signed.

    Example: mol catalog keys revoke acme 3f1c...e09a
    """
    with catalog(ctx) as client:
        key = client.revoke_key(namespace, key_id)
    emit(output, key, lambda: typer.echo(f"key {key.key_id} ({key.name}) revoked at "
                                         f"{key.revoked_at}"))


def _print_policy(p: SignaturePolicy) -> None:
    if not p.require_signatures:
        typer.echo(f"{p.namespace}: signatures not required")
    elif p.keys is None:
        typer.echo(f"{p.namespace}: signatures required, by any active key of the namespace")
    else:
        typer.echo(f"{p.namespace}: signatures required, by {', '.join(p.keys)}")


@policy_app.command("set")
def policy_set(
    ctx: typer.Context,
    namespace: Annotated[str, typer.Argument(metavar="NAMESPACE")],
    require: Annotated[bool, typer.Option(
        "--require/--no-require", help="Refuse unsigned publishes (or stop refusing).")],
    key: Annotated[list[str] | None, typer.Option(
        "--key", metavar="KEY_ID", help="Only this key may sign; repeat for more (default: "
        "any active key of the namespace).")] = None,
    output: OutputOption = Output.text,
) -> None:
    """Set the namespace's signature policy (admin).

    Example: mol catalog keys policy set acme --require --key 3f1c...e09a
    """
    with catalog(ctx) as client:
        p = client.set_signature_policy(namespace, require=require, keys=key or None)
    emit(output, p, lambda: _print_policy(p))


@policy_app.command("show")
def policy_show(
    ctx: typer.Context,
    namespace: Annotated[str, typer.Argument(metavar="NAMESPACE")],
    output: OutputOption = Output.text,
) -> None:
    """Show the namespace's signature policy.

    Example: mol catalog keys policy show acme
    """
    with catalog(ctx) as client:
        p = client.signature_policy(namespace)
    emit(output, p, lambda: _print_policy(p))


keys_app.add_typer(policy_app, name="policy")


def register_signing(app: typer.Typer) -> None:
    """Mount ``keys`` (with ``keys policy``) on the ``mol catalog`` group."""
    app.add_typer(keys_app, name="keys")
