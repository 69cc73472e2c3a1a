"""The package's layers: no import points up.

Every module belongs to a layer, and a module may import its own layer and the
layers ranked below it, never one above, nor another layer of its own rank. From
the bottom:

0. ``paths`` (repository root, data mirror, caches) and ``files`` (atomic
   writes, full disks): the standard library only.
1. ``blocks/``: attention, masks, embeddings, positions, norms, feed-forwards,
   caches, the encoder and decoder layers.
2. ``models/``: whole models built from blocks (and ``models.eval_mode``, the eval
   mode every evaluation runs in); ``data/``: corpora, tokenizers, vocabularies,
   batches. Models and data know nothing of each other.
3. ``training/``: the trainer, losses, schedules, checkpoints,
   distributed training, memory accounting, progress bars.
4. ``evaluation/``: metrics, decoding, sampling, segment-wise scoring.
5. ``tasks/``: what the runner trains, each task joining data, a model, its loss
   and its scores.
6. runs: ``runner`` (around the training loop), ``records`` (finished runs kept in
   ``results/``), ``finished`` (a finished run read back, for both of them) and
   ``machine`` (a run's provenance, written by the runner and copied by records,
   and used by nothing else).
7. commands: ``cli``, ``launch`` (``cli`` under torchrun), ``doctor``, ``__main__``.
8. ``book/`` (the chapters' machinery) and ``exercises/`` (graded exercises): may
   import anything below.

The package's ``__init__`` re-exports names lazily (it imports nothing when it
is imported), so it stands above every layer, and importing the bare package is
always allowed: Python imports it before any of its modules anyway.

Imports inside functions and under ``if TYPE_CHECKING`` count like the others:
a lazy import is still a dependency.

Nor does any module import, through any chain of others, itself: two modules of
one layer may import each other's names (the layers allow it), but then neither
can be read, tested or moved without the other; the piece they share belongs in
a module both import. Only the imports a module writes count as its edges: that
importing ``a.b.c`` runs ``a/b/__init__.py`` first is Python's, not a
dependency (a package's ``__init__`` imports its own modules).
"""

from __future__ import annotations

import ast
import graphlib
import itertools
from pathlib import Path

import annotated_transformer

PACKAGE = Path(annotated_transformer.__file__).resolve().parent
ROOT = PACKAGE.name

# The first part of a module's name (below the package) -> (layer, rank).
LAYERS: dict[str, tuple[str, int]] = {
    "paths": ("base", 0),
    "files": ("base", 0),
    "blocks": ("blocks", 1),
    "models": ("models", 2),
    "data": ("data", 2),
    "training": ("training", 3),
    "evaluation": ("evaluation", 4),
    "tasks": ("tasks", 5),
    "runner": ("runs", 6),
    "records": ("runs", 6),
    "machine": ("runs", 6),
    "finished": ("runs", 6),
    "cli": ("commands", 7),
    "doctor": ("commands", 7),
    "launch": ("commands", 7),
    "__main__": ("commands", 7),
    "book": ("book", 8),
    "exercises": ("exercises", 8),
}
TOP = ("package", 9)  # the lazy re-exports of __init__


def module_name(path: Path) -> str:
    """``annotated_transformer.blocks.masks`` for ``.../blocks/masks.py``."""
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_module(name: str) -> bool:
    """Is ``name`` (dotted, from the package) a module or subpackage?"""
    path = PACKAGE.parent.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def layer(name: str) -> tuple[str, int]:
    """The layer of a module; KeyError for a module no layer holds."""
    parts = name.split(".")
    return TOP if len(parts) == 1 else LAYERS[parts[1]]


def imports(source: str, name: str, is_package: bool) -> list[tuple[int, str]]:
    """(line, module) of every import of the package in ``source``, the module
    ``name``, wherever it stands (in a function, under ``if TYPE_CHECKING``);
    ``from a.b import c`` names ``a.b.c`` when that is a module, else ``a.b``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the module's own package upwards
                package = name.split(".")[: len(name.split(".")) - node.level]
                package += name.split(".")[-1:] if is_package else []
                base = ".".join(package + ([base] if base else []))
            for alias in node.names:
                inner = f"{base}.{alias.name}"
                found.append((node.lineno, inner if is_module(inner) else base))
    return sorted((line, m) for line, m in found if m.split(".")[0] == ROOT)


def may_import(source: str, target: str) -> bool:
    """Its own layer, a layer of lower rank, or the bare package."""
    if target == ROOT:
        return True
    (have, rank), (want, other) = layer(source), layer(target)
    return want == have or other < rank


def modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def test_every_module_has_a_layer() -> None:
    unranked = []
    for path in modules():
        try:
            layer(module_name(path))
        except KeyError:
            unranked.append(module_name(path))
    assert unranked == [], f"give these a layer in LAYERS: {unranked}"


def test_no_import_points_up_a_layer() -> None:
    upward = []
    for path in modules():
        name = module_name(path)
        is_package = path.name == "__init__.py"
        for line, target in imports(path.read_text(), name, is_package):
            if not may_import(name, target):
                where = f"{path.relative_to(PACKAGE.parent)}:{line}"
                upward.append(
                    f"{where} {layer(name)} imports {target} {layer(target)}"
                )
    assert upward == [], "imports that point up a layer:\n" + "\n".join(upward)


def test_imports_are_found_wherever_they_stand() -> None:
    source = """
from typing import TYPE_CHECKING
import torch
from annotated_transformer import paths
from annotated_transformer.models.eval_mode import evaluating
if TYPE_CHECKING:
    from annotated_transformer.tasks.base import Task
def late():
    import annotated_transformer.runner
    from .. import cli
"""
    found = imports(source, f"{ROOT}.data.download", is_package=False)
    assert [m.removeprefix(f"{ROOT}.") for _, m in found] == [
        "paths",
        "models.eval_mode",
        "tasks.base",
        "runner",
        "cli",
    ]
    allowed = [may_import(f"{ROOT}.data.download", m) for _, m in found]
    assert allowed == [True, False, False, False, False]  # models: a sibling


def import_graph() -> dict[str, set[str]]:
    """Every module of the package -> the package's modules it imports."""
    graph = {}
    for path in modules():
        name = module_name(path)
        found = imports(path.read_text(), name, path.name == "__init__.py")
        graph[name] = {target for _, target in found if target != name}
    return graph


def circle(graph: dict[str, set[str]]) -> list[str]:
    """One chain of imports that comes back to where it began (``[a, b, a]``:
    a imports b, b imports a), or [] when there is none."""
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as error:
        return list(reversed(error.args[1]))  # graphlib lists it importer last
    return []


def test_a_circle_is_found() -> None:
    chain = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    found = circle(chain)
    assert len(found) == 4 and found[0] == found[-1]
    assert all(b in chain[a] for a, b in itertools.pairwise(found))
    assert circle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) == []


def test_no_import_circles() -> None:
    found = circle(import_graph())
    assert found == [], "modules that import each other: " + " -> ".join(found)
