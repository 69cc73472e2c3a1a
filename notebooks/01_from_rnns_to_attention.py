# %% [markdown]
# # From RNNs to attention
#
# Smoke test: $\mathrm{softmax}(QK^\top/\sqrt{d_k})V$.
#
# $$\mathrm{Attention}(Q,K,V) = \mathrm{softmax}\left(\frac{QK^\top}{\sqrt{d_k}}\right)V$$

# %%
import torch

from annotated_transformer import viz
from annotated_transformer.attention import attention
from annotated_transformer.source import show_source

show_source(attention)

# %%
torch.manual_seed(0)
q = torch.randn(5, 4)
_, w = attention(q, q, q)
viz.heatmap(w, list("abcde"), list("abcde"), title="Weights", x_title="key", y_title="query")
