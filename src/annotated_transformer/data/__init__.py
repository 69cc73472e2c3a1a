"""Layer 2, the data: from files to batches of ids, knowing nothing of models.
Verified downloads (``download``), the corpora (``multi30k``, ``imdb``,
``byte_corpora``: Tiny Shakespeare and enwik8), tokenizers (``bpe``,
``byte_bpe``), ``vocab``, BERT's token masking (``masking``), length-bucketed
or packed batches and their tensors with masks (``batching``) and the copy
task's random sequences (``copy_task``). Data may import blocks (their masks
and checks of token ids) and layer 0 (``paths``, ``files``), never models (its
sibling at layer 2) nor anything above; see ``tests/test_layout.py``.
"""
