"""Sharded training under ``accelerate launch --config_file``: FSDP2 and DeepSpeed ZeRO.

Data parallelism keeps a whole copy of the student, its gradients and AdamW's two moments in every
process, and of the teacher. An Accelerate config with FSDP2 or DeepSpeed shards them instead; this
module is what ghostify's loop adds so that its training commands run that way:

- which engine the launch asks for, and one-line refusals for what ghostify cannot honour (FSDP1,
  FSDP activation checkpointing or RAM-efficient loading, a DeepSpeed config with its own optimizer);
- ``GHOSTIFY_SHARDED_CPU=1``: on a machine without CUDA, Accelerate sets up FSDP only for accelerators
  (a stock launch silently trains an unsharded copy per process) and DeepSpeed only with their
  backends; the setting shards over the CPU processes instead (gloo), for tests and for trying a
  config. Without it such a launch is refused, and with it on a machine with CUDA too;
- the student's FSDP units (every encoder layer; the rest of the student and the objective's own
  layers are the root's), DeepSpeed's batch, accumulation and clipping keys from ghostify's flags;
- the teacher sharded for inference (FSDP2 units, or a DeepSpeed ZeRO-3 engine without optimizer);
- the trained weights gathered for ghostify's checkpoint: the main process receives every full
  tensor (under DeepSpeed the fp32 master weights, not the 16-bit copies) and writes them once;
- one process group for the whole launch: a recipe (``ghostify run``) trains several stages in one
  launch, so a run leaves the group up (it is closed at exit) and resets Accelerate's state.
"""

from __future__ import annotations

import atexit
import contextlib
import copy
import os
import warnings
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import torch
from torch import nn

from ..architectures import get_adapter
from ..console import launched_processes
from ..errors import GhostifyError

#: the explicit setting that shards on the CPU processes of a machine without CUDA (documented in
#: docs/guides/distributed.md); never applied on a machine with CUDA
SHARDED_CPU = "GHOSTIFY_SHARDED_CPU"

FSDP = "fsdp"
DEEPSPEED = "deepspeed"

#: what the engines need installed
INSTALL_DEEPSPEED = "pip install 'ghostify[distributed]'"

_closing_registered = False  # the exit hook that closes the launch's process group


def _flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def launched_engine() -> str | None:
    """The sharding engine the ``accelerate launch`` config asks for (``"fsdp"``, ``"deepspeed"``),
    read from the environment the launcher sets; None for data parallelism or one process."""
    if _flag("ACCELERATE_USE_FSDP"):
        return FSDP
    if _flag("ACCELERATE_USE_DEEPSPEED"):
        return DEEPSPEED
    return None


def multi_process_on_cpu() -> bool:
    """Accelerate only sets up CPU data parallelism (gloo) when asked to use the CPU: do so when
    several processes were launched on a machine without CUDA."""
    return launched_processes() > 1 and not torch.cuda.is_available()


def accelerator_options() -> dict[str, Any]:
    """``Accelerator``'s ``cpu`` and extra ``kwargs_handlers`` for this launch, with its process
    group started (the same one for every run of the launch). With ``GHOSTIFY_SHARDED_CPU=1`` on a
    machine without CUDA this is also where FSDP is forced over the CPU processes."""
    from accelerate.state import PartialState
    from accelerate.utils import DistributedType, InitProcessGroupKwargs

    engine = launched_engine()
    cuda = torch.cuda.is_available()
    if not cuda:  # DeepSpeed (imported by Accelerate wherever installed) would warn that it found no GPU
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
    if engine is None:
        options: dict[str, Any] = {"cpu": multi_process_on_cpu(), "kwargs_handlers": []}
    else:
        if _flag(SHARDED_CPU) and cuda:
            raise GhostifyError(f"{SHARDED_CPU}=1 shards on the CPU processes of a machine without CUDA, and this "
                                f"machine has CUDA: unset {SHARDED_CPU} to shard over the GPUs")
        if not cuda and not _flag(SHARDED_CPU):
            config = "an FSDP" if engine == FSDP else "a DeepSpeed"
            raise GhostifyError(f"accelerate launch with {config} config on a machine without CUDA: Accelerate would "
                                f"train an unsharded copy in every process; set {SHARDED_CPU}=1 to shard over the CPU "
                                "processes (gloo; slow, for tests and trying a config), or launch with --multi_gpu "
                                "for data parallelism")
        if engine == FSDP:  # before Accelerate reads the config (FSDP1's plugin fails first on a machine without CUDA)
            _check_fsdp_version(os.environ.get("FSDP_VERSION", "1"))
        if engine == DEEPSPEED:
            try:
                import deepspeed  # noqa: F401
            except ImportError as exc:
                raise GhostifyError(f"the launch config uses DeepSpeed, which is not installed ({exc}); "
                                    f"{INSTALL_DEEPSPEED}") from None
        # DeepSpeed takes Accelerate's accelerator path (cpu=False) with gloo in place of its GPU backend;
        # FSDP on the CPU starts a CPU (gloo) group, then is forced below
        handlers = [InitProcessGroupKwargs(backend="gloo")] if engine == DEEPSPEED and not cuda else []
        options = {"cpu": engine == FSDP and not cuda, "kwargs_handlers": handlers}
    kwargs = options["kwargs_handlers"][0].to_kwargs() if options["kwargs_handlers"] else {}
    state = PartialState(options["cpu"], **kwargs)
    global _closing_registered
    if state.num_processes > 1 and not _closing_registered:
        atexit.register(_close_process_group)
        _closing_registered = True
    if engine == FSDP and not cuda:
        # Accelerate turns FSDP on only from an accelerator's data-parallel type: the CPU group is
        # given that type, so that the Accelerator built next shards (its device stays the CPU)
        PartialState._shared_state["distributed_type"] = DistributedType.MULTI_GPU
    options["partial_type"] = PartialState._shared_state.get("distributed_type")
    return options


def _check_fsdp_version(version: object) -> None:
    """ghostify shards with FSDP2 only (``version``: the launch config's ``fsdp_version``, 1 where it names none)."""
    if str(version).strip() != "2":
        raise GhostifyError(f"the launch config uses FSDP version {version}; ghostify shards with FSDP2 "
                            "(per-parameter sharding, frozen and trainable weights in one layer): set fsdp_version: 2 "
                            "in its fsdp_config")


def _close_process_group() -> None:
    """At exit: the process group of the launch, left up between runs, is closed once."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        with contextlib.suppress(Exception):
            torch.distributed.destroy_process_group()


def make_accelerator(**kwargs: Any):
    """An ``Accelerator`` for one run of this launch (``kwargs``: its other arguments), on the
    launch's process group, and what :func:`end_run` needs to undo after it. Accelerate's refusals of
    the launch config (a ``ValueError``: a key that conflicts with another, say) become one line."""
    from accelerate import Accelerator

    options = accelerator_options()
    handlers = [*kwargs.pop("kwargs_handlers", []), *options["kwargs_handlers"]]
    try:
        accelerator = Accelerator(cpu=options["cpu"], kwargs_handlers=handlers, **kwargs)
    except ValueError as exc:
        text = " ".join(str(exc).split())
        raise GhostifyError(f"Accelerate refused the launch config: {text}") from exc
    return accelerator, options["partial_type"]


def start_processes() -> None:
    """Start the launch's process group (a no-op outside a multi-process launch): ``ghostify run``
    calls it before its first stage, so that stages which run on the main process only can be waited
    for by the others."""
    if launched_processes() > 1:
        accelerator_options()


T = TypeVar("T")


def on_main_process(work: Callable[[], T]) -> T:
    """``work()`` run by the main process alone, the others waiting; every process of a launch gets
    its answer, or its refusal (a ``GhostifyError``, raised in every process, so that none waits
    forever for the others).

    What chooses whether a collective runs (gathering the weights, loading a sharded state) must be
    the same in every process. Each process reading the file system on its own races with the main
    process's writes: a run hung at its end when the other process found ``OUT.partial/best``
    already removed and entered a gather the main process never joined."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return work()
    answer: list[Any] = [None, None]  # the answer, or the refusal's message
    refusal: GhostifyError | None = None
    if dist.get_rank() == 0:
        try:
            answer[0] = work()
        except GhostifyError as exc:
            refusal, answer[1] = exc, str(exc)
    dist.broadcast_object_list(answer, src=0)
    if refusal is not None:
        raise refusal
    if answer[1] is not None:
        raise GhostifyError(answer[1])
    return answer[0]


def end_run(accelerator, partial_type: Any) -> None:
    """After a run: finish the trackers and forget Accelerate's per-run state (its engine plugins, the
    mixed precision), so that the next run of this launch (a recipe's next stage) builds its own. The
    process group stays up for that run; it is closed at exit."""
    from accelerate.state import AcceleratorState, GradientState, PartialState

    for tracker in accelerator.trackers:
        tracker.finish()
    accelerator.trackers.clear()
    if accelerator.device.type != "cpu" or getattr(accelerator, "deepspeed_engine_wrapped", None) is not None:
        # a GPU's cached blocks and a DeepSpeed engine are released before the next run of this launch builds its
        # own; on a CPU the run's objects leave with this run's Accelerator, and the full garbage collection
        # free_memory starts (a tenth of a second per run, seconds in a long-lived process) frees nothing more
        accelerator.free_memory()
    AcceleratorState._reset_state()
    GradientState._reset_state()
    if PartialState._shared_state and partial_type is not None:
        PartialState._shared_state["distributed_type"] = partial_type


class Sharding:
    """What the launch's engine changes in one training run; nothing under data parallelism."""

    def __init__(self, accelerator) -> None:
        from accelerate.utils import DistributedType

        self.accelerator = accelerator
        kind = accelerator.distributed_type
        self.engine = FSDP if kind == DistributedType.FSDP else DEEPSPEED if kind == DistributedType.DEEPSPEED else None
        self._teacher_engine = None
        self._dtypes: dict[str, torch.dtype] = {}
        if self.engine == FSDP:
            self._check_fsdp()
        elif self.engine == DEEPSPEED:
            self._check_deepspeed()

    # ---- what the run records ---------------------------------------------------------------------
    @property
    def name(self) -> str:
        """The engine as ``training.json`` and the summary name it."""
        if self.engine == FSDP:
            return "FSDP2"
        if self.engine == DEEPSPEED:
            return f"DeepSpeed ZeRO-{self._zero_stage()}"
        return "data parallel" if self.accelerator.num_processes > 1 else "one process"

    @property
    def sharded(self) -> bool:
        return self.engine is not None

    def _zero_stage(self) -> int:
        return int(self._ds_config().get("zero_optimization", {}).get("stage", 0))

    def _ds_config(self) -> dict[str, Any]:
        return self.accelerator.state.deepspeed_plugin.deepspeed_config

    # ---- refusals ---------------------------------------------------------------------------------
    def _check_fsdp(self) -> None:
        plugin = self.accelerator.state.fsdp_plugin
        _check_fsdp_version(plugin.fsdp_version)
        if plugin.activation_checkpointing:
            raise GhostifyError("fsdp_activation_checkpointing: true is not supported (ghostify's capture hooks read "
                                "each layer's activations); set it to false, and lower the memory of activations "
                                "with a smaller --batch-size and --gradient-accumulation-steps")
        if plugin.cpu_ram_efficient_loading:
            raise GhostifyError("fsdp_cpu_ram_efficient_loading: true is not supported (every process builds the "
                                "model from ghostify's checkpoint before it is sharded); set it to false")

    def _check_deepspeed(self) -> None:
        config = self._ds_config()
        for key in ("optimizer", "scheduler"):
            if key in config:
                raise GhostifyError(f"the DeepSpeed config names its own {key!r}; ghostify trains with its AdamW and "
                                    "linear schedule (--learning-rate, --weight-decay, --warmup-ratio, "
                                    f"--ghost-learning-rate): remove {key!r} from the DeepSpeed config")
        # DeepSpeed calls the collectives torch 2.13 renamed: their deprecation says nothing to a user
        warnings.filterwarnings("ignore", message=r"`torch\.distributed\.\w+` is deprecated", category=FutureWarning)
        # transformers builds models partitioned (zero.Init) while a ZeRO-3 config is registered with it:
        # ghostify builds every model itself, before training, and edits whole tensors (restoring a pruned
        # or ghosted structure, writing the model card), so nothing of it must be partitioned at build time
        from transformers.integrations import unset_hf_deepspeed_config

        unset_hf_deepspeed_config()

    # ---- before ``accelerator.prepare`` -----------------------------------------------------------
    def prepare_student(self, objective: nn.Module, *, micro: int, accumulation: int, max_grad_norm: float) -> None:
        """Set the engine up for the student: FSDP2 units, DeepSpeed's keys from ghostify's flags."""
        self._dtypes = {name: t.dtype for name, t in objective.state_dict().items()}
        if self.engine == FSDP:
            self._wrap_layers(objective.student)
        elif self.engine == DEEPSPEED:
            self._configure_deepspeed(objective.student, micro=micro, accumulation=accumulation,
                                      max_grad_norm=max_grad_norm)

    def _wrap_layers(self, student: nn.Module) -> None:
        """Every encoder layer of the student is an FSDP unit (its weights gathered only while it runs);
        the rest (embeddings, task head, the objective's projections) belongs to the root unit. The
        config's class list may name those layers; the student's other modules stay in the root, so
        that its class (written in the checkpoint) stays the one it was."""
        from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy

        plugin = self.accelerator.state.fsdp_plugin
        layers = sorted({type(layer).__name__ for layer in get_adapter(student.config).layers(student)})
        named = plugin.transformer_cls_names_to_wrap or []
        other = sorted(set(named) - set(layers))
        if other:
            raise GhostifyError(f"the FSDP config wraps {', '.join(other)}; ghostify makes every encoder layer of "
                                f"the student ({', '.join(layers)}) a unit itself: remove "
                                "fsdp_transformer_layer_cls_to_wrap from the config or name only those")
        plugin.auto_wrap_policy = transformer_auto_wrap_policy
        plugin.transformer_cls_names_to_wrap = layers

    def _configure_deepspeed(self, student: nn.Module, *, micro: int, accumulation: int, max_grad_norm: float) -> None:
        """DeepSpeed's batch, accumulation and clipping keys are ghostify's flags (``auto`` is filled;
        a different number in the config is replaced, with a warning); the bucket sizes left ``auto``
        come from the student's hidden size, as Accelerate sets them for a transformers model."""
        config = self._ds_config()
        world = self.accelerator.num_processes
        ours = {"train_micro_batch_size_per_gpu": micro, "gradient_accumulation_steps": accumulation,
                "train_batch_size": micro * accumulation * world, "gradient_clipping": float(max_grad_norm)}
        flags = {"train_micro_batch_size_per_gpu": "--batch-size", "train_batch_size": "--batch-size",
                 "gradient_accumulation_steps": "--gradient-accumulation-steps", "gradient_clipping": "--max-grad-norm"}
        for key, value in ours.items():
            given = config.get(key, "auto")
            if given != "auto" and float(given) != float(value) and self.accelerator.is_main_process:
                warnings.warn(f"the DeepSpeed config's {key} {given} is replaced by {value}, from {flags[key]}",
                              stacklevel=3)
            config[key] = value
        hidden = get_adapter(student.config).hidden_size(student.config)
        zero = config.setdefault("zero_optimization", {})
        for key, value in (("reduce_bucket_size", hidden * hidden),
                           ("stage3_prefetch_bucket_size", int(0.9 * hidden * hidden)),
                           ("stage3_param_persistence_threshold", 10 * hidden)):
            if zero.get(key) == "auto":
                zero[key] = value

    # ---- after ``accelerator.prepare`` ------------------------------------------------------------
    def place_teacher(self, objective: nn.Module) -> None:
        """Shard the objective's teacher for inference: FSDP2 units (each layer, then the whole), or a
        DeepSpeed ZeRO-3 engine without optimizer. Under ZeRO-1/2 (which shard no weights) and data
        parallelism the teacher stays whole, moved to the device at its first forward."""
        teacher = objective.teacher
        if teacher is None or not self.sharded:
            return
        teacher.eval().requires_grad_(False)
        if self.engine == FSDP:
            from torch.distributed.fsdp import fully_shard

            options = self._fsdp_options()
            for layer in get_adapter(teacher.config).layers(teacher):
                fully_shard(layer, **options)
            fully_shard(teacher, **options)
        elif self._zero_stage() == 3:
            import deepspeed

            config = copy.deepcopy(self.accelerator.deepspeed_config)
            for key in ("optimizer", "scheduler"):
                config.pop(key, None)
            config["zero_optimization"].pop("offload_optimizer", None)
            self._teacher_engine, *_ = deepspeed.initialize(model=teacher, config=config)
        else:
            return
        objective.teacher_placed = True

    def _fsdp_options(self) -> dict[str, Any]:
        """``fully_shard``'s options from the config, as Accelerate gives its own units."""
        from torch.distributed.fsdp import MixedPrecisionPolicy

        plugin = self.accelerator.state.fsdp_plugin
        return {"reshard_after_forward": plugin.reshard_after_forward, "offload_policy": plugin.cpu_offload,
                "mp_policy": plugin.mixed_precision_policy or MixedPrecisionPolicy()}

    @contextlib.contextmanager
    def whole_student(self, objective: nn.Module) -> Iterator[None]:
        """While the student runs on its own (evaluation), outside the objective's forward: under FSDP2
        the root unit's weights (embeddings, task head) are gathered first, and sharded again after."""
        if self.engine != FSDP:
            yield
            return
        objective.unshard()
        try:
            yield
        finally:
            objective.reshard()

    # ---- the checkpoint ---------------------------------------------------------------------------
    def gather(self, objective: nn.Module) -> dict[str, torch.Tensor] | None:
        """The objective's full state (its ``state_dict`` keys, in the dtypes it had before training) on
        the main process, None on the others; every process must call it. None everywhere when nothing
        is sharded (the model's own tensors are written then)."""
        if not self.sharded:
            return None
        if self.engine == FSDP:
            state = self.accelerator.get_state_dict(objective)
        else:
            state = self._deepspeed_state(self.accelerator.unwrap_model(objective))
        if not self.accelerator.is_main_process:
            return None
        return {k: v.detach().to("cpu", self._dtypes.get(k, v.dtype)).contiguous() for k, v in state.items()}

    def _deepspeed_state(self, module: nn.Module) -> dict[str, torch.Tensor]:
        """Every tensor of ``module`` whole: a trained weight's fp32 master copy (the optimizer's, which
        16-bit training keeps apart from the weights the forward uses), a frozen one gathered from its
        partitions, the buffers as they are. One collective per weight, in the same order everywhere."""
        import deepspeed
        from deepspeed.utils import safe_get_full_fp32_param

        main = self.accelerator.is_main_process
        weights = dict(module.named_parameters(remove_duplicate=False))
        gathered: dict[int, torch.Tensor | None] = {}
        state: dict[str, torch.Tensor] = {}
        for name in module.state_dict():
            weight = weights.get(name)
            if weight is None:
                if main:
                    state[name] = module.get_buffer(name)
                continue
            if id(weight) not in gathered:  # a tied weight is gathered once
                full = safe_get_full_fp32_param(weight) if weight.requires_grad else None
                if full is None:
                    with deepspeed.zero.GatheredParameters([weight], modifier_rank=None):
                        full = weight.detach().clone()
                gathered[id(weight)] = full.cpu() if main else None
            if main:
                state[name] = gathered[id(weight)]
        return state

    def close(self) -> None:
        if self._teacher_engine is not None:
            self._teacher_engine.destroy()
            self._teacher_engine = None


def split_state(state: dict[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    """The tensors of ``state`` under ``prefix.``, named without it (the student's from the objective's)."""
    start = prefix + "."
    return {k[len(start):]: v for k, v in state.items() if k.startswith(start)}
