"""The README's layout tree names the package's folders as they are."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "annotated_transformer"


def layout_tree() -> list[str]:
    """The package's entries in the README's layout block: the names indented
    under ``src/annotated_transformer/``."""
    readme = (ROOT / "README.md").read_text()
    block = readme.split("## Layout", 1)[1].split("```")[1]
    lines = block.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("src/"))
    names = []
    for line in lines[start + 1 :]:
        if not line.startswith(" "):
            break
        found = re.match(r"  ((?:\S+, )*\S+)", line)  # "a.py, b.py   what"
        if found:
            names.extend(found[1].split(", "))
    return names


def test_every_entry_of_the_tree_exists():
    for name in layout_tree():
        assert (PACKAGE / name).exists(), f"README's layout names {name}"


def test_every_folder_of_the_package_is_in_the_tree():
    folders = {
        f"{path.name}/"
        for path in PACKAGE.iterdir()
        if path.is_dir() and (path / "__init__.py").is_file()
    }
    missing = folders - set(layout_tree())
    assert not missing, f"README's layout lacks {sorted(missing)}"
