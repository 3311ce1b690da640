"""``python -m mol_platform.testing.simulator``: see :mod:`.cli`."""

from mol_platform.testing.simulator.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
