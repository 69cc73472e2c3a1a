"""Layer 1, the building blocks: the parts every Transformer here is assembled
from, each a function or an ``nn.Module`` that knows nothing of whole models,
data or training. Attention (``attention``: scaled dot-product and multi-head;
``grouped_query_attention``, ``relative_attention``, ``sparse_attention``),
positions (``positional``, ``rope``, ``alibi``), ``masks``, ``embeddings``,
``norms``, ``feed_forward``, the key/value caches of generation (``kv_cache``)
and ``layers`` (residual sublayers, the encoder and decoder layers and stacks,
the decoder-only block). Besides torch and each other, its modules may import
only layer 0 (``paths``, ``files``); see ``tests/test_layout.py``.
"""
