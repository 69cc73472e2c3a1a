"""Reference solutions of chapter 07's exercises."""

import torch
from torch import Tensor, nn


def feed_forward(
    x: Tensor,
    W_1: Tensor,
    b_1: Tensor,
    W_2: Tensor,
    b_2: Tensor,
) -> Tensor:
    """The position-wise feed-forward network: max(0, x W_1 + b_1) W_2 + b_2.

    x: (batch, len, d_model); W_1: (d_model, d_ff); b_1: (d_ff,);
    W_2: (d_ff, d_model); b_2: (d_model,) -> (batch, len, d_model)
    """
    return torch.relu(x @ W_1 + b_1) @ W_2 + b_2


def encoder_layer(x: Tensor, layer: nn.TransformerEncoderLayer) -> Tensor:
    """One pre-norm encoder layer, from the parts of PyTorch's layer.

    x: (batch, len, d_model); layer: built with norm_first=True,
    batch_first=True, dropout 0 and ReLU; use its self_attn, linear1, linear2,
    norm1 and norm2
    returns what layer(x) returns
    """
    z = layer.norm1(x)
    x = x + layer.self_attn(z, z, z, need_weights=False)[0]
    z = layer.norm2(x)
    return x + layer.linear2(torch.relu(layer.linear1(z)))


def tied_parameter_count(vocab: int, N: int, d_model: int, d_ff: int) -> int:
    """make_model's size when its embeddings and generator share one table.

    One joint vocabulary of ``vocab`` tokens; tie_weights(model,
    share_source=True) makes the source embeddings, the target embeddings and
    the generator's weight one (vocab, d_model) matrix. The generator keeps
    its bias.
    """
    d = d_model
    attention = 4 * (d * d + d)
    ffn = d * d_ff + d_ff + d_ff * d + d
    norm = 2 * d
    encoder = N * (attention + ffn + 2 * norm) + norm
    decoder = N * (2 * attention + ffn + 3 * norm) + norm
    return vocab * d + encoder + decoder + vocab
