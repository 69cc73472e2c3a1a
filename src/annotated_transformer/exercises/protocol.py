"""Plain data between the grader and the worker that runs an answer.

The grader never shares a process with an answer: it sends a request ("call the
answer's function NAME with these arguments") and reads the outputs back, as
JSON for numbers, strings and containers and as safetensors bytes for tensors,
never pickle. A message is one frame: two 4-byte lengths, the JSON text, the
safetensors bytes.

What the grader sends besides plain data:

- an object made with :func:`build` (a module, an optimiser, a loss function):
  its recipe, the factory's dotted name and its arguments, and a module's
  weights; the worker makes its own copy, and after the call sends back its
  state, which the grader copies into its object (:func:`restore`);
- any other function of the grader's (a toy model to decode from): a number; the
  worker calls it back through the grader, which runs it on plain data.

What the worker sends back besides plain data: a number (a handle) for an object
that is not plain data (a vocabulary), which the grader reads through
:class:`Remote` calls.
"""

from __future__ import annotations

import importlib
import json
import math
import struct
import weakref
from collections import Counter
from collections.abc import Callable
from typing import IO, Any

import torch
from safetensors.torch import load as load_tensors
from safetensors.torch import save as save_tensors
from torch import Tensor, nn

LIMIT = 1 << 30
"""The largest frame either side accepts (bytes)."""

_RECIPES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def build(factory: Callable, *args: object, **kwargs: object) -> Any:
    """``factory(*args, **kwargs)``, remembered so that it can be sent to the
    worker, which makes the same object (``factory`` is a torch or book class or
    function, importable by its dotted name)."""
    made = factory(*args, **kwargs)
    name = f"{factory.__module__}.{factory.__qualname__}"
    _RECIPES[made] = (name, args, kwargs)
    return made


def recipe(value: object) -> tuple | None:
    try:
        return _RECIPES.get(value)
    except TypeError:  # not weakly referable: not built
        return None


def importable(name: str) -> Any:
    """The object a recipe names: torch's or the book's, nothing else."""
    if not name.startswith(("torch.", "annotated_transformer.")):
        raise ValueError(f"{name} is not torch's or the book's")
    parts = name.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            found: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for part in parts[cut:]:
            found = getattr(found, part)
        return found
    raise ValueError(f"{name} cannot be imported")


class Encoder:
    """Turns a value into JSON and a dict of tensors; ``other`` encodes what is
    not plain data (the grader: callbacks; the worker: handles)."""

    def __init__(self, other: Callable[[object], dict] | None = None) -> None:
        self.tensors: dict[str, Tensor] = {}
        self.built: list[object] = []  # what build() made, in the order sent
        self.leaves: list[Tensor] = []  # tensors that require grad, in order
        self.other = other

    def tensor(self, value: Tensor) -> str:
        key = f"t{len(self.tensors)}"
        self.tensors[key] = value.detach().cpu().clone().contiguous()
        return key

    def __call__(self, value: object) -> object:
        if value is None or isinstance(value, bool | int | str):
            return value
        if isinstance(value, float):
            return value if math.isfinite(value) else {"float": repr(value)}
        if isinstance(value, Tensor):
            if value.requires_grad and value.is_leaf:
                self.leaves.append(value)
            return {"tensor": self.tensor(value), "grad": value.requires_grad}
        if isinstance(value, bytes):
            return {"bytes": value.hex()}
        if isinstance(value, torch.dtype):
            return {"dtype": str(value).removeprefix("torch.")}
        if isinstance(value, torch.Generator):
            return {"generator": self.tensor(value.get_state())}
        if isinstance(value, Counter):
            return {"counter": [[self(k), self(v)] for k, v in value.items()]}
        if isinstance(value, list):
            return {"list": [self(v) for v in value]}
        if isinstance(value, tuple):  # torch.Size too
            return {"tuple": [self(v) for v in value]}
        if isinstance(value, dict):
            if all(isinstance(k, str) for k in value):
                return {"dict": {k: self(v) for k, v in value.items()}}
            return {"pairs": [[self(k), self(v)] for k, v in value.items()]}
        made = recipe(value)
        if made is not None:
            if any(value is b for b in self.built):
                return {
                    "ref": next(i for i, b in enumerate(self.built) if b is value)
                }
            name, args, kwargs = made
            encoded = {
                "build": name,
                "args": self(list(args)),
                "kwargs": self(kwargs),
            }
            self.built.append(value)
            if isinstance(value, nn.Module):
                encoded["state"] = self(state(value))
            return encoded
        if self.other is not None:
            return self.other(value)
        raise TypeError(f"a {type(value).__name__} cannot be sent to the worker")


class Decoder:
    """Turns JSON and tensors back into values; ``builds``: whether recipes
    are made (the worker) or refused (the grader)."""

    def __init__(
        self,
        tensors: dict[str, Tensor],
        other: Callable[[dict], object] | None = None,
        builds: bool = False,
    ) -> None:
        self.tensors = tensors
        self.other = other
        self.builds = builds
        self.built: list[object] = []
        self.leaves: list[Tensor] = []

    def __call__(self, value: object) -> Any:
        if not isinstance(value, dict):
            if value is None or isinstance(value, bool | int | float | str):
                return value
            raise ValueError(f"unexpected {type(value).__name__} in a message")
        if "float" in value:
            return float(value["float"])
        if "tensor" in value:
            tensor = self.tensors[value["tensor"]].clone()
            if value.get("grad"):
                tensor.requires_grad_(True)
                self.leaves.append(tensor)
            return tensor
        if "bytes" in value:
            return bytes.fromhex(value["bytes"])
        if "dtype" in value:
            dtype = getattr(torch, value["dtype"])
            if not isinstance(dtype, torch.dtype):
                raise ValueError(f"{value['dtype']} is not a dtype")
            return dtype
        if "generator" in value:
            generator = torch.Generator()
            generator.set_state(self.tensors[value["generator"]])
            return generator
        if "counter" in value:
            return Counter({self(k): self(v) for k, v in value["counter"]})
        if "list" in value:
            return [self(v) for v in value["list"]]
        if "tuple" in value:
            return tuple(self(v) for v in value["tuple"])
        if "dict" in value:
            return {str(k): self(v) for k, v in value["dict"].items()}
        if "pairs" in value:
            return {_key(self(k)): self(v) for k, v in value["pairs"]}
        if self.builds and "ref" in value:
            return self.built[value["ref"]]
        if self.builds and "build" in value:
            factory = importable(value["build"])
            made = factory(*self(value["args"]), **self(value["kwargs"]))
            if "state" in value:
                restore(made, self(value["state"]))
            self.built.append(made)
            return made
        if self.other is not None:
            return self.other(value)
        raise ValueError(f"unexpected {sorted(value)} in a message")


def _key(key: object) -> object:
    return tuple(key) if isinstance(key, list) else key


def state(value: object) -> dict:
    """What a built object holds that a call may change: a module's weights,
    gradients and modes (dropout's p too), an optimiser's or scheduler's
    state dict."""
    if isinstance(value, nn.Module):
        params = dict(value.named_parameters())
        return {
            "weights": dict(value.state_dict()),
            "grads": {k: p.grad for k, p in params.items()},
            "training": [m.training for m in value.modules()],
            "dropout": [getattr(m, "p", None) for m in value.modules()],
        }
    if hasattr(value, "state_dict"):
        return {"state_dict": value.state_dict()}
    return {}


def restore(value: object, saved: dict) -> None:
    """Put ``saved`` (from :func:`state`) into the object ``value``."""
    if isinstance(value, nn.Module):
        with torch.no_grad():
            value.load_state_dict(saved["weights"])
        for name, p in value.named_parameters():
            p.grad = saved["grads"].get(name)
        modules = list(value.modules())
        for m, mode, p in zip(
            modules, saved["training"], saved["dropout"], strict=True
        ):
            m.training = mode
            if p is not None:
                m.p = p
    elif "state_dict" in saved:
        value.load_state_dict(saved["state_dict"])


def send(stream: IO[bytes], message: dict, tensors: dict[str, Tensor]) -> None:
    """Write one frame: the JSON ``message`` and the ``tensors``."""
    text = json.dumps(message).encode()
    blob = save_tensors(tensors) if tensors else b""
    stream.write(struct.pack("<II", len(text), len(blob)) + text + blob)
    stream.flush()


def parse(head: bytes, body: bytes) -> tuple[dict, dict[str, Tensor]]:
    """A frame's message and tensors (``head``: its two lengths)."""
    size, _ = struct.unpack("<II", head)
    message = json.loads(body[:size])
    tensors = load_tensors(body[size:]) if len(body) > size else {}
    if not isinstance(message, dict):
        raise ValueError("a message is a JSON object")
    return message, tensors


def lengths(head: bytes) -> int:
    """The number of bytes after a frame's head; a ValueError beyond LIMIT."""
    total = sum(struct.unpack("<II", head))
    if total > LIMIT:
        raise ValueError(f"a message of {total:,} bytes is too large")
    return total


def receive(stream: IO[bytes]) -> tuple[dict, dict[str, Tensor]] | None:
    """Read one frame from a blocking stream; None at its end."""
    head = stream.read(8)
    if len(head) < 8:
        return None
    body = stream.read(lengths(head))
    return parse(head, body)
