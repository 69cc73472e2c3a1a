"""The worker: the only process that imports an answer file and runs its code.

It knows no check, no expected value and no reference solution: it receives
requests ("call NAME with these arguments", see :mod:`protocol`), calls the
answer's function and sends back its outputs, or one line saying what went
wrong. Around every call it catches what the value alone would not show:

- an argument changed in place (tensors are compared with copies taken before);
- a module given back in another mode (training or eval) or with another
  dropout probability than it came with, or holding the tensors it was given
  instead of copies;
- torch's global random generator used when the function was given one;
- a result that does not backpropagate, when the grader asks for gradients;
- a banned computation (:class:`Bans`): the fused kernel or the module's own
  forward raises however it is reached (``F.*``, ``torch.ops.aten.*``, the
  class's method).

``python -m annotated_transformer.exercises.worker FILE SCRATCH`` serves requests
on its standard input and output; the answer's own prints go to standard error.
"""

from __future__ import annotations

import ast
import contextlib
import inspect
import os
import random
import sys
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
from torch import Tensor, nn
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from annotated_transformer.exercises import protocol

Link = Callable[[dict, dict], tuple[dict, dict]]
"""Sends a callback request to the grader and returns its reply."""


class RefusedError(Exception):
    """A side effect or a banned computation: the one-line reason."""


def load(path: Path, name: str = "answers") -> ModuleType:
    """Import the answer file; a one-line ValueError when it does not import."""
    module = ModuleType(name)
    module.__file__ = str(path)
    sys.modules[name] = module  # dataclasses look their classes up here
    try:
        source = path.read_text(encoding="utf-8")
        exec(compile(source, str(path), "exec"), module.__dict__)
    except BaseException as error:  # SystemExit too: the file decides nothing
        where = f" (line {error.lineno})" if isinstance(error, SyntaxError) else ""
        what = f"{type(error).__name__}{where}: {error}"
        raise ValueError(
            f"{path.name} does not import: {what}; fix it first"
        ) from None
    return module


def from_solutions(module: ModuleType) -> list[str]:
    """The functions of ``module`` whose code is a reference solutions file's."""
    found = []
    for name, function in vars(module).items():
        code = getattr(function, "__code__", None)
        if code is None or code.co_filename == module.__file__:
            continue
        folder = Path(code.co_filename).parent
        if (folder.name, folder.parent.name) == ("solutions", "exercises"):
            found.append(name)
    return found


class Bans:
    """Torch operations that raise while an answer runs: every function and
    aten operator whose name contains one of ``names``, and the ``methods``
    ("torch.nn.TransformerEncoderLayer.forward") replaced on their classes."""

    def __init__(self, names: list[str], methods: list[str], why: str) -> None:
        self.names, self.methods, self.why = names, methods, why

    def refuse(self, func: object) -> None:
        name = getattr(func, "__name__", "") or str(func)
        full = f"{name} {func}"
        for banned in self.names:
            if banned in full:
                said = "which the statement rules out"
                raise RefusedError(f"it computes {banned}, {said} ({self.why})")

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        bans = self
        saved = []
        for dotted in self.methods:
            owner_name, method = dotted.rsplit(".", 1)
            owner = protocol.importable(owner_name)
            saved.append((owner, method, owner.__dict__[method]))

            def refused(
                *_: object, _name: str = owner.__name__, **__: object
            ) -> None:
                raise RefusedError(f"it calls {_name}'s own forward ({bans.why})")

            setattr(owner, method, refused)

        class Functions(TorchFunctionMode):
            def __torch_function__(self, func, types, args=(), kwargs=None):
                bans.refuse(func)
                return func(*args, **(kwargs or {}))

        class Kernels(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                bans.refuse(func)
                return func(*args, **(kwargs or {}))

        try:
            with Functions(), Kernels():
                yield
        finally:
            for owner, method, original in saved:
                setattr(owner, method, original)


class Server:
    """Answers the grader's requests about the answer ``module``."""

    def __init__(self, module: Any, link: Link | None = None) -> None:
        self.module = module
        self.link = link
        self.handles: list[object] = []
        self.copied = (
            set(from_solutions(module)) if isinstance(module, ModuleType) else set()
        )

    def ready(self) -> dict:
        """The first message: which functions the answer defines."""
        names = [n for n, f in vars(self.module).items() if callable(f)]
        return {"ready": True, "functions": names, "copied": sorted(self.copied)}

    def handle(self, message: dict, tensors: dict) -> tuple[dict, dict]:
        """One request's reply (and its tensors)."""
        encoder = protocol.Encoder(self._handle)
        try:
            reply = self._dispatch(message, tensors, encoder)
        except RefusedError as error:
            return {"error": str(error)}, {}
        except NotImplementedError:
            return {"error": "not attempted yet", "todo": True}, {}
        except BaseException as error:  # a crash, SystemExit, KeyboardInterrupt, …
            return {"error": self.crash(error)}, {}
        return reply, encoder.tensors

    def _handle(self, value: object) -> dict:
        self.handles.append(value)
        return {"handle": len(self.handles) - 1}

    def _callback(self, value: dict) -> Callable:
        if "callback" not in value:
            raise ValueError(f"unexpected {sorted(value)} in a message")
        number = value["callback"]

        def call(*args: object, **kwargs: object) -> Any:
            encoder = protocol.Encoder()
            sent = {
                "callback": number,
                "args": encoder(list(args)),
                "kwargs": encoder(kwargs),
            }
            reply, tensors = self.link(sent, encoder.tensors)
            if "error" in reply:
                raise RuntimeError(reply["error"])
            return protocol.Decoder(tensors)(reply["value"])

        return call

    def _dispatch(
        self, message: dict, tensors: dict, encoder: protocol.Encoder
    ) -> dict:
        decoder = protocol.Decoder(tensors, self._callback, builds=True)
        op = message.get("op")
        if op == "call":
            return self.call(message, decoder, encoder)
        target = self.handles[message["handle"]]
        if op == "attr":
            value = getattr(target, message["name"])
        elif op == "item":
            value = target[decoder(message["key"])]
        elif op == "len":
            value = len(target)
        elif op == "list":
            value = list(target)
        else:
            raise ValueError(f"unknown request {op!r}")
        return {"value": encoder(value)}

    def call(
        self, message: dict, decoder: protocol.Decoder, encoder: protocol.Encoder
    ) -> dict:
        """Call the answer's function; its outputs, or RefusedError."""
        name = message["name"]
        if name in self.copied:
            raise RefusedError(
                "it is the reference solution's code: write your own"
            )
        function = getattr(self.module, name)
        args, kwargs = decoder(message["args"]), decoder(message["kwargs"])
        named = _names(function, args, kwargs)
        before = {n: _tensors(v) for n, v in named.items()}
        modes = {n: _modes(v) for n, v in named.items() if isinstance(v, nn.Module)}
        generator = any(isinstance(v, torch.Generator) for v in named.values())
        rng = (torch.get_rng_state(), random.getstate())
        bans = message.get("bans")
        with Bans(**bans).active() if bans else contextlib.nullcontext():
            result = function(*args, **kwargs)
        _unchanged(named, before)
        _restored(named, modes)
        if generator and not _same_rng(rng):
            raise RefusedError(
                "it drew from torch's global random generator, not from the "
                "generator it was given"
            )
        grads = []
        if message.get("cotangent") is not None:
            try:
                result.backward(decoder(message["cotangent"]))
            except Exception as error:  # whatever breaks autograd
                first = (str(error).strip().splitlines() or [""])[0]
                what = f"its result does not backpropagate: {first}"
                raise RefusedError(what) from None
            grads = [leaf.grad for leaf in decoder.leaves]
        return {
            "value": encoder(result),
            "after": [encoder(protocol.state(b)) for b in decoder.built],
            "grads": encoder(grads),
        }

    def crash(self, error: BaseException) -> str:
        """One line: the exception, and the last line of the answer it passed."""
        first = (str(error).strip().splitlines() or [""])[0]
        file = getattr(self.module, "__file__", None)
        frames = traceback.extract_tb(error.__traceback__)
        lines = [f.lineno for f in frames if file and f.filename == file]
        where = f" at line {lines[-1]} of {Path(file).name}" if lines else ""
        return f"it raised {type(error).__name__}{where}: {first}"


def _names(function: Callable, args: list, kwargs: dict) -> dict[str, object]:
    """The arguments by the names the answer gave its parameters."""
    try:
        bound = inspect.signature(function).bind(*args, **kwargs)
    except (TypeError, ValueError):
        named = {f"argument {i + 1}": a for i, a in enumerate(args)}
        return named | kwargs
    return dict(bound.arguments)


def _tensors(
    value: object, where: str = "", copy: bool = True
) -> list[tuple[str, Tensor]]:
    """(path, tensor) for every tensor in an argument (copies: ``copy``)."""
    if isinstance(value, Tensor):
        return [(where, value.detach().clone() if copy else value)]
    if isinstance(value, list | tuple):
        items = enumerate(value)
    elif isinstance(value, dict):
        items = value.items()
    else:
        return []
    found = []
    for key, item in items:
        found += _tensors(item, f"{where}[{key!r}]", copy)
    return found


def _same(now: object, old: Tensor) -> bool:
    """Whether ``now`` is still the tensor ``old`` was (NaN equal to NaN)."""
    if not isinstance(now, Tensor) or now.shape != old.shape:
        return False
    if now.is_floating_point() or now.is_complex():
        return torch.equal(now.isnan(), old.isnan()) and torch.equal(
            now.nan_to_num(), old.nan_to_num()
        )
    return torch.equal(now, old)


def _unchanged(named: dict[str, object], before: dict[str, list]) -> None:
    """RefusedError when an argument's tensors changed in place."""
    for name, saved in before.items():
        for where, old in saved:
            if not _same(_at(named[name], where), old):
                raise RefusedError(
                    f"it changed its argument {name}{where} in place: leave "
                    "inputs as they came (work on a copy)"
                )


def _restored(named: dict[str, object], modes: dict[str, tuple]) -> None:
    """RefusedError when a module came back in another mode, with another
    dropout, or holding another argument's tensors instead of copies."""
    given = [v for v in named.values() if not isinstance(v, nn.Module)]
    pointers = {t.data_ptr() for v in given for _, t in _tensors(v, copy=False)}
    for name, (training, dropout) in modes.items():
        module = named[name]
        now_training, now_dropout = _modes(module)
        if now_training != training:
            mode = "training" if training[0] else "eval"
            what = f"it did not give {name} back in the mode it came in ({mode})"
            raise RefusedError(what)
        if now_dropout != dropout:
            raise RefusedError(
                f"it changed {name}'s dropout and did not restore it"
            )
        held = module.state_dict().values()
        if any(p.numel() and p.data_ptr() in pointers for p in held):
            what = f"{name} holds the tensors it was given, not copies of them"
            raise RefusedError(what)


def _at(value: object, where: str) -> object:
    """The item of ``value`` at path ``where`` (from :func:`_tensors`)."""
    for key in [] if not where else where[1:-1].split("]["):
        value = value[ast.literal_eval(key)]
    return value


def _modes(module: nn.Module) -> tuple[list, list]:
    return [m.training for m in module.modules()], [
        getattr(m, "p", None) for m in module.modules() if isinstance(m, nn.Dropout)
    ]


def _same_rng(saved: tuple) -> bool:
    return (
        torch.equal(torch.get_rng_state(), saved[0])
        and random.getstate() == saved[1]
    )


def guard(scratch: Path, hidden: list[Path]) -> None:
    """Refuse, from here on, writes outside ``scratch``, reading ``hidden``
    (the reference solutions, the checks) and starting programs (an audit
    hook, which Python code cannot remove)."""
    scratch, hidden = scratch.resolve(), [h.resolve() for h in hidden]
    refused = (
        "subprocess.Popen",
        "os.system",
        "os.exec",
        "os.posix_spawn",
        "os.spawn",
        "os.fork",
        "pty.spawn",
        "ctypes.dlopen",
    )
    changes = (
        "os.remove",
        "os.rename",
        "os.rmdir",
        "os.truncate",
        "os.chmod",
        "os.chown",
        "os.symlink",
        "os.link",
        "os.mkdir",
        "os.utime",
        "shutil.rmtree",
        "shutil.copyfile",
        "shutil.move",
    )

    def outside(path: object) -> bool:
        if isinstance(path, int):
            return False
        resolved = Path(os.fsdecode(path)).resolve()
        return resolved != Path(os.devnull) and scratch not in (
            resolved,
            *resolved.parents,
        )

    def hook(event: str, args: tuple) -> None:
        if event in refused:
            raise PermissionError(f"answers may not do {event} while graded")
        if event == "open" and args and not isinstance(args[0], int):
            path = Path(os.fsdecode(args[0])).resolve()
            if any(h == path or h in path.parents for h in hidden):
                what = "the reference solutions and the checks"
                raise PermissionError(f"{what} cannot be read while grading")
            mode, flags = args[1] or "r", args[2] or 0
            writes = any(c in str(mode) for c in "wax+") or flags & (
                os.O_WRONLY | os.O_RDWR | os.O_CREAT
            )
            if writes and outside(args[0]):
                raise PermissionError(
                    f"answers may write in their scratch folder only, not {path}"
                )
        elif event in changes and args and outside(args[0]):
            raise PermissionError(
                f"answers may change their scratch folder only ({event})"
            )

    sys.addaudithook(hook)


def main(argv: list[str]) -> None:
    """Serve requests about answer file ``argv[0]`` from scratch folder
    ``argv[1]``; ``argv[2:]``: folders the answer may not read."""
    path, scratch, hidden = (
        Path(argv[0]),
        Path(argv[1]),
        [Path(h) for h in argv[2:]],
    )
    inbox = os.fdopen(os.dup(0), "rb")
    outbox = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # the answer's prints go to standard error, apart from replies
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    sys.stdout = sys.stderr
    os.chdir(scratch)

    def link(message: dict, tensors: dict) -> tuple[dict, dict]:
        protocol.send(outbox, message, tensors)
        return protocol.receive(inbox)

    guard(scratch, hidden)
    protocol.send(outbox, {"started": True}, {})  # the grader's part went well
    try:
        server = Server(load(path), link)
    except ValueError as error:
        protocol.send(outbox, {"error": str(error)}, {})
        os._exit(0)
    protocol.send(outbox, server.ready(), {})
    while (received := protocol.receive(inbox)) is not None:
        reply, tensors = server.handle(*received)
        protocol.send(outbox, reply, tensors)
    os._exit(0)  # whatever the answer left running (threads, atexit) ends here


if __name__ == "__main__":
    main(sys.argv[1:])
