"""The command line: typer parses, commands run, rich renders; the only layer that prints."""
