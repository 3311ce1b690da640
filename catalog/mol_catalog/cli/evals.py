"""``mol catalog eval``: attach eval reports to versions and list them."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated, Any

import typer

from mol_catalog.cli.common import Output, OutputOption, catalog, emit, fail, print_table
from mol_platform.clients.catalog import CatalogClient
from mol_platform.contract.catalog_models import EvalReport
from mol_platform.contract.evals import MAX_REPORT_BYTES
from mol_platform.contract.refs import AdapterRef, RefError

eval_app = typer.Typer(help="Eval reports of versions: attach suite results, list them.",
                       no_args_is_help=True, rich_markup_mode=None)

RefArgument = Annotated[str, typer.Argument(
    metavar="REF", help="namespace/name@ref, ref = vN | alias | latest | sha256:<hex>.")]


def version_of(client: CatalogClient, ref: str) -> tuple[str, int]:
    """(namespace/name, version number) of a reference; aliases are resolved now."""
    try:
        parsed = AdapterRef.parse(ref)
    except RefError as exc:
        fail(str(exc))
    if parsed.version is not None:
        return parsed.adapter, parsed.version
    return parsed.adapter, client.resolve(str(parsed)).version


def parse_metrics(text: str) -> dict[str, float]:
    """``--metrics``: a JSON object of numbers, or ``@FILE`` holding one."""
    if text.startswith("@"):
        try:
            text = Path(text[1:]).read_text(encoding="utf-8")
        except OSError as exc:
            raise typer.BadParameter(f"cannot read {text[1:]}: {exc.strerror}") from None

    def constant(name: str) -> Any:
        raise typer.BadParameter(f"--metrics contains {name}: values must be finite numbers")

    try:
        value = json.loads(text, parse_constant=constant)
    except ValueError as exc:
        raise typer.BadParameter(f"--metrics is not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise typer.BadParameter('--metrics must be a JSON object, e.g. \'{"pass@1": 0.61}\'')
    for name, number in value.items():
        if isinstance(number, bool) or not isinstance(number, int | float) or not math.isfinite(
                number):
            raise typer.BadParameter(f"--metrics: {name!r} must be a finite number")
    return {str(k): float(v) for k, v in value.items()}


def _read_report(path: Path) -> str:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise typer.BadParameter(f"cannot read {path}: {exc.strerror}") from None
    if len(data) > MAX_REPORT_BYTES:
        raise typer.BadParameter(f"{path} is {len(data)} bytes; a report holds at most "
                                 f"{MAX_REPORT_BYTES}")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise typer.BadParameter(f"{path} is not UTF-8 text") from None


@eval_app.command("attach")
def attach(
    ctx: typer.Context,
    ref: RefArgument,
    suite: Annotated[str, typer.Option(
        metavar="NAME", help="The eval suite, e.g. humaneval (lowercase letters, digits, "
        "'.', '_', '-').")],
    metrics: Annotated[str, typer.Option(
        metavar="JSON", help='Metric values as a JSON object, e.g. \'{"pass@1": 0.61}\', or '
        "@FILE holding one.")],
    suite_version: Annotated[str, typer.Option(
        metavar="VERSION", help="The suite's own version; the same suite version again "
        "replaces the report.")] = "1",
    dataset_digest: Annotated[str | None, typer.Option(
        metavar="sha256:HEX", help="Digest of the evaluation data set.")] = None,
    judge_model: Annotated[str | None, typer.Option(
        metavar="MODEL", help="The model that judged the answers (judged suites).")] = None,
    report: Annotated[Path | None, typer.Option(
        metavar="FILE", help="A free-form report (UTF-8 text, at most 1 MiB), stored in the "
        "blob store.")] = None,
    output: OutputOption = Output.text,
) -> None:
    """Attach an eval report to a version: suite results a promotion gate can compare.

    Example: mol catalog eval attach acme/coding@v4 --suite humaneval --suite-version 2024.06
    --metrics '{"pass@1": 0.61}' --report ./humaneval.md
    """
    values = parse_metrics(metrics)
    text = _read_report(report) if report is not None else None
    with catalog(ctx) as client:
        adapter, version = version_of(client, ref)
        result = client.attach_eval(adapter, version, suite, values,
                                    suite_version=suite_version, dataset_digest=dataset_digest,
                                    judge_model=judge_model, report=text)
    verb = "attached" if result.created else "replaced" if result.replaced else "unchanged"
    emit(output, result, lambda: typer.echo(
        f"{verb}: {adapter} v{version} {suite} {suite_version}: {format_metrics(result)}"))


@eval_app.command("list")
def list_reports(ctx: typer.Context, ref: RefArgument, output: OutputOption = Output.text,
                 ) -> None:
    """List a version's eval reports.

    Example: mol catalog eval list acme/coding@stable
    """
    with catalog(ctx) as client:
        adapter, version = version_of(client, ref)
        items = client.evals(adapter, version)
    emit(output, items, lambda: print_reports(items))


def format_metrics(r: EvalReport) -> str:
    return ", ".join(f"{k}={v:g}" for k, v in sorted(r.metrics.items()))


def print_reports(items: list[EvalReport]) -> None:
    print_table(["SUITE", "SUITE_VERSION", "METRICS", "DATASET", "JUDGE", "REPORT"], [
        [r.suite, r.suite_version, format_metrics(r), r.dataset_digest or "-",
         r.judge_model or "-", r.report_digest or "-"] for r in items])
