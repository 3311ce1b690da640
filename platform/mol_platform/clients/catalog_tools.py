"""The clients' calls on tools (``/v1/namespaces/{ns}/tools`` and ``/approved-tools``):
``ToolCalls`` mixed into ``CatalogClient``, ``AsyncToolCalls`` into
``AsyncCatalogClient``. The functions here build the requests both send, so the two
cannot drift apart."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import httpx

from mol_platform.clients.catalog_http import decoded, typed
from mol_platform.contract import tool_answers as t
from mol_platform.contract import tools as tc
from mol_platform.contract.refs import check_namespace, parse_version


def tool_path(namespace: str, name: str | None = None, *rest: str | int) -> str:
    """``/v1/namespaces/{ns}/tools[/{name}[/...]]``, the names checked here."""
    path = f"/v1/namespaces/{check_namespace(namespace)}/tools"
    if name is None:
        return path
    return "/".join([path, tc.check_tool_name(name), *(str(p) for p in rest)])


def publish_body(source: str, parameters: Mapping[str, Any], description: str | None,
                 example: Mapping[str, Any] | None, lineage: Mapping[str, str | None] | None,
                 signature: str | None) -> dict[str, Any]:
    body: dict[str, Any] = {"source": source, "parameters": dict(parameters),
                            **{k: v for k, v in (lineage or {}).items() if v is not None}}
    for key, value in (("description", description), ("example", example),
                       ("signature", signature)):
        if value is not None:
            body[key] = value
    return body


def version_path(namespace: str, name: str, version: int | str) -> str:
    return tool_path(namespace, name, "versions", parse_version(str(version)))


def approve_body(version: int | str, force: bool) -> dict[str, Any]:
    return {"version": parse_version(str(version)), "force": force}


def approved_call(namespace: str, names: Sequence[str]) -> tuple[str, list[tuple[str, str]]]:
    """The approved-tools lookup's path and query (``tool`` once per name)."""
    return (f"/v1/namespaces/{check_namespace(namespace)}/approved-tools",
            [("tool", tc.check_tool_name(n)) for n in names])


class ToolCalls:
    """Tool calls; ``request`` is ``CatalogClient``'s."""

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        raise NotImplementedError

    def _tool_json(self, method: str, path: str, **kwargs: Any) -> Any:
        return decoded(self.request(method, path, **kwargs))

    def publish_tool(self, namespace: str, name: str, source: str,
                     parameters: Mapping[str, Any], *, description: str | None = None,
                     example: Mapping[str, Any] | None = None,
                     lineage: Mapping[str, str | None] | None = None,
                     signature: str | None = None) -> t.ToolVersion:
        """Propose a tool (the function ``name`` defined in ``source``); the same
        document again answers with its version. ``lineage``: session_id, deployment,
        expert, tenant."""
        body = publish_body(source, parameters, description, example, lineage, signature)
        return typed(t.ToolVersion, self._tool_json(
            "POST", tool_path(namespace, name, "versions"), json=body))

    def tools(self, namespace: str) -> list[t.ToolItem]:
        """The namespace's tools by name: latest version and the approved one."""
        return typed(t.ToolList, self._tool_json("GET", tool_path(namespace))).items

    def tool_versions(self, namespace: str, name: str) -> list[t.ToolVersion]:
        return typed(t.ToolVersionList, self._tool_json(
            "GET", tool_path(namespace, name, "versions"))).items

    def tool(self, namespace: str, name: str, version: int | str) -> t.ToolVersion:
        return typed(t.ToolVersion, self._tool_json(
            "GET", version_path(namespace, name, version)))

    def approve_tool(self, namespace: str, name: str, version: int | str,
                     force: bool = False) -> t.ToolApproval:
        """Move the protected ``approved`` alias to ``version`` (admin)."""
        return typed(t.ToolApproval, self._tool_json(
            "PUT", tool_path(namespace, name, "aliases", tc.APPROVED),
            json=approve_body(version, force)))

    def withdraw_tool(self, namespace: str, name: str) -> t.ToolApproval:
        """Remove ``approved`` (admin): the tool is offered no more."""
        return typed(t.ToolApproval, self._tool_json(
            "DELETE", tool_path(namespace, name, "aliases", tc.APPROVED)))

    def approved_tools(self, namespace: str,
                       names: Sequence[str] = ()) -> t.ApprovedToolList:
        """The approved tools (all, or ``names``) with document, digest and signature:
        check each with ``contract.tools.verify_load`` before loading it."""
        path, params = approved_call(namespace, names)
        return typed(t.ApprovedToolList, self._tool_json("GET", path, params=params))


class AsyncToolCalls:
    """The same calls, awaited; ``request`` is ``AsyncCatalogClient``'s."""

    async def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        raise NotImplementedError

    async def _tool_json(self, method: str, path: str, **kwargs: Any) -> Any:
        return decoded(await self.request(method, path, **kwargs))

    async def publish_tool(self, namespace: str, name: str, source: str,
                           parameters: Mapping[str, Any], *, description: str | None = None,
                           example: Mapping[str, Any] | None = None,
                           lineage: Mapping[str, str | None] | None = None,
                           signature: str | None = None) -> t.ToolVersion:
        """As ``ToolCalls.publish_tool``."""
        body = publish_body(source, parameters, description, example, lineage, signature)
        return typed(t.ToolVersion, await self._tool_json(
            "POST", tool_path(namespace, name, "versions"), json=body))

    async def tools(self, namespace: str) -> list[t.ToolItem]:
        return typed(t.ToolList, await self._tool_json("GET", tool_path(namespace))).items

    async def tool_versions(self, namespace: str, name: str) -> list[t.ToolVersion]:
        return typed(t.ToolVersionList, await self._tool_json(
            "GET", tool_path(namespace, name, "versions"))).items

    async def tool(self, namespace: str, name: str, version: int | str) -> t.ToolVersion:
        return typed(t.ToolVersion, await self._tool_json(
            "GET", version_path(namespace, name, version)))

    async def approve_tool(self, namespace: str, name: str, version: int | str,
                           force: bool = False) -> t.ToolApproval:
        return typed(t.ToolApproval, await self._tool_json(
            "PUT", tool_path(namespace, name, "aliases", tc.APPROVED),
            json=approve_body(version, force)))

    async def withdraw_tool(self, namespace: str, name: str) -> t.ToolApproval:
        return typed(t.ToolApproval, await self._tool_json(
            "DELETE", tool_path(namespace, name, "aliases", tc.APPROVED)))

    async def approved_tools(self, namespace: str,
                             names: Sequence[str] = ()) -> t.ApprovedToolList:
        """As ``ToolCalls.approved_tools``: check each with ``contract.tools.verify_load``
        before loading it."""
        path, params = approved_call(namespace, names)
        return typed(t.ApprovedToolList, await self._tool_json("GET", path, params=params))
