"""YAML recipes: the whole chain as one validated, reproducible, resumable run."""

from .report import markdown, plot, read_report
from .run import dry_run, load, outputs_line, plan, run
from .schema import Recipe, RecipeError, commands, validate
from .yaml_source import RecipeSource

__all__ = ["COMMANDS", "Recipe", "commands", "RecipeError", "RecipeSource", "dry_run", "load", "markdown", "outputs_line", "plan", "plot",
           "read_report", "run", "validate"]


def __getattr__(name: str):
    """``COMMANDS``: every stage a recipe may name now (a method registered later adds one)."""
    if name == "COMMANDS":
        return commands()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
