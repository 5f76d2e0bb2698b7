"""`python -m migrator.sim serve ...`: the same command as `dcgm-migrate sim serve`."""

import sys

from migrator.cli.sim_cmd import main

sys.exit(main())
