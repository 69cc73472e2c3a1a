"""Layer 1, the building blocks every Transformer here is assembled from: attention,
positions, masks, embeddings, norms, feed-forwards, key/value caches and layers,
each knowing nothing of whole models, data or training. Besides torch and each
other, they import only layer 0 (``paths``, ``files``).
"""
