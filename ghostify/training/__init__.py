"""The training half: one Accelerate loop, objectives, losses, metrics, layer maps."""

from .loop import Evaluation, TrainResult, TrainSettings, train
from .objectives import DistillObjective, DistillWeights, FinetuneObjective

__all__ = ["DistillObjective", "DistillWeights", "Evaluation", "FinetuneObjective", "TrainResult", "TrainSettings", "train"]
