"""What a command line names, checked before the command imports torch (seconds): a path that does
not exist, an unknown task or metric, a settings value out of range is refused in one line at once.

Each check is the light part of the reader of that kind of input (``files.check_source`` for a
checkpoint, ``data.loading.check_dataset``, ...), which the reader runs again itself: the Python API
and recipes get the same lines. Parameters are found by name: a setting has one name everywhere.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from ..console import launched_processes
from ..errors import GhostifyError
from ..files import check_input_file, check_not_a_file, check_source


def _source(value: Any) -> None:
    """A checkpoint, or (``eval``, ``bench``) an export directory or a runtime's graph file."""
    from ..runtimes import graph_runtimes  # declarations only: no runtime is imported

    graphs = next((r for r in graph_runtimes() if str(value).endswith(r.suffix)), None)
    check_source(value, f"{graphs.format_title} model" if graphs is not None else "checkpoint")


def _sources(values: Iterable[Any]) -> None:
    for value in values:
        _source(value)


def _dataset(value: Any) -> None:
    from ..data.loading import check_dataset  # light: datasets is imported when a split is read

    check_dataset(str(value))


def _validation_file(value: Any) -> None:
    from ..data.loading import check_validation_file

    check_validation_file(str(value))


def _recipe(value: Any) -> None:
    check_input_file(value, "recipe", "YAML", example="recipe.yaml")


def _latency(value: Any) -> None:
    from ..latency_model import LatencyModel  # light: JSON and dataclasses

    LatencyModel.load(value)


def _output(value: Any) -> None:
    try:
        check_not_a_file(value)
    except OSError:  # a name the file system cannot hold: the command's own check of its output says so
        pass


#: the parameters that name an input, by name, and the check of each
CHECKS: dict[str, Callable[[Any], None]] = {
    "model": _source, "teacher": _source, "student": _source, "mlm": _source, "label_with": _source,
    "models": _sources, "dataset": _dataset, "validation_file": _validation_file, "recipe": _recipe,
    "latency": _latency, "output": _output,
}


def check_inputs(options: Mapping[str, Any]) -> None:
    """Refuse the first input of ``options`` (a command's parameters by name) that cannot work."""
    for name, value in options.items():
        if value is not None and name in CHECKS:
            CHECKS[name](value)
    if "task" in options or "metric" in options:
        from ..data.tasks import check_names

        check_names(options.get("task"), options.get("metric"))


def check_paths(options: Mapping[str, Any], paths: Mapping[str, str]) -> None:
    """Refuse a path that does not exist among ``paths`` (a method's ``path_settings``, with what each reads)."""
    for name, what in paths.items():
        value = options.get(name)
        if value is not None and not Path(str(value)).expanduser().exists():
            flag = "--" + name.replace("_", "-")
            raise GhostifyError(f"{flag} {value} does not exist; check the path ({flag}: {what})")


def check_one_process(command: str) -> None:
    """Refuse ``command`` under a multi-process launch (``accelerate launch``, torchrun), where every
    process would run it whole and write the same output. ``ghostify run`` runs such a stage of a
    recipe on the main process while the others wait."""
    processes = launched_processes()
    if processes > 1:
        raise GhostifyError(f"{command} runs as one process ({processes} were launched): under accelerate launch every "
                            "process would run it whole and write the same output; run "
                            f"`ghostify {command} ...` without accelerate launch (finetune, distill, eval and a recipe's "
                            "`ghostify run` are the commands that use a launch; a recipe runs its other stages on the "
                            "main process)")
