"""/v1/adapters/{ns}/{name}/versions/{version}/evals: a version's eval reports."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.responses import Response, StreamingResponse

from mol_catalog.deps import CatalogDep, PrincipalDep
from mol_catalog.errors import InvalidName, NotFound, json_response
from mol_catalog.evals import service
from mol_catalog.evals.schemas import EvalAttach, EvalAttachedOut, EvalListOut
from mol_catalog.util import valid_name, version_number
from mol_platform.contract import evals
from mol_platform.contract.refs import RefError

router = APIRouter(tags=["evals"])
EVALS = "/v1/adapters/{ns}/{name}/versions/{version}/evals"


def _full(ns: str, name: str) -> str:
    return f"{valid_name(ns, 'namespace')}/{valid_name(name, 'adapter name')}"


@router.post(EVALS, status_code=201, response_model=EvalAttachedOut, responses={
    200: {"model": EvalAttachedOut,
          "description": "Replaced the report of that suite version, or the same again"}})
async def attach_eval(ns: str, name: str, version: str, body: EvalAttach, catalog: CatalogDep,
                      who: PrincipalDep) -> Response:
    """Attach an eval report to a version: 201 new; 200 when it replaced the report of the
    same suite and suite version (or was identical to it). Needs publish on the
    namespace; records an ``eval.attached`` event."""
    who.require_publish(ns)
    out, status = await service.attach_with_blob(catalog, _full(ns, name),
                                                 version_number(version), body, who.name)
    return json_response(out, status)


@router.get(EVALS, response_model=EvalListOut)
async def list_evals(ns: str, name: str, version: str, catalog: CatalogDep,
                     who: PrincipalDep) -> Response:
    """The version's eval reports, by suite and suite version."""
    who.require_read(ns)
    full, number = _full(ns, name), version_number(version)
    async with catalog.db.read() as conn:
        rows = await service.reports_of(conn, full, number)
    return json_response({"items": [service.report_item(full, number, r) for r in rows]})


@router.get(EVALS + "/{suite}/{suite_version}/report", response_class=Response, responses={
    200: {"description": "The free-form report, as attached (UTF-8 text)",
          "content": {"text/plain": {"schema": {"type": "string"}}}}})
async def eval_report(ns: str, name: str, version: str, suite: str, suite_version: str,
                      catalog: CatalogDep, who: PrincipalDep) -> Response:
    """The free-form report of one suite version; 404 when it was attached without one."""
    who.require_read(ns)
    try:
        evals.check_suite(suite)
        evals.check_suite_version(suite_version)
    except RefError as exc:
        raise InvalidName(str(exc)) from None
    full, number = _full(ns, name), version_number(version)
    async with catalog.db.read() as conn:
        digest, size = await service.report_blob(conn, full, number, suite, suite_version)
    if not await catalog.blobs.exists(digest):
        raise NotFound(f"the report blob {digest} is missing from the blob store "
                       "(mol catalog verify lists missing blobs)")
    return StreamingResponse(catalog.blobs.read(digest), media_type="text/plain; charset=utf-8",
                             headers={"ETag": f'"{digest}"', "Content-Length": str(size)})
