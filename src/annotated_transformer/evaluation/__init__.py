"""Layer 4, evaluation: scoring trained models and putting them to use.
``metrics`` (BLEU, chrF, accuracy, bits per byte), ``decoding`` (greedy and
beam search for the encoder-decoder), ``sampling`` (text from a decoder-only
model) and ``segments`` (a long text read segment by segment with
Transformer-XL's memory). It may import the layers below (training, models,
data, blocks, layer 0), never tasks or anything above; see
``tests/test_layout.py``.
"""
