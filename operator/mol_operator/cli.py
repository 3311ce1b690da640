"""``mol operator`` verbs: ``run`` (the kopf operator) and ``crd`` (print the CRD)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(help="The MoLDeployment operator.", no_args_is_help=True,
                  rich_markup_mode=None)


@app.command()
def crd() -> None:
    """Print the moldeployments.mol.dev CRD (generated from the spec model).

    Regenerate the committed copy with: mol operator crd > deploy/crds/moldeployments.mol.dev.yaml
    """
    from mol_operator.crd import crd_yaml

    typer.echo(crd_yaml(), nl=False)


@app.command()
def run(
    namespace: Annotated[list[str] | None, typer.Option(
        "--namespace", "-n", help="Watch this namespace (repeatable); default: every namespace.",
    )] = None,
    kube_url: Annotated[str | None, typer.Option(
        help="Kubernetes API URL (default: in-cluster service account, else kubeconfig).")] = None,
    catalog_url: Annotated[str | None, typer.Option(
        help="Catalog URL the operator calls [env MOL_OPERATOR_CATALOG_URL; "
             "default http://mol-catalog:8080].")] = None,
    catalog_public_url: Annotated[str | None, typer.Option(
        help="Catalog URL engines and routers use (default: --catalog-url).")] = None,
    catalog_token_file: Annotated[Path | None, typer.Option(
        help="File with the admin catalog token (a mounted Secret) "
             "[env MOL_OPERATOR_CATALOG_TOKEN holds the token itself].")] = None,
    prometheus_url: Annotated[str | None, typer.Option(
        help="Prometheus for canary analysis and KEDA ScaledObjects.")] = None,
    router_image: Annotated[str | None, typer.Option(help="Image of the rendered routers.")] = None,
    metrics_port: Annotated[int | None, typer.Option(
        min=0, max=65535, help="Port of /metrics and /healthz (default 8090; 0: off).")] = None,
    resync_seconds: Annotated[float | None, typer.Option(
        min=1, help="Re-check every deployment this often (default 300).")] = None,
    retry_seconds: Annotated[float | None, typer.Option(
        min=1, help="Retry temporary failures after this long (default 30).")] = None,
    leader_election: Annotated[bool | None, typer.Option(
        "--leader-election/--no-leader-election",
        help="Work only while holding the Lease (default on): run several replicas, one "
             "works.")] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Debug logging.")] = False,
) -> None:
    """Watch MoLDeployments and reconcile engines, routers, canaries and warm-ups.

    Every flag has an MOL_OPERATOR_<FLAG> environment variable (flags win).
    """
    flags = {"kube_url": kube_url, "catalog_url": catalog_url,
             "catalog_public_url": catalog_public_url,
             "catalog_token_file": catalog_token_file, "prometheus_url": prometheus_url,
             "router_image": router_image,
             "metrics_port": metrics_port, "resync_seconds": resync_seconds,
             "retry_seconds": retry_seconds, "leader_election": leader_election}
    for key, value in flags.items():
        if value is not None:
            os.environ[f"MOL_OPERATOR_{key.upper()}"] = str(value)
    if namespace:
        os.environ["MOL_OPERATOR_NAMESPACES"] = json.dumps(namespace)

    from pydantic import ValidationError

    from mol_operator.settings import OperatorSettings

    try:
        settings = OperatorSettings()
    except ValidationError as exc:
        typer.echo(f"mol operator run: invalid settings:\n{exc}", err=True)
        raise typer.Exit(code=2) from None

    import asyncio

    import kopf

    import mol_operator.handlers  # noqa: F401  (registers the handlers)
    from mol_operator.leader import elected

    kopf.configure(verbose=verbose)
    if asyncio.run(elected(settings)):
        typer.echo("mol operator run: lost the leader Lease; exiting to stand by again",
                   err=True)
        raise typer.Exit(code=1)
