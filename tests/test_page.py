"""Printed text that fits the page: wrapped at the column's width, nothing lost."""

from annotated_transformer.book.page import WIDTH, print_log, wrap


def test_wrap_fits_the_column_and_keeps_the_text():
    text = "Title\n\n" + " ".join(f"word{i}" for i in range(60)) + "\n  indented"
    wrapped = wrap(text, indent="  ")
    lines = wrapped.splitlines()
    assert max(map(len, lines)) <= WIDTH
    assert lines[:2] == ["Title", ""] and lines[-1] == "  indented"
    assert all(line.startswith("  word") for line in lines[3:-1])
    assert wrapped.split() == text.split()


def test_print_log_continues_an_entry_under_its_message(tmp_path, capsys):
    entry = "lm cpu: " + ", ".join(f"setting {i}" for i in range(20))
    log = tmp_path / "train.log"
    log.write_text(f"2026-11-25 18:47:07  {entry}\n2026-11-25 18:59:47  step 250\n")
    print_log(log)
    lines = capsys.readouterr().out.splitlines()
    assert max(map(len, lines)) <= WIDTH and len(lines) > 2
    assert lines[0].startswith("2026-11-25 18:47:07  lm cpu: setting 0,")
    indents = {len(line) - len(line.lstrip()) for line in lines[1:-1]}
    assert indents == {len("2026-11-25 18:47:07  ")}
    assert lines[-1] == "2026-11-25 18:59:47  step 250"
    assert " ".join(lines[:-1]).split()[2:] == entry.split()
