"""Pod Security Standards, "restricted" profile, as the API server's admission checks it.

No kube-apiserver runs in the tests, so this is the profile's rule list
(https://kubernetes.io/docs/concepts/security/pod-security-standards/, baseline plus
restricted, latest version) written out over a pod spec in the API's JSON form. Every
operator-rendered and chart-rendered pod template goes through it: a namespace
labelled ``pod-security.kubernetes.io/enforce: restricted`` refuses exactly the pods
for which :func:`restricted_violations` returns something.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

# Volume types the restricted profile allows.
ALLOWED_VOLUMES = frozenset({"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral",
                             "persistentVolumeClaim", "projected", "secret"})
# Capabilities baseline allows to add; restricted allows only NET_BIND_SERVICE.
RESTRICTED_ADD = frozenset({"NET_BIND_SERVICE"})
SAFE_SYSCTLS = frozenset({"kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range",
                          "net.ipv4.ip_unprivileged_port_start", "net.ipv4.tcp_syncookies",
                          "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
                          "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout",
                          "net.ipv4.tcp_keepalive_intvl", "net.ipv4.tcp_keepalive_probes"})
SELINUX_TYPES = frozenset({"", "container_t", "container_init_t", "container_kvm_t",
                           "container_engine_t"})
_SECCOMP_OK = frozenset({"RuntimeDefault", "Localhost"})


def pod_spec_of(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The pod spec a workload object carries (Pod, Deployment, Job, ...), or None."""
    if obj.get("kind") == "Pod":
        spec: Mapping[str, Any] = obj["spec"]
        return spec
    template = (obj.get("spec") or {}).get("template")
    if isinstance(template, Mapping) and "containers" in (template.get("spec") or {}):
        inner: Mapping[str, Any] = template["spec"]
        return inner
    return None


def _containers(pod: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    for field in ("initContainers", "containers", "ephemeralContainers"):
        for c in pod.get(field) or []:
            yield f"{field}[{c.get('name', '?')}]", c


def restricted_violations(pod: Mapping[str, Any]) -> list[str]:
    """Every rule of the restricted profile the pod spec breaks (empty: admitted)."""
    out: list[str] = []
    psc: Mapping[str, Any] = pod.get("securityContext") or {}
    containers = list(_containers(pod))
    # Baseline: host namespaces, host paths and ports, privileged, sysctls, /proc, SELinux.
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(key):
            out.append(f"spec.{key} must be unset or false")
    if (psc.get("windowsOptions") or {}).get("hostProcess"):
        out.append("securityContext.windowsOptions.hostProcess must be unset or false")
    for sysctl in psc.get("sysctls") or []:
        if sysctl.get("name") not in SAFE_SYSCTLS:
            out.append(f"securityContext.sysctls: {sysctl.get('name')} is not a safe sysctl")
    out += _selinux("securityContext", psc)
    out += _apparmor("securityContext", psc)
    # Restricted: volume types.
    for vol in pod.get("volumes") or []:
        kinds = set(vol) - {"name"}
        if not kinds <= ALLOWED_VOLUMES:
            out.append(f"volumes[{vol.get('name')}]: {sorted(kinds - ALLOWED_VOLUMES)} "
                       "not allowed")
    pod_non_root = psc.get("runAsNonRoot") is True
    pod_seccomp = (psc.get("seccompProfile") or {}).get("type")
    if pod_seccomp is not None and pod_seccomp not in _SECCOMP_OK:
        out.append(f"securityContext.seccompProfile.type {pod_seccomp} is not allowed")
    if psc.get("runAsUser") == 0:
        out.append("securityContext.runAsUser must not be 0")
    for where, c in containers:
        sc: Mapping[str, Any] = c.get("securityContext") or {}
        if sc.get("privileged"):
            out.append(f"{where}: privileged must be unset or false")
        if (sc.get("windowsOptions") or {}).get("hostProcess"):
            out.append(f"{where}: windowsOptions.hostProcess must be unset or false")
        for port in c.get("ports") or []:
            if port.get("hostPort"):
                out.append(f"{where}: hostPort must be unset or 0")
        if sc.get("procMount") not in (None, "Default"):
            out.append(f"{where}: procMount must be unset or Default")
        out += _selinux(where, sc)
        out += _apparmor(where, sc)
        if sc.get("allowPrivilegeEscalation") is not False:
            out.append(f"{where}: allowPrivilegeEscalation must be false")
        non_root = sc.get("runAsNonRoot")
        if non_root is False or (non_root is None and not pod_non_root):
            out.append(f"{where}: runAsNonRoot must be true (pod or container)")
        if sc.get("runAsUser") == 0:
            out.append(f"{where}: runAsUser must not be 0")
        seccomp = (sc.get("seccompProfile") or {}).get("type")
        if seccomp is not None and seccomp not in _SECCOMP_OK:
            out.append(f"{where}: seccompProfile.type {seccomp} is not allowed")
        if seccomp is None and pod_seccomp is None:
            out.append(f"{where}: seccompProfile.type must be RuntimeDefault or Localhost "
                       "(pod or container)")
        caps: Mapping[str, Any] = sc.get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []):
            out.append(f"{where}: capabilities.drop must include ALL")
        added = set(caps.get("add") or []) - RESTRICTED_ADD
        if added:
            out.append(f"{where}: capabilities.add {sorted(added)} not allowed")
    return out


def _selinux(where: str, sc: Mapping[str, Any]) -> list[str]:
    opts: Mapping[str, Any] = sc.get("seLinuxOptions") or {}
    out = []
    if opts.get("type", "") not in SELINUX_TYPES:
        out.append(f"{where}: seLinuxOptions.type {opts['type']} is not allowed")
    for key in ("user", "role"):
        if opts.get(key):
            out.append(f"{where}: seLinuxOptions.{key} must be unset")
    return out


def _apparmor(where: str, sc: Mapping[str, Any]) -> list[str]:
    kind = (sc.get("appArmorProfile") or {}).get("type")
    if kind not in (None, "RuntimeDefault", "Localhost"):
        return [f"{where}: appArmorProfile.type {kind} is not allowed"]
    return []
