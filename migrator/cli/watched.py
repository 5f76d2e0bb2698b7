"""`status --watch`: one answer per refresh, in a form a reader can take as it comes."""

from __future__ import annotations

import json
import sys

from migrator.cli import render
from migrator.cli.documents import to_document
from migrator.cli.options import Output
from migrator.engine.reports import StatusReport


def watched(report: StatusReport, output: Output, watch: bool) -> None:
    """One `status` answer; under --watch, -o json is JSON Lines (one compact document per
    line) and -o yaml a stream of documents (each after `---`), so a reader takes each as it
    comes (README.md, "Usage")."""
    if not watch or output is Output.table:
        render.document(report, output)
    elif output is Output.json:
        sys.stdout.write(json.dumps(to_document(report), separators=(",", ":"), default=str)
                         + "\n")
        sys.stdout.flush()
    else:
        sys.stdout.write("---\n")
        render.document(report, output)
