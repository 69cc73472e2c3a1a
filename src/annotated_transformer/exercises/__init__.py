"""Exercises at the end of every chapter, graded automatically.

Each chapter NN has four pieces, one idea per file:

- ``notebooks/exercises/NN_<chapter>.py``: the starter the reader fills in. One
  function per exercise, with its signature, its docstring and ``raise
  NotImplementedError`` as its body; a "find the bug" exercise gives a broken
  function instead, to repair in place.
- ``exercises/chNN.py``: the checks. Each is registered with
  :func:`grading.exercise` under the name of the function it grades, receives the
  reader's module, and tests that function against an independent reference (a
  PyTorch module, a formula, brute force).
- ``notebooks/exercises/solutions/chNN.py``: the reference solutions, one
  function per exercise, kept outside this package so that installing it never
  installs them. The book shows them behind closed toggles, as code that
  :mod:`toggles` writes from this file (``make listings``); ``make handout``
  builds a student edition without them (see book/teachers.md).
- the chapter's ``## Exercises`` section: the statements and the toggles.

Grade a chapter with ``make exercises CHAPTER=06`` or
``python -m annotated_transformer.exercises 06 [--solutions] [--file PATH]
[--seed N]``, a class with ``make mark SUBMISSIONS=folder`` (:mod:`marking`). The
answer file never runs in the grader's process: a worker imports it
(:mod:`worker`, in a sandbox where there is one: :mod:`isolation`) and the checks
call its functions through plain-data messages (:mod:`protocol`), on fresh inputs;
per exercise the report says PASS, FAIL with what went wrong and a hint (never the
solution), or TODO (not attempted yet: the starter's ``NotImplementedError`` is
still there). :mod:`handout` builds the student and teacher editions, :mod:`otter`
the Otter-Grader export.
"""
