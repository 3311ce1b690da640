"""The sync client's calls on tools (``/v1/namespaces/{ns}/tools`` and
``/approved-tools``), mixed into ``CatalogClient``."""

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
        body: dict[str, Any] = {"source": source, "parameters": dict(parameters),
                                **{k: v for k, v in (lineage or {}).items() if v is not None}}
        for key, value in (("description", description), ("example", example),
                           ("signature", signature)):
            if value is not None:
                body[key] = value
        return typed(t.ToolVersion, self._tool_json(
            "POST", tool_path(namespace, name, "versions"), json=body))

    def tools(self, namespace: str) -> list[t.ToolItem]:
        """The namespace's tools by name: latest version and the approved one."""
        return typed(t.ToolList, self._tool_json("GET", tool_path(namespace))).items

    def tool_versions(self, namespace: str, name: str) -> list[t.ToolVersion]:
        return typed(t.ToolVersionList, self._tool_json(
            "GET", tool_path(namespace, name, "versions"))).items

    def tool(self, namespace: str, name: str, version: int | str) -> t.ToolVersion:
        number = parse_version(str(version))
        return typed(t.ToolVersion, self._tool_json(
            "GET", tool_path(namespace, name, "versions", number)))

    def approve_tool(self, namespace: str, name: str, version: int | str,
                     force: bool = False) -> t.ToolApproval:
        """Move the protected ``approved`` alias to ``version`` (admin)."""
        number = parse_version(str(version))
        return typed(t.ToolApproval, self._tool_json(
            "PUT", tool_path(namespace, name, "aliases", tc.APPROVED),
            json={"version": number, "force": force}))

    def withdraw_tool(self, namespace: str, name: str) -> t.ToolApproval:
        """Remove ``approved`` (admin): the tool is offered no more."""
        return typed(t.ToolApproval, self._tool_json(
            "DELETE", tool_path(namespace, name, "aliases", tc.APPROVED)))

    def approved_tools(self, namespace: str,
                       names: Sequence[str] = ()) -> t.ApprovedToolList:
        """The approved tools (all, or ``names``) with document, digest and signature:
        check each with ``contract.tools.verify_load`` before loading it."""
        params = [("tool", tc.check_tool_name(n)) for n in names]
        return typed(t.ApprovedToolList, self._tool_json(
            "GET", f"/v1/namespaces/{check_namespace(namespace)}/approved-tools",
            params=params))
