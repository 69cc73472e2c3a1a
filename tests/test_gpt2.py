"""GPT-2's recipe (gpt2.py), byte-level BPE (byte_bpe.py) and BPE bits
per byte (tasks/lm.py)."""

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from annotated_transformer.blocks.feed_forward import GELUFeedForward
from annotated_transformer.data.byte_bpe import ByteBPE
from annotated_transformer.models.gpt2 import GPT2LM, GPTConfig
from annotated_transformer.runner import PRESETS
from annotated_transformer.tasks.base import from_settings, with_settings
from annotated_transformer.tasks.lm import (
    LanguageModel,
    LanguageModelConfig,
    windowed_token_bits_per_byte,
)


def test_residual_projections_start_with_std_002_over_sqrt_2n():
    torch.manual_seed(0)
    N, d = 6, 256
    model = GPT2LM(GPTConfig(vocab=300, d_model=d, h=4, N=N, max_len=64))
    expected = 0.02 / math.sqrt(
        2 * N
    )  # GPT-2: 1/√(number of residual layers), 2 per block
    for block in model.blocks:
        for layer in (block.attention.w_o, block.feed_forward.w_2):
            assert layer.weight.std().item() == pytest.approx(expected, rel=0.02)
            assert layer.weight.mean().abs().item() < 0.1 * expected
        for layer in (
            block.attention.w_q,
            block.attention.w_k,
            block.feed_forward.w_1,
        ):
            assert layer.weight.std().item() == pytest.approx(0.02, rel=0.02)
        assert (
            not block.attention.w_o.bias.any()
            and not block.feed_forward.w_1.bias.any()
        )
    assert model.embed.weight.std().item() == pytest.approx(0.02, rel=0.02)
    assert model.position.embedding.weight.std().item() == pytest.approx(
        0.01, rel=0.02
    )
    assert torch.equal(model.norm.weight, torch.ones(d))


def test_input_and_output_embeddings_are_one_parameter():
    model = GPT2LM(GPTConfig(vocab=50, d_model=32, h=4, N=2, max_len=16))
    assert (
        model.to_logits.weight is model.embed.weight
        and model.to_logits.bias is None
    )
    names = [name for name, _ in model.named_parameters()]
    assert "to_logits.weight" not in names  # counted once
    x = torch.randint(0, 50, (2, 7))
    hidden = {}
    model.norm.register_forward_hook(lambda m, i, out: hidden.setdefault("h", out))
    logits = model(x)
    torch.testing.assert_close(logits, hidden["h"] @ model.embed.weight.T)


def test_gelu_feed_forward_equals_a_reference_built_from_nn_gelu():
    torch.manual_seed(0)
    ff = GELUFeedForward(16, 64, dropout=0.0)
    reference = nn.Sequential(
        nn.Linear(16, 64), nn.GELU(approximate="tanh"), nn.Linear(64, 16)
    )
    reference[0].load_state_dict(ff.w_1.state_dict())
    reference[2].load_state_dict(ff.w_2.state_dict())
    x = torch.randn(2, 5, 16)
    torch.testing.assert_close(ff(x), reference(x))
    model = GPT2LM(GPTConfig(vocab=20, d_model=16, h=2, N=2, max_len=8))
    assert all(isinstance(b.feed_forward, GELUFeedForward) for b in model.blocks)


def test_gpt2_blocks_are_pre_norm_layer_norm_with_biases():
    model = GPT2LM(GPTConfig(vocab=20, d_model=16, h=2, N=1, max_len=8))
    block = model.blocks[0]
    assert isinstance(block.norm1, nn.LayerNorm) and block.norm1.bias is not None
    assert (
        block.attention.kv_heads == block.attention.h
    )  # plain multi-head attention
    with pytest.raises(ValueError, match="learned positions"):
        model.extend_context(16)


def test_byte_bpe_learns_the_most_frequent_pair_first():
    bpe = ByteBPE.learn(b"ab ab ab", num_merges=5)
    # pieces "ab", " ab", " ab": (a, b) ×3 first, then (" ", "ab")
    # ×2; nothing else repeats
    assert bpe.merges == [("a", "b"), (" ", "ab")]
    assert bpe.vocab == 258
    assert bpe.encode(b"ab ab") == [256, 257] and bpe.encode(b"ba") == [
        ord("b"),
        ord("a"),
    ]
    assert bpe.token_bytes[[256, 257, 65]].tolist() == [2, 3, 1]


def test_byte_bpe_round_trips_any_bytes():
    text = "To be, or not to be: that is the question. Émigrés 🙂\n\tend".encode()
    bpe = ByteBPE.learn(text * 3, num_merges=40)
    weird = bytes(range(256)) + b"\xff\xfe not utf-8 \x80" + text
    for data in (text, weird, b"", b" "):
        ids = bpe.encode(data)
        assert bpe.decode(ids) == data
        assert int(bpe.token_bytes[ids].sum()) == len(data)
    assert ByteBPE.from_dict(bpe.to_dict()).encode(weird) == bpe.encode(weird)


class Bigram(nn.Module):
    """logits of the next token = a table row of the current token
    (a model with max_len)."""

    def __init__(self, vocab: int, max_len: int) -> None:
        super().__init__()
        self.table, self.max_len = nn.Embedding(vocab, vocab), max_len

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.table(x)


def test_token_bits_per_byte_is_total_bits_over_total_bytes():
    torch.manual_seed(0)
    vocab, n = 7, 60
    model, ids = Bigram(vocab, max_len=8), torch.randint(0, vocab, (n,))
    token_bytes = torch.tensor([1, 2, 3, 1, 4, 2, 5])
    bits = total_bytes = 0.0
    for t in range(
        1, n
    ):  # a bigram's context is one token: windows cannot change its bits
        p = F.softmax(model.table.weight[ids[t - 1]].double(), -1)[ids[t]]
        bits += -math.log2(p.item())
        total_bytes += token_bytes[ids[t]].item()
    bpb, scored, count = windowed_token_bits_per_byte(
        model, ids, token_bytes, stride=3
    )
    assert bpb == pytest.approx(bits / total_bytes, rel=1e-9)
    assert (scored, count) == (total_bytes, n - 1)


def bpe_task(**changes) -> LanguageModel:
    settings = {"tokens": "bpe", "bpe_merges": 30, "block": "gpt2", **changes}
    config = with_settings(PRESETS["lm"]["tiny"], settings)
    task = LanguageModel(config)
    text = b"the cat sat on the mat. the dog sat on the log. " * 40
    task.splits = {
        "train": torch.tensor(list(text), dtype=torch.uint8),
        "val": task_val(),
    }
    return task


def task_val() -> torch.Tensor:
    return torch.tensor(
        list(b"the cat sat on the log. a dog! " * 12), dtype=torch.uint8
    )


def test_the_lm_task_learns_bpe_on_train_and_restores_it_from_its_state():
    task = bpe_task()
    assert 0 < len(task.bpe.merges) <= 30  # fewer when no pair repeats any more
    assert task.vocab == 256 + len(task.bpe.merges)
    assert task.build_model().embed.num_embeddings == task.vocab
    restored = LanguageModel(task.config, state=task.state())  # no data needed
    val = task.splits["val"]
    assert torch.equal(restored.tokenize(val), task.tokenize(val))
    assert task.bpe.decode(task.tokenize(val).tolist()) == bytes(val.numpy())
    x, _ = next(iter(task.batches(0)))
    assert (
        x.shape == (task.config.batch_size, task.config.max_len)
        and int(x.max()) >= 256
    )
    torch.manual_seed(0)
    model = task.build_model()
    (sample,) = restored.predict(model, ["the cat"], length=5)
    assert sample.startswith("the cat") and len(sample) > len("the cat")


def test_bpe_validation_and_test_are_bits_per_byte_of_the_same_text():
    task = bpe_task(eval_bytes=10_000, max_len=16)
    torch.manual_seed(0)
    model = task.build_model().eval()
    ids = task.tokenize(task.splits["val"])
    n = (len(ids) - 1) // 16
    with torch.no_grad():
        y = ids[1 : n * 16 + 1]
        nats = F.cross_entropy(
            model(ids[: n * 16].view(n, 16)).flatten(0, 1), y, reduction="sum"
        )
    metrics = task.evaluate(model)
    expected = nats.item() / math.log(2) / int(task.token_bytes[y].sum())
    assert metrics["val_bpb"] == pytest.approx(expected, rel=1e-5)
    test = task.test(model)
    first = int(task.token_bytes[ids[0]])
    assert (
        test["bytes_scored"] == len(task.splits["val"]) - first
    )  # every byte after token 0
    assert test["tokens_scored"] == len(ids) - 1


def test_bad_token_settings_are_refused():
    with pytest.raises(ValueError, match="bpe_merges >= 1"):
        from_settings(LanguageModelConfig, dict(tokens="bpe"))
    with pytest.raises(ValueError, match="bytes need bpe_merges=0"):
        from_settings(LanguageModelConfig, dict(bpe_merges=10))
    with pytest.raises(ValueError, match="tokens='words'"):
        from_settings(LanguageModelConfig, dict(tokens="words"))
    with pytest.raises(ValueError, match="block=gpt2 has no norm"):
        from_settings(LanguageModelConfig, dict(block="gpt2", norm="layer"))
