"""A real Prometheus on loopback for tests, plus ``promtool`` checks.

Debian's ``prometheus`` binary with a temp storage dir, a generated config (static
scrape targets, a short scrape interval, optional rule files) and the lifecycle API
on, so ``configure()`` swaps targets or rules with a reload instead of a restart.
Starts in about a second; ``stop()`` terminates it and removes the dir; if this
process dies first, the kernel kills it (``setpriv --pdeathsig``).
"""

from __future__ import annotations

import atexit
import contextlib
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx
import yaml

from mol_testkit.net import DEPS_HINT, LOOPBACK, InfraError, free_port, stop_process

Result = list[dict[str, Any]]
# ``host:port`` scrape targets of one job, or {job name: its targets} for several.
Targets = Sequence[str] | Mapping[str, Sequence[str]]


def _binary(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise InfraError(f"`{name}` not found on PATH: {DEPS_HINT}")
    return path


class PrometheusServer:
    """``start()``, ``configure(targets=[...])``, ``query(promql)``, ``stop()``."""

    def __init__(self, scrape_interval: str = "1s", evaluation_interval: str = "1s") -> None:
        self.scrape_interval = scrape_interval
        self.evaluation_interval = evaluation_interval
        self.port = free_port()
        self.dir: Path | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: Any = None
        self._http: httpx.Client | None = None

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    @property
    def config_file(self) -> Path:
        if self.dir is None:
            raise InfraError("Prometheus is not started")
        return self.dir / "prometheus.yml"

    def _write_config(
        self, targets: Targets, job: str, rule_files: Sequence[str | Path], path: str
    ) -> None:
        config: dict[str, Any] = {
            "global": {
                "scrape_interval": self.scrape_interval,
                "scrape_timeout": self.scrape_interval,
                "evaluation_interval": self.evaluation_interval,
            },
            "rule_files": [str(Path(p).resolve()) for p in rule_files],
            "scrape_configs": [],
        }
        jobs = targets if isinstance(targets, Mapping) else {job: targets}
        for name, hosts in jobs.items():
            if hosts:
                config["scrape_configs"].append({
                    "job_name": name,
                    "metrics_path": path,
                    "static_configs": [{"targets": list(hosts)}],
                })
        self.config_file.write_text(yaml.safe_dump(config))

    def start(
        self,
        targets: Targets = (),
        job: str = "test",
        rule_files: Sequence[str | Path] = (),
        metrics_path: str = "/metrics",
    ) -> PrometheusServer:
        """Start with the given scrape targets (of ``job``, or a {job: targets} mapping);
        wait until ready (30 s max)."""
        binary = _binary("prometheus")
        if self.dir is not None:
            raise InfraError("Prometheus is already started")
        self.dir = Path(tempfile.mkdtemp(prefix="mol-prom-"))
        atexit.register(self.stop)
        try:
            self._write_config(targets, job, rule_files, metrics_path)
            self._log = (self.dir / "prometheus.log").open("wb")
            self._proc = subprocess.Popen(
                [
                    # The kernel kills it if this process dies without cleaning up.
                    "setpriv", "--pdeathsig", "SIGKILL", "--",
                    binary,
                    f"--config.file={self.config_file}",
                    f"--storage.tsdb.path={self.dir / 'data'}",
                    f"--web.listen-address={LOOPBACK}:{self.port}",
                    "--web.enable-lifecycle",
                    "--storage.tsdb.retention.time=1h",
                ],
                stdout=self._log,
                stderr=subprocess.STDOUT,
                cwd=self.dir,
            )
            self._http = httpx.Client(base_url=self.url, timeout=10.0)
            self._wait_ready(30.0)
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self, timeout: float) -> None:
        assert self._http is not None
        assert self._proc is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise InfraError(f"Prometheus exited ({self._proc.returncode}):\n{self.logs()}")
            with contextlib.suppress(httpx.TransportError):
                if self._http.get("/-/ready").status_code == 200:
                    return
            time.sleep(0.1)
        raise InfraError(f"Prometheus not ready after {timeout:.0f}s:\n{self.logs()}")

    def configure(
        self,
        targets: Targets = (),
        job: str = "test",
        rule_files: Sequence[str | Path] = (),
        metrics_path: str = "/metrics",
    ) -> None:
        """Replace scrape targets and rule files, then reload (the config is checked)."""
        self._write_config(targets, job, rule_files, metrics_path)
        rsp = self._client().post("/-/reload")
        if rsp.status_code != 200:
            raise InfraError(f"Prometheus rejected the new config: {rsp.text}")

    def logs(self) -> str:
        with contextlib.suppress(OSError, InfraError, TypeError):
            assert self.dir is not None
            return (self.dir / "prometheus.log").read_text(errors="replace")[-4000:]
        return ""

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            stop_process(proc)
        if self._http is not None:
            self._http.close()
            self._http = None
        if self._log is not None:
            self._log.close()
            self._log = None
        base, self.dir = self.dir, None
        if base is not None:
            atexit.unregister(self.stop)
            shutil.rmtree(base, ignore_errors=True)

    def __enter__(self) -> PrometheusServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- queries ----------------------------------------------------------------

    def _client(self) -> httpx.Client:
        if self._http is None:
            raise InfraError("Prometheus is not started")
        return self._http

    def query(self, promql: str) -> Result:
        """Evaluate an instant query now; ``data.result`` (a list of {metric, value}).

        A PromQL error raises ValueError with Prometheus's message."""
        rsp = self._client().get("/api/v1/query", params={"query": promql})
        body = rsp.json()
        if body.get("status") != "success":
            raise ValueError(f"PromQL {promql!r}: {body.get('errorType')}: {body.get('error')}")
        result: Result = body["data"]["result"]
        return result

    def targets(self) -> Result:
        """Active scrape targets with their health (``up``/``down``) and last error."""
        active: Result = self._client().get("/api/v1/targets").json()["data"]["activeTargets"]
        return active

    def wait_for(
        self,
        promql: str,
        predicate: Callable[[Result], bool] = bool,
        timeout: float = 30.0,
        interval: float = 0.25,
    ) -> Result:
        """Poll ``query(promql)`` until ``predicate(result)`` holds; TimeoutError with the
        last result and target health otherwise. The default predicate: non-empty."""
        deadline = time.monotonic() + timeout
        result: Result = []
        while True:
            result = self.query(promql)
            if predicate(result):
                return result
            if time.monotonic() >= deadline:
                raise TimeoutError(
                    f"{promql!r} did not satisfy the predicate in {timeout:.0f}s;"
                    f" last result {result!r}; targets {self.targets()!r}"
                )
            time.sleep(interval)


def scalar(result: Result) -> float:
    """The single sample value of an instant-vector result (exactly one series)."""
    if len(result) != 1:
        raise ValueError(f"expected exactly one series, got {len(result)}: {result!r}")
    return float(result[0]["value"][1])


def by_label(result: Result, label: str) -> dict[str, float]:
    """{label value: sample value} of an instant-vector result."""
    return {str(r["metric"].get(label, "")): float(r["value"][1]) for r in result}


def _promtool(*args: str) -> str:
    proc = subprocess.run(
        [_binary("promtool"), *args], capture_output=True, text=True, timeout=60, check=False
    )
    out = proc.stdout + proc.stderr
    if proc.returncode != 0:
        raise ValueError(f"promtool {' '.join(args)} failed:\n{out}")
    return out


def promtool_check_rules(*paths: str | Path) -> str:
    """``promtool check rules``; ValueError with promtool's output when a file is bad."""
    return _promtool("check", "rules", *map(str, paths))


def promtool_check_config(path: str | Path) -> str:
    """``promtool check config`` (syntax only); ValueError on failure."""
    return _promtool("check", "config", "--syntax-only", str(path))


def promtool_test_rules(*paths: str | Path) -> str:
    """``promtool test rules`` (unit tests for alerting/recording rules)."""
    return _promtool("test", "rules", *map(str, paths))
