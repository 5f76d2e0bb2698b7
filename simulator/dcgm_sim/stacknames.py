"""The stacks `sim serve --stack` can seed, in a module light enough for the CLI to import
while it builds `--help` (the seed itself pulls in the controllers and the fixtures)."""

STACKS = ("clusterpolicy", "gpucluster", "mixed", "both", "none")
