from mol_platform.apps.cli import main

main()
