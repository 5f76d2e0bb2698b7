"""The command line: typer parses, commands run, rich renders. The only layer that prints.

Heavy imports (kubernetes, rich, the engine) happen inside commands, so `--help` stays fast.
"""
