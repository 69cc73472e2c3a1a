"""Layer 2, the data: from files to batches of ids, knowing nothing of models.
Verified downloads (``download``), the corpora (``multi30k``, ``imdb``,
``byte_corpora``: Tiny Shakespeare and enwik8), tokenizers (``bpe``,
``byte_bpe``), ``vocab``, BERT's token masking (``masking``) and length-bucketed
or packed batches (``batching``). Data imports layer 0 only (``paths``,
``files``), never models (its sibling at layer 2) nor anything above; see
``tests/test_layout.py``.
"""
