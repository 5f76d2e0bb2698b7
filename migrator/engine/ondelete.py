"""`RollPods` (`--roll-on-delete`) runs in engine/inplace.py, beside phase 1's other pod work."""

from migrator.engine.inplace import roll as roll
