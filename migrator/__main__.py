"""`python -m migrator` is `dcgm-migrate`."""

from migrator.cli.app import main

main()
