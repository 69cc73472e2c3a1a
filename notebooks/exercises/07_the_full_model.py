"""Chapter 07 exercises (The full model): fill in each function.

Grade your answers from the repository's root with
    make exercises CHAPTER=07
or  python -m annotated_transformer.exercises 07
"""

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
    raise NotImplementedError


def encoder_layer(x: Tensor, layer: nn.TransformerEncoderLayer) -> Tensor:
    """One pre-norm encoder layer, from the parts of PyTorch's layer.

    x: (batch, len, d_model); layer: built with norm_first=True,
    batch_first=True, dropout 0 and ReLU; use its self_attn, linear1, linear2,
    norm1 and norm2
    returns what layer(x) returns
    """
    raise NotImplementedError


def tied_parameter_count(vocab: int, N: int, d_model: int, d_ff: int) -> int:
    """make_model's size when its embeddings and generator share one table.

    One joint vocabulary of ``vocab`` tokens; tie_weights(model,
    share_source=True) makes the source embeddings, the target embeddings and
    the generator's weight one (vocab, d_model) matrix. The generator keeps
    its bias.
    """
    raise NotImplementedError
