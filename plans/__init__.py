"""Stack descriptions as data: which objects each GPU Operator stack runs and what the
migration does to them. Read by `migrator.model.stacks`; no code lives here."""
