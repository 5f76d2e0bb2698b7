"""Pure data and computation over plain dicts and frozen dataclasses: no I/O, client or printing."""
