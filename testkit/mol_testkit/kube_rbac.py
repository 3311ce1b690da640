"""What the emulator's client may not do: the 403 Forbidden a real API server answers a
service account that has no RBAC rule for a resource.

The emulator serves every request by default, as a cluster-admin would be served. A
test that needs the chart's real permissions (KEDA's CRDs installed, no Role for them)
forbids the resource:
``kube.call(lambda: kube.emulator.rbac.forbid("keda.sh", "scaledobjects"))``.
Discovery (``/api``, ``/apis``) stays readable, as it is for every authenticated user, so
a client sees the API as served and only its objects as forbidden.
"""

from __future__ import annotations

from collections.abc import Iterable

import attrs
import kmock

VERBS = ("get", "list", "watch", "create", "update", "patch", "delete")
_ACTION_VERB = {"FETCH": "get", "LIST": "list", "WATCH": "watch", "CREATE": "create",
                "UPDATE": "patch", "DELETE": "delete"}
USER = "system:serviceaccount:mol-system:mol-operator"


@attrs.define
class Rbac:
    """Denied (group, plural) -> verbs; everything not denied is allowed."""

    denied: dict[tuple[str, str], frozenset[str]] = attrs.field(factory=dict)

    def forbid(self, group: str, plural: str, verbs: Iterable[str] = VERBS) -> None:
        """Deny ``verbs`` on ``plural`` of API ``group`` ("" for the core group)."""
        wanted = frozenset(verbs)
        unknown = wanted - set(VERBS)
        if unknown:
            raise ValueError(f"unknown verbs {sorted(unknown)}; known: {', '.join(VERBS)}")
        self.denied[(group, plural)] = wanted

    def allow(self, group: str, plural: str) -> None:
        """Grant again what ``forbid`` denied (a Role added while the client runs)."""
        self.denied.pop((group, plural), None)

    def refusal(self, request: kmock.Request) -> kmock.KubernetesError | None:
        """The 403 for ``request``, or None when it is allowed."""
        res = request.resource
        if res is None or not self.denied:
            return None
        group, plural = res.group or "", res.plural or ""
        verbs = self.denied.get((group, plural))
        action = getattr(request.action, "value", str(request.action))
        verb = _ACTION_VERB.get(str(action).upper())
        if str(request.method).upper().endswith("PUT"):
            verb = "update"
        if verbs is None or verb not in verbs:
            return None
        scope = (f'in the namespace "{request.namespace}"' if request.namespace
                 else "at the cluster scope")
        return kmock.KubernetesError(
            status=403, reason="Forbidden",
            message=(f'{plural}{"." + group if group else ""} is forbidden: User "{USER}" '
                     f'cannot {verb} resource "{plural}" in API group "{group}" {scope}'),
            details={"group": group, "kind": plural})
