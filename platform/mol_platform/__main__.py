from mol_platform.cli import main

main()
