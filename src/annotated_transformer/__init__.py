"""Transformers from Scratch: the package the book's chapters import.

One module per idea (attention, masks, positional encodings, layers, the model,
training, decoding, data, metrics, charts); the chapters display this code and run
it.
"""

__version__ = "0.1.0"
