"""``spec.harness`` at ``kubectl apply`` (the CRD's schema and CEL rules, through the
admission harness) and in the operator's own parse: the same specs refused, with the
same message, naming the field."""

from __future__ import annotations

from typing import Any

import pytest

from mol_operator.crd import crd_manifest
from mol_operator.reconcile import Invalid, parse
from mol_platform.contract.spec_sandbox import MSG_EGRESS_DENIED, MSG_EGRESS_FORM
from mol_testkit.admission import Admission, AdmissionError

ADMISSION = Admission(crd_manifest())


def _obj(harness: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "mol.dev/v1alpha1", "kind": "MoLDeployment",
        "metadata": {"name": "shop", "namespace": "team-a"},
        "spec": {"baseModel": {"name": "qwen3-8b", "uri": "s3://models/qwen3-8b/"},
                 "experts": [{"name": "agent", "adapter": "acme/agent@stable",
                              "harness": True}],
                 "harness": harness},
    }


def _allow(*entries: str) -> dict[str, Any]:
    return {"egress": {"allow": list(entries)}}


DENIED = ["169.254.169.254/32", "169.254.169.254", "fd00:ec2::254", "FD00:EC2::254/128",
          "10.96.0.0/12", "10.0.0.0/8", "172.20.0.0/16", "192.168.1.1", "100.64.0.0/10",
          "127.0.0.1", "::1", "::ffff:10.0.0.1", "fe80::1", "fc00::/7", "0.1.2.3"]


@pytest.mark.parametrize("entry", DENIED)
def test_metadata_and_cluster_ranges_are_refused_alike(entry: str) -> None:
    obj = _obj(_allow("203.0.113.0/24", entry))
    with pytest.raises(AdmissionError) as refused:
        ADMISSION.admit(obj)
    assert any(e.startswith("spec.harness.egress.allow[1]:") and MSG_EGRESS_DENIED in e
               for e in refused.value.errors), refused.value.errors
    with pytest.raises(Invalid) as own:
        parse(obj)
    assert MSG_EGRESS_DENIED in own.value.message
    assert "egress.allow" in own.value.message


@pytest.mark.parametrize("entry", ["example.com", "10.0.0.0/33", "256.1.1.1", "010.1.2.3"])
def test_entries_that_are_not_addresses_are_refused(entry: str) -> None:
    obj = _obj(_allow(entry))
    with pytest.raises(AdmissionError) as refused:
        ADMISSION.admit(obj)
    assert any(e.startswith("spec.harness.egress.allow[0]:") for e in refused.value.errors)
    with pytest.raises(Invalid) as own:
        parse(obj)
    assert "harness.egress.allow entry" in own.value.message or (
        MSG_EGRESS_FORM in own.value.message)


ADMITTED = ["0.0.0.0/0", "::/0", "8.8.8.8", "203.0.113.0/24", "2001:db8::/32",
            "10.0.0.0/7", "fc00::/6", "100.128.0.1", "172.32.0.1"]


def test_public_ranges_and_ranges_around_the_denied_ones_are_admitted() -> None:
    obj = _obj({**_allow(*ADMITTED), "runtimeClassName": "gvisor", "warmPool": 0})
    stored = ADMISSION.admit(obj)
    assert parse(stored) == parse(obj)
    assert stored["spec"]["harness"]["limits"]["timeoutSeconds"] == 30
    assert stored["spec"]["harness"]["limits"]["memory"] == "512Mi"
    assert stored["spec"]["harness"]["limits"]["idleTTLSeconds"] == 1200
    assert stored["spec"]["harness"]["limits"]["outputBytes"] == 65536


# every integer of spec.harness, just past each end of its range
OUT_OF_RANGE: dict[str, tuple[dict[str, Any], str, str]] = {
    "timeout-zero": ({"limits": {"timeoutSeconds": 0}}, "limits.timeoutSeconds",
                     "greater than or equal to 1"),
    "timeout-over": ({"limits": {"timeoutSeconds": 601}}, "limits.timeoutSeconds",
                     "less than or equal to 600"),
    "pids-low": ({"limits": {"pids": 7}}, "limits.pids", "greater than or equal to 8"),
    "pids-high": ({"limits": {"pids": 4097}}, "limits.pids", "less than or equal to 4096"),
    "output-low": ({"limits": {"outputBytes": 1023}}, "limits.outputBytes",
                   "greater than or equal to 1024"),
    "output-high": ({"limits": {"outputBytes": 16 * 1024**2 + 1}}, "limits.outputBytes",
                    "less than or equal to"),
    "disk-low": ({"limits": {"diskBytes": 1024**2 - 1}}, "limits.diskBytes",
                 "greater than or equal to"),
    "disk-high": ({"limits": {"diskBytes": 16 * 1024**3 + 1}}, "limits.diskBytes",
                  "less than or equal to"),
    "idle-low": ({"limits": {"idleTTLSeconds": 59}}, "limits.idleTTLSeconds",
                 "greater than or equal to 60"),
    "idle-high": ({"limits": {"idleTTLSeconds": 7 * 86400 + 1}}, "limits.idleTTLSeconds",
                  "less than or equal to"),
    "sessions-zero": ({"maxSessions": 0}, "maxSessions", "greater than or equal to 1"),
    "sessions-high": ({"maxSessions": 10001}, "maxSessions", "less than or equal to"),
    "pool-negative": ({"warmPool": -1}, "warmPool", "greater than or equal to 0"),
    "pool-high": ({"warmPool": 101}, "warmPool", "less than or equal to 100"),
    "replicas-zero": ({"replicas": 0}, "replicas", "greater than or equal to 1"),
    "replicas-high": ({"replicas": 101}, "replicas", "less than or equal to 100"),
    "memory-words": ({"limits": {"memory": "half a gig"}}, "limits.memory",
                     "Kubernetes quantity"),
    "runtime-class": ({"runtimeClassName": "gVisor!"}, "runtimeClassName", "RuntimeClass"),
    "too-many-entries": (_allow(*(f"203.0.113.{i}" for i in range(33))), "egress.allow",
                         "at most 32 items"),
}


@pytest.mark.parametrize("case", sorted(OUT_OF_RANGE))
def test_out_of_range_settings_are_refused_by_both(case: str) -> None:
    harness, field, words = OUT_OF_RANGE[case]
    obj = _obj(harness)
    with pytest.raises(AdmissionError) as refused:
        ADMISSION.admit(obj)
    assert any(e.startswith(f"spec.harness.{field}:") for e in refused.value.errors), (
        refused.value.errors)
    with pytest.raises(Invalid) as own:
        parse(obj)
    assert words in own.value.message
