"""The stacks `sim serve --stack` can seed, in a module light enough for the CLI to import
while it builds `--help` (the seed itself pulls in the controllers and the fixtures). `mixed`
and `both` hold a ClusterPolicy and a GPUCluster at once, so only the operator releases that
let both stacks coexist can seed them (`controllers/releases.py` `check_stack`)."""

STACKS = ("clusterpolicy", "gpucluster", "mixed", "both", "none")
