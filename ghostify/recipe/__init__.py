"""YAML recipes: the whole chain as one validated, reproducible, resumable run."""

from .report import markdown, plot, read_report
from .run import dry_run, load, outputs_line, plan, run
from .schema import COMMANDS, Recipe, RecipeError, validate
from .yaml_source import RecipeSource

__all__ = ["COMMANDS", "Recipe", "RecipeError", "RecipeSource", "dry_run", "load", "markdown", "outputs_line", "plan", "plot",
           "read_report", "run", "validate"]
