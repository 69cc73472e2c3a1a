"""Layer 2, the models: whole networks assembled from the blocks, each with its
constructor and parameter counts. The paper's encoder-decoder
(``encoder_decoder``), decoder-only language models (``decoder_only``;
``modern_decoder``, the Llama-style one; ``gpt2`` with ``gpt2_weights``, its
published checkpoints; ``transformer_xl``), encoder-only models
(``encoder_only``: a classifier and BERT's masked language model), and
``eval_mode``, the eval mode every evaluation runs in. Models may import blocks and
layer 0 only, never data (their sibling at layer 2) nor anything above; see
``tests/test_layout.py``.
"""
