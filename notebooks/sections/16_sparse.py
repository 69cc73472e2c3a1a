# %% [markdown]
# ## Sparse attention at long lengths
#
# Causal self-attention over n positions scores n(n+1)/2 pairs: double the context and the
# work quadruples, and the explicit form also stores an (n, n) matrix per head. The Sparse
# Transformer (Child et al. 2019) lets each position attend to about √n others, chosen so that
# information still flows from every position to every later one in two layers. Two patterns,
# each the union of two masks (i the query, j the key, l the stride, about √n):
#
# - *strided* (for data with a period, such as image rows): **local**, the previous l
#   positions ($0 \le i - j < l$), and **strided**, every l-th position back
#   ($(i - j) \bmod l = 0$);
# - *fixed* (for text): **block**, the earlier positions of i's own block of l
#   ($\lfloor j/l \rfloor = \lfloor i/l \rfloor$), and **summary**, the last c positions of
#   every block ($j \bmod l \ge l - c$).

# %%
import subprocess
import sys

import torch.nn.functional as F

from annotated_transformer.sparse import (
    SparseSelfAttention,
    attended_pairs,
    fixed_masks,
    fixed_pairs,
    fixed_sparse_attention,
    reaches_all_earlier,
    sparsify_,
    strided_masks,
    strided_pairs,
    two_layer_reach,
)

# %% [markdown]
# ### The patterns
#
# Sixteen positions, stride 4, one summary position per block (a row is a query, a column a
# key; colour = may attend):

# %%
n, l, c = 16, 4, 1
local, strided = strided_masks(n, l)
block, summary = fixed_masks(n, l, c)


def pattern_picture(mask: torch.Tensor, title: str) -> alt.Chart:
    return viz.heatmap(
        mask.float(),
        title=title,
        x_title="key j",
        y_title="query i",
        value_title="attends",
        domain=(0, 1),
        width=150,
        height=150,
    )


pictures = [
    (local, "strided: local"),
    (strided, "strided: strided"),
    (block, "fixed: block"),
    (summary, "fixed: summary"),
]
alt.hconcat(*(pattern_picture(m, t) for m, t in pictures)).properties(
    title="The Sparse Transformer's patterns, n = 16, l = 4, c = 1"
)

# %% [markdown]
# ### How many pairs
#
# Query i reads at most l local keys and i/l strided ones; with l ≈ √n that is about 2√n keys,
# n·2√n pairs in all instead of n²/2. The fixed pattern reads its own block and c keys of each
# earlier block, l + c·n/l. Closed forms, checked against the masks at small n, then counted up
# to 16,384:

# %%
for size, stride in ((16, 4), (64, 8), (256, 16)):
    loc, st = strided_masks(size, stride)
    blk, summ = fixed_masks(size, stride, 2)
    assert attended_pairs(loc | st) == strided_pairs(size, stride)
    assert attended_pairs(blk | summ) == fixed_pairs(size, stride, 2)



def root_stride(size: int) -> int:
    """The smallest power of two >= √size (it divides size, a power of two)."""
    return 2 ** int(np.ceil(np.log2(size) / 2))


counts = {
    "dense (causal)": lambda size: size * (size + 1) // 2,
    "strided, l ≈ √n": lambda size: strided_pairs(size, root_stride(size)),
    "fixed, l ≈ √n, c = 4": lambda size: fixed_pairs(size, root_stride(size), 4),
}
pairs = pd.DataFrame(
    [
        {"n": 2**k, "attention": name, "pairs": count(2**k)}
        for k in range(6, 15)
        for name, count in counts.items()
    ]
)
viz.line_chart(
    pairs,
    "n",
    "pairs",
    "attention",
    title="Attended (query, key) pairs per head against the length",
    x_title="sequence length n",
    y_title="pairs (log scale)",
    log_y=True,
).encode(x=alt.X("n:Q", scale=alt.Scale(type="log", base=2), title="sequence length n"))

# %% [markdown]
# ### Every earlier position in two layers
#
# A layer whose mask is M lets i read j when M[i, j]; two layers, S on top of F, let i read j
# when some k has S[i, k] and F[k, j]: the boolean matrix product. Strided: local then
# strided reaches everything (step back by whole strides, then at most l − 1 locally). Fixed is
# subtler: block then summary misses the earlier positions of i's own block, which is why each
# head attends to the *union* of the two masks; union then union reaches everything.

# %%
reach = {
    "strided: local, then strided": two_layer_reach(local, strided),
    "fixed: block, then summary": two_layer_reach(block, summary),
    "fixed: union, then union": two_layer_reach(block | summary, block | summary),
}
causal = torch.ones(n, n, dtype=torch.bool).tril()
for name, r in reach.items():
    print(f"{name:<30} reaches {int(r[causal].sum()):>3} of {int(causal.sum())} earlier pairs")
assert reaches_all_earlier(local, strided)
assert not reaches_all_earlier(block, summary)
assert reaches_all_earlier(block | summary, block | summary)
alt.hconcat(*(pattern_picture(r, t) for t, r in reach.items())).properties(
    title="Which keys a query reaches through two layers"
)

# %% [markdown]
# ### Block-sparse, not a masked dense matrix
#
# A dense matrix with a sparse mask saves nothing: the n² scores are still computed and
# stored. The package's kernels cut the sequence into blocks of l. For the fixed pattern each
# query block scores its own block (l × l) and the c summary keys of every block, gathered
# into one short tensor; one softmax runs over both parts. No (n, n) tensor is ever formed
# (a test watches every matrix product), and the result equals dense attention under the
# union mask:

# %%
show_source(fixed_sparse_attention)

# %%
q, k, v = torch.randn(3, 2, 4, 256, 16, dtype=torch.float64)
blk, summ = fixed_masks(256, 16, 2)
dense_out = F.scaled_dot_product_attention(q, k, v, attn_mask=blk | summ)
torch.testing.assert_close(fixed_sparse_attention(q, k, v, 16, 2), dense_out)

# %% [markdown]
# In a model, every head attends under the union of the pattern's two masks (the paper's
# "merged" head), rather than half of the heads under each mask. The kernel computes both
# parts in one softmax anyway; a union head reads everything the two split heads would; and
# with union heads *any* two layers reach every earlier position, whatever their order, where
# split heads need the right mask below the right one. `sparsify_` swaps the attention of each
# block of chapter 17's model (or GPT-2's) for this module, keeping its weights; generation
# from a key/value cache scores the few new queries densely under the same mask.

# %%
show_source(SparseSelfAttention.forward, sparsify_)

# %% [markdown]
# ### Time and memory, 512 to 8,192 positions
#
# `benchmarks/sparse.py` times one attention call, forward and backward, for four
# implementations at each length in turn (one thread, batch 1, 2 heads of 64): the explicit
# softmax(QKᵀ)V, PyTorch's fused `scaled_dot_product_attention`, and the two block-sparse
# kernels (l the smallest power of two ≥ √n, c = 4); memory is the PyTorch allocator's peak
# during the call. In CI it runs at small lengths; the stored figures are its full run,
# `PYTHONPATH=src OMP_NUM_THREADS=1 python benchmarks/sparse.py` (n = 512 … 8192).

# %%
PRESET = pick("tiny", "cpu")
bench_csv = runs_dir() / f"sparse-benchmark-{PRESET}.csv"
if PRESET == "tiny" or not bench_csv.is_file():
    bench_csv.parent.mkdir(parents=True, exist_ok=True)
    script = runs_dir().parent / "benchmarks" / "sparse.py"
    lengths = pick("128,256,512", "512,1024,2048,4096,8192")
    command = [sys.executable, str(script), "--lengths", lengths, "--csv", str(bench_csv)]
    subprocess.run([*command, "--repeats", pick("1", "3")], check=True, capture_output=True)
bench = pd.read_csv(bench_csv)
bench.pivot(index="n", columns="attention", values=["ms", "MiB"]).round(1)

# %%
log2_x = alt.X("n:Q", scale=alt.Scale(type="log", base=2), title="sequence length n")
charts = [
    viz.line_chart(
        bench,
        "n",
        value,
        "attention",
        title=title,
        x_title="sequence length n",
        y_title=y_title,
        log_y=True,
        width=320,
    ).encode(x=log2_x)
    for value, title, y_title in (
        ("ms", "Time of one forward + backward", "milliseconds (log scale)"),
        ("MiB", "Peak memory allocated during it", "MiB (log scale)"),
    )
]
alt.hconcat(*charts)

# %% [markdown]
# Read the slopes on the log-log axes: doubling n multiplies the explicit form's time and
# memory by about 4 (quadratic); the fused kernel never stores the matrix, so its memory grows
# only linearly, but its time still grows by 3 to 3.5× per doubling at the long end; the
# block-sparse kernels grow by about 2.5× per doubling in both (n√n would be 2.8×). In the
# stored run, at 8,192 positions, the block-sparse kernels took about a quarter of the fused
# kernel's time and less than a tenth of the explicit form's memory; the fused kernel's
# memory stays the smallest of all, because it recomputes instead of storing.
#
# ### Bits per byte: sparse against dense
#
# The same small model (chapter 17's block: 2 layers, d_model 64, 4 heads) on the enwik8
# prefix with 2,048-byte windows, dense and with the fixed pattern (l = 64, c = 4), the same
# seed, data and steps; scored on the whole validation split with overlapping 2,048-byte
# windows. In CI the windows are 256 bytes and the runs a few dozen steps.

# %%
base = ["dataset=enwik8_prefix", "block=modern", "N=2", "d_model=64", "h=4", "d_ff=256"]
base += [f"max_len={pick(256, 2048)}", f"batch_size={pick(4, 2)}", f"steps={pick(60, 400)}"]
base += ["warmup=40", f"eval_every={pick(30, 100)}", "eval_bytes=32768"]
fixed = ["attention=fixed", f"sparse_stride={pick(16, 64)}", "sparse_summary=4"]
lm_runs = {
    name: ensure_run(
        "lm",
        PRESET,
        runs_dir() / f"e8-{name}-{PRESET}",
        settings=base + extra,
        fresh=PRESET == "tiny",
    )
    for name, extra in (("dense", []), ("fixed", fixed))
}
pd.DataFrame.from_dict(
    {
        name: {
            "context": run.metrics["test"]["context"],
            "steps": run.metrics["steps"],
            "train seconds (shared machine)": run.metrics["train_seconds"],
            "validation bytes scored": run.metrics["test"]["bytes_scored"],
            "bits per byte": round(run.metrics["test"]["bits_per_byte"], 3),
        }
        for name, run in lm_runs.items()
    },
    orient="index",
)

# %%
curves = pd.concat(
    rows_with(run.history, "val_bpb").assign(attention=name) for name, run in lm_runs.items()
)
viz.line_chart(
    curves,
    "step",
    "val_bpb",
    "attention",
    title="enwik8 prefix, long windows: dense against fixed sparse attention",
    x_title="training step",
    y_title="validation bits per byte",
)

# %% [markdown]
# In the stored runs (400 steps of two 2,048-byte windows, about 4 minutes each on one shared
# CPU thread) the fixed pattern scored 3.566 bits per byte on the validation split against
# dense attention's 3.806, and trained in 202 s against 234 s. Both models are far from
# trained (chapter 14's `cpu` model reaches 2.11 bits per byte on this text), so this says only
# that at the start of training the sparse pattern costs nothing: its block mask is a strong
# hint that nearby bytes matter most, which a dense model has yet to learn. Whether it keeps
# up over a long run, where the far context starts to pay, is the paper's claim (0.99 bits per
# byte on enwik8 with 12k-byte contexts), not something these runs measure. The command lines:
#
# ```
# BASE="--set dataset=enwik8_prefix --set block=modern --set N=2 --set d_model=64 --set h=4
#   --set d_ff=256 --set max_len=2048 --set batch_size=2 --set steps=400 --set warmup=40
#   --set eval_every=100 --set eval_bytes=32768"
# python -m annotated_transformer lm train --preset cpu $BASE --out runs/e8-dense-cpu
# python -m annotated_transformer lm train --preset cpu $BASE --out runs/e8-fixed-cpu \
#     --set attention=fixed --set sparse_stride=64 --set sparse_summary=4
# ```
