"""The tasks the runner trains, and their presets: one
registry, ``PRESETS[task][name]``.

Each preset is a config dataclass (a task's fields plus the shared
:class:`~annotated_transformer.tasks.base.TrainConfig`); change one value with
``--set KEY=VALUE`` on the command line, or ``dataclasses.replace`` in Python.

Beside them, :mod:`~annotated_transformer.tasks.bag_of_words`: chapter 16's
baseline, a whole experiment of its own that the runner does not train.
"""

from annotated_transformer.tasks import classification, lm, mlm, translation
from annotated_transformer.tasks.base import Task, TrainConfig

TASKS: dict[str, type[Task]] = {
    "translate": translation.Translation,
    "classify": classification.Classification,
    "lm": lm.LanguageModel,
    "mlm": mlm.MaskedLM,
}

PRESETS = {
    "translate": translation.PRESETS,
    "classify": classification.PRESETS,
    "lm": lm.PRESETS,
    "mlm": mlm.PRESETS,
}

__all__ = ["PRESETS", "TASKS", "Task", "TrainConfig"]
