"""The Pod Security "restricted" check: a compliant pod passes, and each rule of the
profile, broken alone, is reported (table-driven)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from mol_testkit.pod_security import pod_spec_of, restricted_violations

GOOD: dict[str, Any] = {
    "securityContext": {"runAsNonRoot": True, "runAsUser": 10001,
                        "seccompProfile": {"type": "RuntimeDefault"}},
    "initContainers": [{"name": "init", "image": "x", "securityContext": {
        "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}}],
    "containers": [{"name": "app", "image": "x", "ports": [{"containerPort": 80}],
                    "securityContext": {"allowPrivilegeEscalation": False,
                                        "capabilities": {"drop": ["ALL"],
                                                         "add": ["NET_BIND_SERVICE"]}}}],
    "volumes": [{"name": "tmp", "emptyDir": {}}, {"name": "c", "configMap": {"name": "c"}},
                {"name": "s", "secret": {"secretName": "s"}},
                {"name": "p", "persistentVolumeClaim": {"claimName": "p"}}],
}


def _app(pod: dict[str, Any]) -> dict[str, Any]:
    sc: dict[str, Any] = pod["containers"][0]["securityContext"]
    return sc


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(pod: dict[str, Any]) -> None:
        node = pod
        *parents, last = path.split(".")
        for key in parents:
            node = node.setdefault(key, {})
        node[last] = value
    return change


BROKEN: dict[str, tuple[Callable[[dict[str, Any]], None], str]] = {
    "host network": (_set("hostNetwork", True), "hostNetwork"),
    "host pid": (_set("hostPID", True), "hostPID"),
    "host ipc": (_set("hostIPC", True), "hostIPC"),
    "privileged": (lambda p: _app(p).update(privileged=True), "privileged"),
    "host port": (lambda p: p["containers"][0]["ports"][0].update(hostPort=80), "hostPort"),
    "hostPath volume": (lambda p: p["volumes"].append({"name": "h", "hostPath": {"path": "/"}}),
                        "hostPath"),
    "escalation allowed": (lambda p: _app(p).update(allowPrivilegeEscalation=True),
                           "allowPrivilegeEscalation"),
    "escalation unset on init": (
        lambda p: p["initContainers"][0]["securityContext"].pop("allowPrivilegeEscalation"),
        "initContainers[init]: allowPrivilegeEscalation"),
    "root allowed": (lambda p: p["securityContext"].pop("runAsNonRoot"), "runAsNonRoot"),
    "container says root": (lambda p: _app(p).update(runAsNonRoot=False), "runAsNonRoot"),
    "uid 0": (lambda p: _app(p).update(runAsUser=0), "runAsUser"),
    "pod uid 0": (_set("securityContext.runAsUser", 0), "runAsUser"),
    "no seccomp": (lambda p: p["securityContext"].pop("seccompProfile"), "seccompProfile"),
    "unconfined": (lambda p: _app(p).update(seccompProfile={"type": "Unconfined"}),
                   "Unconfined"),
    "caps not dropped": (lambda p: _app(p)["capabilities"].update(drop=["NET_RAW"]),
                         "drop must include ALL"),
    "cap added": (lambda p: _app(p)["capabilities"].update(add=["SYS_ADMIN"]), "SYS_ADMIN"),
    "unsafe sysctl": (_set("securityContext.sysctls", [{"name": "kernel.msgmax", "value": "1"}]),
                      "kernel.msgmax"),
    "selinux type": (lambda p: _app(p).update(seLinuxOptions={"type": "spc_t"}), "spc_t"),
    "proc mount": (lambda p: _app(p).update(procMount="Unmasked"), "procMount"),
    "apparmor": (lambda p: _app(p).update(appArmorProfile={"type": "Unconfined"}),
                 "appArmorProfile"),
    "host process": (_set("securityContext.windowsOptions", {"hostProcess": True}),
                     "hostProcess"),
}


def test_a_compliant_pod_passes() -> None:
    assert restricted_violations(GOOD) == []


def test_container_level_settings_are_enough() -> None:
    pod = copy.deepcopy(GOOD)
    pod["securityContext"] = {}
    for c in (*pod["initContainers"], *pod["containers"]):
        c["securityContext"].update(runAsNonRoot=True, seccompProfile={"type": "Localhost",
                                                                        "localhostProfile": "p"})
    assert restricted_violations(pod) == []


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_each_rule_is_enforced(case: str) -> None:
    change, expected = BROKEN[case]
    pod = copy.deepcopy(GOOD)
    change(pod)
    problems = restricted_violations(pod)
    assert problems, case
    assert any(expected in p for p in problems), problems


def test_pod_spec_of_workloads() -> None:
    assert pod_spec_of({"kind": "Pod", "spec": GOOD}) is GOOD
    deployment = {"kind": "Deployment", "spec": {"template": {"spec": GOOD}}}
    assert pod_spec_of(deployment) is GOOD
    assert pod_spec_of({"kind": "Service", "spec": {"ports": []}}) is None
