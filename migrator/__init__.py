"""dcgm-migrate: move a live GPU Operator cluster to one stable DCGM identity.

The version lives here and only here (images/build reads this line).
"""

__version__ = "0.1.0"
