"""Kept for importers: the steps' shared base and `Change` now live in model/steps.py."""

from migrator.model.steps import Change as Change
from migrator.model.steps import LabelMap as LabelMap
