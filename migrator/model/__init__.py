"""Pure data and computation: no I/O, no Kubernetes client, no printing.

Everything here takes plain dicts (raw Kubernetes objects as JSON) or frozen dataclasses and
returns the same, so both the tool and the simulated cluster can share it and tests need no
server.
"""
