"""The one training loop, on Accelerate, used by every command that trains.

- ``batch_size`` is the *global* batch per optimizer step: it is split over processes and
  gradient-accumulation steps, so a run gives the same updates on 1 or N processes.
- Work in progress lives in ``OUT.partial/`` (training state every ``checkpoint_steps`` and at each
  epoch end, the best checkpoint so far, ``metrics.jsonl``); the finished run is moved into ``OUT``
  in one rename. ``resume=True`` continues an interrupted run from its last saved state and ends
  with the same weights as an uninterrupted run.
- Only the main process writes and talks (progress, warnings); metrics are gathered across processes
  without duplicates. ``training.json`` records how many processes trained.
- ``report_to`` also logs the losses and evaluations to Accelerate's experiment trackers, under
  ``OUT/runs/`` (written in ``OUT.partial/runs/`` meanwhile).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader

from ..checkpoint import WEIGHTS_NAME, check_safetensors, write_model_card
from ..errors import GhostifyError
from ..files import atomic_directory, remove_tree
from ..methods.ghost import ghost_kernel_parameters
from ..settings import TRACKERS, TrainSettings
from .baseline import ConstantBaseline
from .metrics import compute_metrics
from .progress import TrainingProgress
from .sharding import Sharding, end_run, make_accelerator, on_main_process, split_state
from .teacher_store import RUN_STORE, TeacherStore

#: where the experiment trackers' logs go inside the output (``--report-to``)
TRACKER_DIR = "runs"


@dataclass
class Progress:
    step: int = 0  # optimizer steps taken
    epoch: int = 0  # epochs completed
    batch_in_epoch: int = 0  # micro-batches of the current epoch already consumed
    best: float | None = None
    best_step: int | None = None
    history: list[dict[str, Any]] = field(default_factory=list)  # evaluation results
    logged: int | None = 0  # lines of metrics.jsonl written up to this state (None: unknown)
    running: list[float] = field(default_factory=list)  # losses since the last logged mean
    #: each finished epoch's training time, wall clock and this process's CPU (evaluation left out)
    epoch_seconds: list[dict[str, float]] = field(default_factory=list)
    #: the step a deadline ended training at (None: it ran every step it was given)
    stopped_at: int | None = None

    @classmethod
    def load(cls, path: Path) -> "Progress":
        """The progress a saved state holds, refused in one line where the file is damaged."""
        try:
            data = json.loads(path.read_text())
            data.setdefault("logged", None)  # a state saved before the count was kept
            progress = cls(**data)
        except (OSError, UnicodeDecodeError, ValueError, TypeError, AttributeError) as exc:
            raise damaged_state(path, f"cannot be read ({type(exc).__name__}: {exc})") from None
        counts = (progress.step, progress.epoch, progress.batch_in_epoch,
                  *[v for v in (progress.best_step, progress.logged, progress.stopped_at) if v is not None])
        if not (all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in counts)
                and (progress.best is None or isinstance(progress.best, (int, float)))
                and isinstance(progress.history, list) and isinstance(progress.running, list)):
            raise damaged_state(path, f"holds {json.dumps(data)[:200]}, not the progress of a saved state")
        return progress


@dataclass(frozen=True)
class Deadline:
    """When training must end whatever its settings ask: at the first optimizer step past ``at`` (``time.time()``,
    one clock for every process of a launch), once ``least`` steps are taken (fewer are not worth running). A time
    budget's last stage has one: nothing after it can absorb the machine running slower than it was timed. Where it
    stops is recorded (``training.json``'s ``stopped_at``); ``stop_step`` there trains the same bytes again."""

    at: float
    least: int = 1

    def passed(self, step: int, accelerator) -> bool:
        """Whether training ends after ``step``: decided on every process at once (the first process past the time
        decides for all, so none waits for a step the others do not take)."""
        if step >= self.least and time.time() >= self.at:
            accelerator.set_trigger()
        return accelerator.check_trigger()


def damaged_state(path: Path, why: str) -> GhostifyError:
    """The one-line refusal of a saved training state that cannot be read back (``why``: what is wrong with ``path``)."""
    return GhostifyError(f"{path} {why}: the interrupted run cannot be resumed; pass --overwrite to start over")


@dataclass
class Evaluation:
    """How to evaluate the student after each epoch, and which value decides the best one: tokenised
    ``rows`` batched by ``collate`` (in order), scored by ``run(model, loader, accelerator)``, which
    each task kind provides (``ghostify.tasks``)."""

    rows: Any
    collate: Callable
    run: Callable[[nn.Module, Any, Any], dict[str, float]]
    select: str  # key of the metric that selects the best checkpoint (higher is better)
    # the selected metric's perfect score: 1 for a share (accuracy, entity F1), 100 where it is in percent (SQuAD's)
    full_score: float = 1.0
    # the score of a constant prediction on the same rows, where the task has one (classification)
    baseline: Callable[[], ConstantBaseline | None] | None = None


@dataclass
class TrainResult:
    output: Path
    steps: int
    best: float | None
    metrics: list[dict[str, Any]]
    wall_time: float
    learning_rates: dict[str, float] = field(default_factory=dict)  # peak rate per parameter group ("lr", "ghost_lr")
    processes: int = 1  # that trained
    engine: str = "one process"  # how they trained: "data parallel", "FSDP2", "DeepSpeed ZeRO-3", ...
    constant_baseline: dict[str, Any] | None = None  # the best evaluation against a constant prediction


class Objective(nn.Module):
    """A trainable module whose forward returns ``(loss, parts)``; ``student`` is what is saved.

    Anything that must not be trained or wrapped for data-parallel training (a teacher) is kept
    out of the module tree by the subclass."""

    student: nn.Module
    #: True once the loop placed the teacher itself (sharded by FSDP2 or a DeepSpeed ZeRO-3 engine):
    #: it is then never moved to the device as a whole
    teacher_placed: bool = False
    #: True when a step may leave trained weights without a gradient (a loss that never reaches the task
    #: head): data parallelism then looks for them after each backward instead of waiting for them
    may_leave_weights_unused: bool = False
    #: where the teacher's outputs are kept once computed (None: the teacher runs at every step); the loop
    #: opens it, or drops it where several processes train (each would see other rows)
    store: TeacherStore | None = None
    #: the teacher's passes' precision where it is not the training's (``TrainSettings.teacher_precision``; None:
    #: the training's, autocast or not); the loop sets it
    teacher_precision: str | None = None

    @property
    def teacher(self) -> nn.Module | None:
        """The frozen model the objective reads, if any (held outside the module tree)."""
        return self.__dict__.get("_teacher")

    def run_teacher(self, device: torch.device, **inputs):
        """The teacher's outputs on ``inputs``, in eval mode and without gradients."""
        teacher = self.teacher
        if not self.teacher_placed and next(teacher.parameters()).device != device:
            teacher.to(device)
        teacher.eval()
        if self.teacher_precision is None:
            with torch.no_grad():
                return teacher(**inputs)
        with torch.no_grad(), torch.autocast(device.type, dtype=_AUTOCAST.get(self.teacher_precision),
                                             enabled=self.teacher_precision in _AUTOCAST):
            output = teacher(**inputs)
        # float32 for the losses, whatever the student trains in: autocast leaves a product's outputs in bf16
        return _floats_as_float32(output)

    def extra_state_to_save(self, state: dict[str, torch.Tensor] | None = None) -> dict[str, torch.Tensor]:
        """Trained tensors saved apart from the student (e.g. distillation projections): the objective's
        own, or taken from ``state``, its full state gathered from a sharded run."""
        return {}


#: the autocast dtype of each reduced precision
_AUTOCAST = {"bf16": torch.bfloat16, "fp16": torch.float16}


def _floats_as_float32(output: Any) -> Any:
    """``output`` (a model's outputs: a mapping, tuple or tensor) with every floating tensor in float32."""
    if isinstance(output, torch.Tensor):
        return output.float() if output.is_floating_point() else output
    if isinstance(output, tuple):
        return type(output)(_floats_as_float32(v) for v in output)
    if isinstance(output, dict):  # a ModelOutput too: its fields are set in place
        for key, value in output.items():
            output[key] = _floats_as_float32(value)
    return output


def process_count() -> int:
    """The processes training together (1 outside a multi-process launch)."""
    distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
    return torch.distributed.get_world_size() if distributed else 1


def _warn_if_launch_fell_back(processes: int) -> None:
    """``accelerate launch --num_processes N`` without ``--multi_gpu`` (or a config saying so) runs
    one process; its simple launcher sets a rendezvous address but no WORLD_SIZE."""
    launched = "ACCELERATE_MIXED_PRECISION" in os.environ and "MASTER_ADDR" in os.environ
    if processes == 1 and launched and "WORLD_SIZE" not in os.environ:
        warnings.warn("accelerate launch asked for several processes but only this one runs: add --multi_gpu "
                      "(on a machine without GPUs it runs them on the CPU)", stacklevel=3)


def partial_dir(output: Path) -> Path:
    return output.with_name(output.name + ".partial")


def _fingerprint(settings: TrainSettings, identity: dict[str, Any]) -> dict[str, Any]:
    return {"settings": asdict(settings), **identity}


def adamw(params: list[Any], *, lr: float, weight_decay: float = 0.0, sharded: bool = False) -> torch.optim.AdamW:
    """AdamW as training runs it: torch's fused kernel (one pass over every parameter: on a 2-core AMD EPYC, 1
    thread, 9.6 ms a step for MiniLM's 15M parameters against 87 ms for the default, a ninth of a 3x student's whole
    step), except under FSDP2 and DeepSpeed, whose parameters are their own (DTensors, engine-owned)."""
    return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, **({} if sharded else {"fused": True}))


def parameter_groups(objective: nn.Module, params: list[nn.Parameter], settings: TrainSettings) -> list[dict[str, Any]]:
    """AdamW's parameter groups: one of every trainable parameter at ``learning_rate``, or with
    ``ghost_learning_rate`` the trainable ghost kernels and scales apart at that rate (each group
    named by the key its rate is logged under: ``lr``, ``ghost_lr``). The linear schedule scales
    every group's rate by the same factor. A model without ghost modules has one group whatever
    the setting (a recipe sets it for every stage, so this is not worth a warning)."""
    if settings.ghost_learning_rate is None:
        return [{"params": params, "name": "lr"}]
    trainable = {id(p) for p in params}
    ghosts = [p for p in ghost_kernel_parameters(objective) if id(p) in trainable]
    kernel_ids = {id(p) for p in ghosts}
    rest = [p for p in params if id(p) not in kernel_ids]
    groups = [{"params": rest, "name": "lr"}] if rest else []
    if ghosts:
        # AdamW's decoupled decay shrinks a weight by lr x weight_decay per step: scaled so that the
        # kernels shrink (towards uniform kernels, the scales towards 0) as much per step as the
        # other weights, whatever the rate. Equal rates give exactly --weight-decay.
        decay = settings.weight_decay * (settings.learning_rate / settings.ghost_learning_rate)
        groups.append({"params": ghosts, "name": "ghost_lr", "lr": settings.ghost_learning_rate, "weight_decay": decay})
    return groups


def train(
    objective: Objective,
    train_rows,
    collate: Callable,
    settings: TrainSettings,
    output: str | os.PathLike,
    save_student: Callable[[nn.Module, Path, dict[str, torch.Tensor]], None] | None,
    *,
    evaluation: Evaluation | None = None,
    identity: dict[str, Any] | None = None,
    resume: bool = False,
    overwrite: bool = False,
    on_step: Callable[[int], None] | None = None,
    describe: str = "training",
    quiet: bool = False,
    deadline: Deadline | None = None,
) -> TrainResult:
    """Train ``objective`` on ``train_rows`` and write the best (or last) student to ``output``.

    ``save_student(student, directory, extra_tensors, state)`` writes a checkpoint directory (``state``:
    the student's tensors gathered from a sharded run, None when the student holds them itself; None: no student
    is written, only ``training.json``);
    ``identity`` describes the inputs (models, data) so that ``resume`` refuses a different run.
    Under an FSDP2 or DeepSpeed launch config the student, its gradients and optimizer state, and the
    teacher are sharded over the processes (:mod:`ghostify.training.sharding`). ``quiet``: no progress shown
    (the few steps that time this machine, :mod:`ghostify.steps.throughput`). ``deadline``: end at the first step
    past a time (:class:`Deadline`), evaluated and saved as a whole epoch is; ``settings.stop_step`` ends at a step.
    """
    # deferred: accelerate and transformers' schedules take seconds to import, paid only when training
    from accelerate.utils import DataLoaderConfiguration, DistributedDataParallelKwargs, set_seed
    from transformers import get_linear_schedule_with_warmup

    settings.validate()
    objective.teacher_precision = settings.teacher_precision
    output = Path(output)
    work = partial_dir(output)
    trackers = list(settings.report_to or ())
    # on the launch's process group; FSDP or DeepSpeed as its config asks
    accelerator, partial_type = make_accelerator(
        project_dir=str(work / TRACKER_DIR) if trackers else None,  # the trackers' logging_dir (_start_trackers)
        mixed_precision=settings.mixed_precision,
        gradient_accumulation_steps=settings.gradient_accumulation_steps,
        dataloader_config=DataLoaderConfiguration(use_seedable_sampler=True),
        # encoders have no running statistics; their buffers (position ids, a reference store of
        # many MB) are the same on every process, so broadcasting them each step only costs time
        kwargs_handlers=[DistributedDataParallelKwargs(
            broadcast_buffers=False, find_unused_parameters=objective.may_leave_weights_unused)],
    )
    main = accelerator.is_main_process
    sharding: Sharding | None = None
    store = objective.store
    try:
        sharding = Sharding(accelerator)
        world = accelerator.num_processes
        if main:
            _warn_if_launch_fell_back(world)
        per_step = world * settings.gradient_accumulation_steps
        if settings.batch_size % per_step:
            raise GhostifyError(
                f"--batch-size {settings.batch_size} is not divisible by {world} processes x "
                f"{settings.gradient_accumulation_steps} accumulation steps; choose a multiple of {per_step}"
            )
        micro = settings.batch_size // per_step
        fingerprint = _fingerprint(settings, identity or {})
        # decided once (it chooses whether every process loads a sharded state), before the main process
        # changes anything
        resuming = on_main_process(lambda: _resumes(work, output, fingerprint, resume=resume, overwrite=overwrite,
                                                 engine=sharding.name, processes=world))
        if main and not resuming:
            remove_tree(work)
            work.mkdir(parents=True)
            (work / "run.json").write_text(json.dumps(fingerprint))
        accelerator.wait_for_everyone()
        store_note: dict[str, Any] | None = None
        if store is not None and world > 1:
            # each process sees its own rows: a store per process would fill no faster than computing them
            objective.store, store = None, None
            store_note = {"store": f"off: the teacher runs at every step under {world} processes"}
        elif store is not None:
            store.open(work / RUN_STORE)

        set_seed(settings.seed)
        # a loader of its own generator: starting an iterator must not draw from the global RNG,
        # or a resumed run (which starts one mid-epoch) would drift from an uninterrupted one
        loader_rng = torch.Generator().manual_seed(settings.seed)
        train_loader = DataLoader(train_rows, batch_size=micro, shuffle=True, collate_fn=collate, generator=loader_rng)
        eval_loader = None
        if evaluation is not None:
            eval_loader = DataLoader(evaluation.rows, batch_size=max(micro, 32), shuffle=False,
                                     collate_fn=evaluation.collate)
        params = [p for p in objective.parameters() if p.requires_grad]
        if not params:
            raise GhostifyError("nothing to train: every parameter is frozen")
        groups = parameter_groups(objective, params, settings)
        optimizer = adamw(groups, lr=settings.learning_rate, weight_decay=settings.weight_decay,
                          sharded=sharding.sharded)
        rates = {group["name"]: group.get("lr", settings.learning_rate) for group in groups}  # the peak rates
        sharding.prepare_student(objective, micro=micro, accumulation=settings.gradient_accumulation_steps,
                                 max_grad_norm=settings.max_grad_norm)
        with warnings.catch_warnings():
            # torch 2.13 deprecates broadcast_buffers for forward_sync_buffers, which still syncs at
            # init; the old flag keeps exactly what is wanted here (see the handler above)
            warnings.filterwarnings("ignore", message="`broadcast_buffers` is deprecated", category=FutureWarning)
            objective, optimizer, train_loader = accelerator.prepare(objective, optimizer, train_loader)
        inner = accelerator.unwrap_model(objective)
        sharding.place_teacher(inner)
        # FSDP2 replaces the parameters by their shards: clipping reads the new ones (DeepSpeed clips itself)
        params = [p for p in inner.parameters() if p.requires_grad]
        if eval_loader is not None:
            eval_loader = accelerator.prepare(eval_loader)
        steps_per_epoch = math.ceil(len(train_loader) / settings.gradient_accumulation_steps)
        total_steps = steps_per_epoch * settings.epochs
        if settings.max_steps is not None:  # the last epoch is cut short (the schedule decays to zero there)
            total_steps = min(total_steps, settings.max_steps)
        scheduler = get_linear_schedule_with_warmup(optimizer, int(settings.warmup_ratio * total_steps), total_steps)
        accelerator.register_for_checkpointing(scheduler)
        # --stop-step (and a deadline) end training before the schedule does: its rate is where the schedule has it
        last_step = total_steps if settings.stop_step is None else min(total_steps, settings.stop_step)

        progress = Progress()
        if resuming:
            progress = Progress.load(work / "state" / "progress.json")
            _load_state(accelerator, work)
        metrics_file = work / "metrics.jsonl"
        if resuming and main and progress.logged is not None:
            _keep_lines(metrics_file, progress.logged)  # drop what was logged after the saved state
        if trackers:
            try:
                _start_trackers(accelerator, describe, settings, work / TRACKER_DIR,
                                resumed_at=progress.step if resuming else None)
            except GhostifyError:
                if main and not resuming:
                    remove_tree(work)  # the run never started: it leaves no OUT.partial behind
                raise
        started = time.perf_counter()
        shown = TrainingProgress(describe, total_steps, progress.step, settings.batch_size,
                                 enabled=main and not quiet)

        def log(record: dict[str, Any]) -> None:
            if main:
                with metrics_file.open("a") as f:
                    f.write(json.dumps(record) + "\n")
            if progress.logged is not None:
                progress.logged += 1
            if trackers:
                accelerator.log(_tracker_values(record), step=record["step"])

        def save_state() -> None:
            # the teacher's outputs first, then the state: a state never counts steps whose rows a kill could lose.
            # (In the other order a kill between the two lost them; the resumed run computed them again inside other
            # epochs' batches, padded to other lengths, and a value could round to another float16: seen once in
            # CI on a loaded machine, tests/test_recipes.py's killed run.) Rows of steps after the state are read
            # back by the resumed run as the uninterrupted one computed them.
            if store is not None:
                store.flush()
            _save_state(accelerator, work, progress, sharding.name)

        def save_checkpoint(directory: Path) -> None:
            """The student (and the objective's extra tensors) as a checkpoint in ``directory``, written by
            the main process; under FSDP or DeepSpeed every process first sends its shards."""
            state = sharding.gather(objective)
            if main:
                student_state = split_state(state, "student") if state is not None else None
                _replace_dir(directory, lambda d: save_student(inner.student, d, inner.extra_state_to_save(state),
                                                               student_state))

        def evaluate(epoch: int) -> None:
            """Evaluate the student after ``epoch`` epochs; where it beats every evaluation before, it is the best."""
            with sharding.whole_student(objective):
                result = evaluation.run(inner.student, shown.evaluating(eval_loader), accelerator)
            record = {"step": progress.step, "epoch": epoch, "eval": result}
            progress.history.append(record)
            log(record)
            value = result[evaluation.select]
            improved = progress.best is None or value > progress.best
            shown.evaluated(progress.step, result, evaluation.select, improved)
            if improved:
                progress.best, progress.best_step = value, progress.step
                save_checkpoint(work / "best")

        # the model as it came in: a candidate for the best (an epoch must beat it); a resumed run has it already
        if settings.evaluate_first and evaluation is not None and progress.step == 0 and not progress.history:
            evaluate(0)
        running = progress.running  # saved with the state: a resumed run logs the same means
        for epoch in range(progress.epoch, settings.epochs):
            if progress.step >= last_step or progress.stopped_at is not None:  # ended in an earlier epoch
                break
            epoch_wall, epoch_cpu = time.perf_counter(), time.process_time()
            train_loader.set_epoch(epoch)
            loader = train_loader
            if progress.batch_in_epoch:
                loader = accelerator.skip_first_batches(train_loader, progress.batch_in_epoch)
            objective.train()
            micro: list[float] = []  # this process's losses of the current optimizer step (shown only)
            for batch in loader:
                with accelerator.accumulate(objective):
                    loss, parts = objective(batch)
                    _stop_if_not_finite(accelerator, loss, progress, work)
                    accelerator.backward(loss)
                    if accelerator.sync_gradients and settings.max_grad_norm > 0:
                        accelerator.clip_grad_norm_(params, settings.max_grad_norm)
                    optimizer.step()
                    optimizer.zero_grad()
                progress.batch_in_epoch += 1
                running.append(float(loss.detach()))
                micro.append(running[-1])
                if not accelerator.sync_gradients:
                    continue
                scheduler.step()
                progress.step += 1
                shown.step(progress.step, sum(micro) / len(micro), scheduler.get_last_lr()[0])
                micro.clear()
                if progress.step % settings.log_steps == 0:
                    mean = accelerator.gather(torch.tensor([sum(running) / len(running)], device=accelerator.device)).mean()
                    log({"step": progress.step, "epoch": epoch, "loss": float(mean),
                         **dict(zip(rates, scheduler.get_last_lr())), **{k: float(v) for k, v in parts.items()}})
                    running.clear()
                if progress.step % settings.checkpoint_steps == 0:
                    save_state()
                if on_step is not None:
                    on_step(progress.step)
                if progress.step >= last_step:
                    break  # --max-steps or --stop-step: the epoch ends here, evaluated and saved as a whole one is
                if deadline is not None and deadline.passed(progress.step, accelerator):
                    progress.stopped_at = progress.step  # and so does the deadline's
                    break
            progress.epoch = epoch + 1
            # a resumed epoch counts from the resume: its time is then the part this process trained
            progress.epoch_seconds.append({"epoch": epoch + 1, "wall": round(time.perf_counter() - epoch_wall, 3),
                                           "cpu": round(time.process_time() - epoch_cpu, 3)})
            progress.batch_in_epoch = 0
            if evaluation is not None:
                evaluate(epoch + 1)
            save_state()
        shown.close()

        baseline = _against_baseline(evaluation, progress.best, settings) if main else None
        if trackers:
            _finish_trackers(accelerator)  # their files are closed before they move into the output
        if store is not None:
            store_note = store.summary()
            store.close()
        # decided once: the other processes gather with the main one only when it writes the last weights
        # (each looking for `best` itself could find it gone, the main process having finished)
        best = on_main_process(lambda: evaluation is not None and (work / "best").is_dir())
        last = sharding.gather(objective) if not best else None  # every process sends its shards
        if main:
            with atomic_directory(output, overwrite=overwrite or output.exists()) as tmp:
                if best:
                    # linked (or copied), not moved: until `work` is gone, a kill must leave `best`
                    # whole for the resume that finishes the run again
                    shutil.copytree(work / "best", tmp, dirs_exist_ok=True, copy_function=_link_or_copy)
                elif save_student is not None:
                    save_student(inner.student, tmp, inner.extra_state_to_save(last),
                                 split_state(last, "student") if last is not None else None)
                if metrics_file.exists():
                    shutil.copy2(metrics_file, tmp / "metrics.jsonl")
                if (work / TRACKER_DIR).is_dir():
                    shutil.copytree(work / TRACKER_DIR, tmp / TRACKER_DIR)
                (tmp / "training.json").write_text(json.dumps(
                    {"steps": progress.step, "best": progress.best, "best_step": progress.best_step,
                     "epoch_seconds": progress.epoch_seconds,
                     **({"stopped_at": progress.stopped_at, "schedule_steps": total_steps}
                        if progress.stopped_at is not None else {}),
                     "evaluations": progress.history, "learning_rates": rates, "processes": world,
                     "engine": sharding.name,
                     **({"constant_baseline": baseline} if baseline is not None else {}),
                     **({"teacher_outputs": store_note} if store_note is not None else {}), **fingerprint}, indent=2))
                if save_student is not None:
                    write_model_card(tmp)  # the card again, now with training.json's evaluations
            remove_tree(work)
        accelerator.wait_for_everyone()
        return TrainResult(output, progress.step, progress.best, progress.history, time.perf_counter() - started,
                           rates, processes=world, engine=sharding.name, constant_baseline=baseline)
    finally:
        if store is not None:
            store.close()
        if sharding is not None:
            sharding.close()
        end_run(accelerator, partial_type)


def _start_trackers(accelerator, describe: str, settings: TrainSettings, directory: Path, *,
                    resumed_at: int | None) -> None:
    """Start the ``report_to`` trackers, logging under ``directory`` (``OUT.partial/runs``). A resumed
    run hides TensorBoard's events logged after the saved state: they are logged again."""
    from accelerate.tracking import LOGGER_TYPE_TO_CLASS

    options: dict[str, dict[str, Any]] = {"wandb": {"dir": str(directory)}, "mlflow": {"logging_dir": str(directory)}}
    if resumed_at is not None:
        options["tensorboard"] = {"purge_step": resumed_at + 1}
    if accelerator.is_main_process:
        directory.mkdir(parents=True, exist_ok=True)
    config = {k: (",".join(v) if isinstance(v, tuple) else v) for k, v in asdict(settings).items()}
    # one by one (as Accelerate's init_trackers would start them all), so that a failure names its tracker
    for name in settings.report_to or ():
        kind, kwargs = LOGGER_TYPE_TO_CLASS[name], options.get(name, {})
        try:
            tracker = (kind(describe, accelerator.logging_dir, **kwargs) if kind.requires_logging_directory
                       else kind(describe, **kwargs))
            tracker.start()
            if name != "tensorboard":  # TensorBoard's hyperparameters make a directory per call
                tracker.store_init_configuration(config)
        except Exception as exc:  # a tracker's own errors (a broken install, no login, no network) share no class
            _finish_trackers(accelerator)
            text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            raise GhostifyError(f"--report-to {name}: the tracker did not start ({type(exc).__name__}: {text}); fix "
                                f"its installation or set-up (pip install --force-reinstall {TRACKERS[name]}), or "
                                f"leave {name} out of --report-to") from exc
        accelerator.trackers.append(tracker)


def _tracker_values(record: dict[str, Any]) -> dict[str, float]:
    """A metrics.jsonl record as tracker scalars: ``train/loss``, ``train/lr``, ... and ``eval/accuracy``, ..."""
    if "eval" in record:
        return {f"eval/{k}": v for k, v in record["eval"].items() if isinstance(v, (int, float))}
    return {f"train/{k}": v for k, v in record.items() if k not in ("step", "epoch") and isinstance(v, (int, float))}


def _finish_trackers(accelerator) -> None:
    for tracker in accelerator.trackers:
        tracker.finish()
    accelerator.trackers.clear()  # end_training would finish them again


def _against_baseline(evaluation: Evaluation | None, best: float | None, settings: TrainSettings) -> dict[str, Any] | None:
    """The best evaluation against a constant prediction (``training.json``'s ``constant_baseline``),
    with one warning when it is no better: the model learned nothing worth building on."""
    if evaluation is None or evaluation.baseline is None or best is None:
        return None
    baseline = evaluation.baseline()
    if baseline is None:
        return None
    compared = baseline.compare(best)
    if not compared["beats"]:
        warnings.warn(
            f"the best {baseline.metric} {best:.4f} is no better than {baseline.what} ({baseline.value:.4f} on "
            f"{baseline.samples} validation examples): the model learned nothing useful; try a larger "
            f"--learning-rate (now {settings.learning_rate:g}) or more --epochs (now {settings.epochs})",
            stacklevel=3)
    return compared


def _resumes(work: Path, output: Path, fingerprint: dict, *, resume: bool, overwrite: bool, engine: str,
             processes: int) -> bool:
    """True when resuming the saved state (which ``engine`` on ``processes`` can read back)."""
    resuming = _resume_decision(work, output, fingerprint, resume=resume, overwrite=overwrite)
    if resuming:
        _check_same_engine(work, engine, processes)
    return resuming


def _resume_decision(work: Path, output: Path, fingerprint: dict, *, resume: bool, overwrite: bool) -> bool:
    """Decide between a fresh start and resuming (reads only); True when resuming."""
    state = work / "state" / "progress.json"
    if output.exists() and not overwrite:
        raise GhostifyError(f"output directory {output} already exists; pass --overwrite to replace it or choose another -o")
    if work.exists():
        if resume and state.is_file():
            try:
                saved = json.loads((work / "run.json").read_text()) if (work / "run.json").is_file() else None
            except (OSError, UnicodeDecodeError, ValueError) as exc:
                if overwrite:
                    return False  # what was interrupted here is unknown: start over
                raise damaged_state(work / "run.json", f"is not readable JSON ({type(exc).__name__}: {exc})") from None
            if saved != json.loads(json.dumps(fingerprint)):
                if overwrite:
                    return False  # another run was interrupted here: start over
                changed = _changed_settings(saved, fingerprint)
                raise GhostifyError(
                    f"{work} holds an interrupted run with other settings or inputs{changed}; resume it with the "
                    "same settings, or pass --overwrite to start over"
                )
            return True
        if not (resume or overwrite):
            raise GhostifyError(
                f"{work} holds an interrupted run; pass --resume to continue it or --overwrite to start over"
            )
    return False


def _check_same_engine(work: Path, engine: str, processes: int) -> None:
    """A training state is read back by the engine that wrote it: FSDP2's and DeepSpeed's shards by as
    many processes (a state saved before the file was kept was data parallel)."""
    saved = _saved_engine(work / "state" / ENGINE_FILE)
    sharded = {engine, saved["engine"]} - {"one process", "data parallel", None}
    if not sharded:
        return
    if saved["engine"] != engine or saved["processes"] != processes:
        before = f"{saved['engine'] or 'data parallel'} on {saved['processes'] or 'an unrecorded number of'} processes"
        raise GhostifyError(f"{work} holds a training state saved by {before}; this launch is {engine} on {processes} "
                            "processes: resume with the same accelerate config and --num_processes, or pass "
                            "--overwrite to start over")


def _load_state(accelerator, work: Path) -> None:
    """Read the saved state back (and check the best checkpoint, which the output is written from at the end),
    refused in one line where a file of it is damaged or missing."""
    best = work / "best" / WEIGHTS_NAME
    if best.is_file():
        try:
            check_safetensors(best)
        except GhostifyError:
            raise damaged_state(best, "is empty, truncated or damaged") from None
    try:
        accelerator.load_state(str(work / "state"))
    except Exception as exc:  # whatever a damaged or missing file raises: safetensors, torch's reader, the OS
        text = str(exc).strip().splitlines()
        raise damaged_state(work / "state", f"cannot be read back ({type(exc).__name__}: {text[0] if text else ''})") \
            from exc


def _saved_engine(path: Path) -> dict[str, Any]:
    """``engine.json`` of a saved training state (no file: a data-parallel state of an older ghostify), refused in
    one line where it is damaged: which engine wrote the state's shards is then unknown."""
    if not path.is_file():
        return {"engine": None, "processes": None}
    try:
        saved = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        problem = f"is not readable JSON ({type(exc).__name__}: {exc})"
    else:
        engine, processes = (saved.get("engine"), saved.get("processes")) if isinstance(saved, dict) else (None, None)
        if isinstance(engine, str) and isinstance(processes, int) and not isinstance(processes, bool) and processes > 0:
            return {"engine": engine, "processes": processes}
        problem = f"holds {json.dumps(saved)[:200]}, not the engine and process count that saved the state"
    raise damaged_state(path, problem)


def _changed_settings(saved: dict[str, Any] | None, fingerprint: dict[str, Any]) -> str:
    """The training settings that differ from the interrupted run's, as flags (" (--x was 1, now 2)")."""
    before, now = (saved or {}).get("settings") or {}, fingerprint["settings"]
    def shown(value: Any) -> str:
        return "unset" if value is None else str(value)

    changed = [f"--{name.replace('_', '-')} was {shown(before[name])}, now {shown(value)}"
               for name, value in now.items() if name in before and before[name] != value]
    return f" ({'; '.join(changed)})" if changed else ""


#: which engine and how many processes saved a training state: a sharded state resumes only under both
ENGINE_FILE = "engine.json"


def _save_state(accelerator, work: Path, progress: Progress, engine: str) -> None:
    """Save the full training state atomically: a crash mid-save keeps the previous one. Under FSDP or
    DeepSpeed every process writes its own shards into it (a run over several machines needs a
    directory they share)."""
    tmp = work / "state.tmp"
    if accelerator.is_main_process:
        shutil.rmtree(tmp, ignore_errors=True)
    accelerator.wait_for_everyone()
    accelerator.save_state(str(tmp))
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        (tmp / ENGINE_FILE).write_text(json.dumps({"engine": engine, "processes": accelerator.num_processes}))
        (tmp / "progress.json").write_text(json.dumps(asdict(progress)))
        old = work / "state.old"
        shutil.rmtree(old, ignore_errors=True)
        if (work / "state").exists():
            os.replace(work / "state", old)
        os.replace(tmp, work / "state")
        shutil.rmtree(old, ignore_errors=True)
    accelerator.wait_for_everyone()


def _link_or_copy(source: str, destination: str) -> None:
    try:
        os.link(source, destination)
    except OSError:
        shutil.copy2(source, destination)


def _keep_lines(path: Path, count: int) -> None:
    """Keep the first ``count`` lines of ``path`` (replaced in one rename)."""
    if not path.is_file():
        return
    lines = path.read_text().splitlines(keepends=True)
    if len(lines) > count:
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text("".join(lines[:count]))
        os.replace(tmp, path)


def _replace_dir(path: Path, write: Callable[[Path], None]) -> None:
    with atomic_directory(path, overwrite=True) as tmp:
        write(tmp)


def _stop_if_not_finite(accelerator, loss: torch.Tensor, progress: Progress, work: Path) -> None:
    finite = torch.isfinite(loss.detach()).to(torch.float32).reshape(1)
    if accelerator.num_processes > 1:
        finite = accelerator.gather(finite).min().reshape(1)
    if finite.item() < 1:
        raise GhostifyError(
            f"the loss became {float(loss.detach()):g} at step {progress.step + 1}; the last good state is kept in {work} "
            "(lower --learning-rate or use --mixed-precision no, then rerun with --resume)"
        )


@torch.no_grad()
def evaluate(model: nn.Module, loader, accelerator, metric: str, regression: bool) -> dict[str, float]:
    """Classification metrics of ``model`` over ``loader``, gathered across processes without duplicates."""
    was_training = model.training
    model.eval()
    predictions, labels = [], []
    for batch in loader:
        batch = dict(batch)
        target = batch.pop("labels")
        logits = model(**batch).logits
        prediction = logits.squeeze(-1).float() if regression else logits.argmax(-1)
        prediction, target = accelerator.gather_for_metrics((prediction, target))
        predictions.append(prediction.cpu())
        labels.append(target.cpu())
    model.train(was_training)
    if not predictions:
        return {}
    result = compute_metrics(metric, torch.cat(predictions), torch.cat(labels))
    result["samples"] = int(sum(len(p) for p in predictions))
    return result
