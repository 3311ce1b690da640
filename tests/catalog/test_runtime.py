"""Server process tuning."""

from __future__ import annotations

import gc
import subprocess
import sys


def test_tune_gc_freezes_startup_objects_and_raises_the_young_threshold() -> None:
    # In a child process: freezing the test runner's own heap would leak into other tests.
    code = (
        "import gc\n"
        "from mol_catalog.runtime import tune_gc\n"
        "import mol_catalog.app\n"
        "before = gc.get_freeze_count()\n"
        "tune_gc(12345)\n"
        "print(before, gc.get_freeze_count(), gc.get_threshold()[0])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    before, after, young = map(int, out)
    assert before == 0
    assert after > 10_000  # the imports' objects are out of the collector's view
    assert young == 12345
    assert gc.get_freeze_count() == 0  # this process is untouched
