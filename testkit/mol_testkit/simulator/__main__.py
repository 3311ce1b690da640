"""``python -m mol_testkit.simulator``: see :mod:`.cli`."""

from mol_testkit.simulator.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
