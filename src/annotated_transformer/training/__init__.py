"""Layer 3, training: what turns a model and batches into trained weights.
``trainer`` (the optimiser, one loop for every task), ``precision`` (bf16/fp16,
decided once), ``loss`` (label smoothing, the losses the loop calls),
``schedules`` (learning rates), ``checkpoints``, ``published`` (a run record's
weights, read as a checkpoint is), ``distributed`` (data-parallel processes),
``memory`` (a training step's memory, estimated and measured) and ``progress``
(progress bars). It may import models, data, blocks and layer 0, never
evaluation, tasks or anything above; see ``tests/test_layout.py``.
"""
