from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from ..app import app
from ..console import err, human, out, print_json
from ..options import Json


@app.command(
    epilog="Examples:\n\n"
    "ghostify run recipes/quickstart.yaml -o runs/quick\n\n"
    "ghostify run recipes/quickstart.yaml -o runs/quick --set model=../shared/models/all-MiniLM-L6-v2 "
    "--set data.dataset=../shared/data/glue\n\n"
    "ghostify run recipes/ghostbert-mrpc.yaml -o runs/mrpc-3 --set vars.width=3/12 --dry-run\n\n"
    "ghostify run recipes/quickstart.yaml -o runs/quick --set finetune.max_samples=200 --json"
)
def run(
    recipe: Annotated[Path, typer.Argument(help="Recipe YAML file.", show_default=False)],
    output: Annotated[Path, typer.Option("--output", "-o", help="Run directory: one checkpoint directory per stage.", show_default=False)],
    set_: Annotated[Optional[list[str]], typer.Option("--set", help="Override KEY=VALUE: model=…, data.dataset=…, vars.width=…, STAGE.key=… (STAGE: output name or command), stages.N.key=…", show_default=False)] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Validate and print the plan with parameters and FLOPs after each structural stage; run nothing.")] = False,
    json_output: Json = False,
) -> None:
    """Run a recipe's stages in order, each into `RUN_DIR/<nn>-<stage>/`.

    The recipe is validated as a whole before any model is loaded; every problem is reported with
    its file and line. Re-running skips stages already completed with the same resolved settings
    and inputs, and resumes an interrupted training stage. The final checkpoint carries the resolved
    recipe (recipe.yaml) and the history of every stage; RUN_DIR/report.json and report.md list
    parameters, FLOPs, validation metrics and wall time per stage. Exit code 0: done; 2: invalid
    recipe or input; 1: a stage failed.
    """
    from ... import recipe as recipes  # torch and transformers: loaded when a command runs, not for --help

    loaded = recipes.load(recipe, set_ or [])
    left_out = [f"stage {label} left out (when: false)" for label in loaded.left_out]
    if dry_run:
        rows = recipes.dry_run(loaded, output)
        if json_output:
            print_json({"recipe": str(recipe), "plan": rows, "left_out": loaded.left_out})
            return
        for line in left_out:
            out.print(line)
        for row in rows:
            args = ", ".join(f"{k}={v}" for k, v in row["arguments"].items())
            params, flops = (human(row[k]) if row[k] is not None else "?" for k in ("params", "flops"))
            out.print(f"{row['stage']:<24} {params:>8} params {flops:>8} FLOPs  {args}")
        return

    def say(planned, status: str) -> None:
        err.print(f"[bold]{planned.label}[/bold]: {status}")

    for line in left_out:
        err.print(line)

    report = recipes.run(loaded, output, on_stage=say)
    if not report:  # another process of a launch: the main one writes and prints the report
        return
    if json_output:
        print_json(report)
    else:
        out.print(recipes.markdown([(str(output), report)]))
    err.print(recipes.outputs_line(loaded, output), markup=False)


@app.command(
    epilog="Examples:\n\n"
    "ghostify report runs/quick\n\n"
    "ghostify report runs/mrpc-12 runs/mrpc-6 runs/mrpc-3 --plot mrpc.png\n\n"
    "ghostify report runs/* --json"
)
def report(
    runs: Annotated[list[Path], typer.Argument(help="Run directories of `ghostify run`.", show_default=False)],
    plot: Annotated[Optional[Path], typer.Option("--plot", help="Write a PNG of metric against FLOPs (one point per run).", show_default=False)] = None,
    metric: Annotated[Optional[str], typer.Option("--metric", help="Metric to plot (default: each run's first).", show_default=False)] = None,
    json_output: Json = False,
) -> None:
    """Compare runs: parameters, FLOPs, validation metrics and wall time per stage."""
    from ... import recipe as recipes

    reports = [(str(r), recipes.read_report(r)) for r in runs]
    if plot is not None:
        recipes.plot(reports, plot, metric)
        err.print(f"wrote {plot}")
    if json_output:
        print_json({name: data for name, data in reports})
    else:
        out.print(recipes.markdown(reports))
