"""Open the chapters in JupyterLab and Notebook 7 in a headless browser, offline;
check what a reader sees, and that trying things leaves no trace.

JupyterLab is started on 127.0.0.1 over a copy of the chapters (each ``.py``, its
``.ipynb`` and the figures, in ``build/``), set up and trusted as ``make lab`` does
it, so nothing in ``notebooks/`` is touched; the browser may reach nothing but the
loopback address. Then:

- every chapter's ``.ipynb`` opens, its stored charts drawn, not marked modified;
- one chapter's ``.ipynb`` in JupyterLab (1280 px): the stored charts are drawn and
  the MyST markup is rendered before any cell runs; each control of an explorable
  chart (a slider, a dropdown) redraws its chart when moved, with no kernel
  involved, and a focused slider moves with the arrow keys; all cells run
  (``AT_SIZE=ci``) with no error output and every chart drawn again; saving opens
  no dialog and leaves the file as stored;
- its ``.py`` opens as a notebook (Jupytext's viewer), with the stored charts of its
  pair, and runs the same way;
- its ``.ipynb`` in Notebook 7 at a phone's 390 px: charts and MyST rendered, the
  controls redraw their charts, every chart, solution code (its toggle opened) and
  the menu bar fit the window (nothing scrolls sideways in a cell), no "Not
  Trusted"; the server never logged a chapter as not trusted; no chapter file
  changed; no chapter made jupyterlab-myst log a cross-reference it could not
  resolve (a ``{ref}`` to another chapter);
- at full size, chapter 13's try-it cell, given a German review and run alone,
  answers within a minute with the out-of-data warning; saving the chapter then
  leaves its pair byte-identical, every stored cell timing kept.

The number of charts and admonitions expected is read from the chapter's files, not
from the page. Run by ``make lab-check`` (part of ``make test``):

    AT_SIZE=ci python tests/lab_check.py [--chapter 06_masks] [--screenshot DIR]

In JupyterLab, each exercise's solution toggle is also clicked open: it must show
its code (as many toggles as the chapter's ``.py`` holds).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from explorables_check import check_page
from playwright.sync_api import Page, sync_playwright

from annotated_transformer.book import jupyter
from annotated_transformer.book.rendering import MIME_TYPE
from annotated_transformer.doctor import BROWSER_HINT, find_browser

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--no-first-run"]
LOOPBACK = re.compile(r"^(https?|wss?)://(127\.0\.0\.1|localhost)(:\d+)?/")
# MyST markup that must not reach the reader as text.
RAW_MYST = re.compile(r":::\{|\{ref\}`|^\([\w-]+\)=$|```\{", re.M)
# What jupyterlab-myst logs for a {ref} whose target is in another chapter (it
# resolves targets within one notebook): the link is dead in Jupyter.
UNRESOLVED = "Cross reference target was not found"
# On top of the book's own Jupyter set-up (book.jupyter.configure): autosave off
# (the check saves when it means to), and every cell laid out, so that the page
# holds every output.
SETTINGS = {
    "@jupyterlab/docmanager-extension:plugin": {"autosave": False},
    "@jupyterlab/notebook-extension:tracker": {"windowingMode": "none"},
}
# The chapter whose try-it cell runs alone at full size, and what the reader types.
TRY_IT_CHAPTER = "13_classification_imdb"
TRY_IT_INPUT = 'REVIEW = "Zwei Hunde spielen im Schnee und sind sehr glücklich"'
# Whether the notebook in view differs from its file (JupyterLab's own flag).
DIRTY = "() => window.jupyterapp.shell.currentWidget.context.model.dirty"
# Every query looks only inside the notebook in view.
ROOT_NODE = "(window.jupyterapp.shell.currentWidget?.node ?? document)"
CHART = "'.jp-RenderedVegaCommon5'"  # JupyterLab's own Vega renderer
CHARTS_DRAWN = f"""() => [...{ROOT_NODE}.querySelectorAll({CHART})]
    .map(el => el.querySelector('canvas, svg') !== null
               && !el.querySelector('.error'))"""
# Markdown cells as the reader sees them (jupyterlab-myst renders into them).
MARKDOWN_TEXT = f"""() => [...{ROOT_NODE}.querySelectorAll('.jp-MarkdownCell')]
    .map(el => el.innerText).join('\\n')"""
# Admonitions as jupyterlab-myst draws them: an aside, or a details (a dropdown).
ADMONITIONS = f"""() => {ROOT_NODE}.querySelectorAll(
    '.jp-MarkdownCell .myst-admonition').length"""
# Figures in markdown cells, and how many of them loaded.
FIGURES = f"""() => {{ const images = [...{ROOT_NODE}.querySelectorAll(
    '.jp-MarkdownCell img')];
  return [images.length, images.filter(i => i.naturalWidth > 0).length];
}}"""
# The notebook's outputs, from JupyterLab's own model: errors, and whether all ran.
RUN_STATE = """() => {
  const panel = window.jupyterapp.shell.currentWidget;
  const cells = panel.content.model.cells;
  let errors = [], pending = 0;
  for (let i = 0; i < cells.length; i++) {
    const cell = cells.get(i);
    if (cell.type !== 'code') continue;
    if (cell.executionCount === null) pending++;
    for (const out of cell.outputs.toJSON())
      if (out.output_type === 'error')
        errors.push(`cell ${i}: ${out.ename}: ${out.evalue}`);
  }
  const busy = panel.sessionContext.session?.kernel?.status !== 'idle';
  return {errors, pending, busy};
}"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def expected(chapter: str) -> tuple[int, int, int]:
    """(charts, admonitions, figures) of the chapter, counted in its files."""
    notebook = json.loads((NOTEBOOKS / f"{chapter}.ipynb").read_text())
    # a chart in either form: the MIME bundle, or Altair's HTML (which must draw)
    charts = sum(
        MIME_TYPE in output.get("data", {})
        or "vegaEmbed" in "".join(output.get("data", {}).get("text/html", ""))
        for cell in notebook["cells"]
        for output in cell.get("outputs", [])
    )
    source = (NOTEBOOKS / f"{chapter}.py").read_text()
    admonitions = len(re.findall(r"^# :::\{admonition\}", source, re.M))
    return charts, admonitions, source.count("](figures/")


def check_solutions(page: Page, where: str, toggles: int) -> list[str]:
    """Each solution toggle (a MyST dropdown), clicked open, shows its code."""
    summaries = page.locator(
        ".jp-MarkdownCell details.myst-dropdown > summary", has_text="Solution"
    )
    shown = 0
    for i in range(summaries.count()):
        summaries.nth(i).click()
        code = summaries.nth(i).locator("xpath=..").locator("pre")
        visible = code.count() > 0 and code.first.is_visible()
        shown += visible and "def " in code.first.inner_text()
    if shown < toggles:
        return [f"{where}: {shown} of {toggles} solution toggles show code, opened"]
    return []


def start_lab(
    root: Path, config: Path, port: int, token: str, size: str = "ci"
) -> subprocess.Popen:
    """JupyterLab on 127.0.0.1:``port`` over ``root``, its kernels at ``size``;
    its log: config/lab.log."""
    env = {**os.environ, "JUPYTER_CONFIG_DIR": str(config), "AT_SIZE": size}
    server = subprocess.Popen(
        [
            str(Path(sys.executable).with_name("jupyter")),
            "lab",
            "--no-browser",
            "--allow-root",  # CI runs as root
            "--ServerApp.ip=127.0.0.1",
            f"--ServerApp.port={port}",
            f"--ServerApp.root_dir={root}",
            f"--IdentityProvider.token={token}",
            "--LabApp.expose_app_in_browser=True",
            "--JupyterNotebookApp.expose_app_in_browser=True",
        ],
        env=env,
        stdout=(config / "lab.log").open("w"),
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(
                f"http://127.0.0.1:{port}/api/status?token={token}"
            )
            return server
        except OSError:
            time.sleep(0.5)
    server.kill()
    raise SystemExit("lab check: JupyterLab did not start within 60 s")


def wait_for(page: Page, script: str, what: str, timeout: float) -> object:
    deadline = time.monotonic() + timeout
    while True:
        value = page.evaluate(script)
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.5)


def check_rendered(
    page: Page, where: str, charts: int, admonitions: int, figures: int
) -> list[str]:
    """Charts drawn, MyST rendered and figures shown in the notebook in ``page``."""
    problems = []
    drawn = wait_for(
        page,
        f"() => {{ const d = ({CHARTS_DRAWN})(); "
        f"return d.length >= {charts} && d.every(x => x) ? d : null; }}",
        "charts",
        60,
    )
    if not drawn:
        found = page.evaluate(CHARTS_DRAWN)
        problems.append(f"{where}: {sum(found)} of {charts} charts drawn")
    text = page.evaluate(MARKDOWN_TEXT)
    raw = sorted(set(RAW_MYST.findall(text)))
    if raw:
        problems.append(f"{where}: MyST markup shown as text: {raw}")
    shown = wait_for(page, f"() => ({ADMONITIONS})() >= {admonitions}", "myst", 20)
    shown = page.evaluate(ADMONITIONS)
    if shown < admonitions:
        problems.append(f"{where}: {shown} of {admonitions} admonitions rendered")
    wait_for(
        page,
        f"() => {{ const [f, n] = ({FIGURES})();"
        f" return f >= {figures} && n >= f; }}",
        "figures",
        20,
    )
    found, loaded = page.evaluate(FIGURES)
    if found < figures or loaded < found:
        problems.append(f"{where}: {loaded} of {figures} figures shown")
    return problems


def check_controls(page: Page, where: str, explorable: bool) -> list[str]:
    """Move each slider and dropdown of the stored charts (Vega-Lite parameters,
    no kernel involved): every chart must draw again, differently."""
    problems, moved = check_page(page, Path(where))
    if explorable and not moved:
        problems.append(f"{where}: no control of an explorable chart found")
    return problems


def check_keyboard(page: Page, where: str) -> list[str]:
    """A focused slider of a chart moves with the arrow keys (JupyterLab's
    command mode would take them to move between cells)."""
    slider = page.locator(".jp-OutputArea input[type=range]").first
    if not slider.count():
        return []
    before = slider.input_value()
    slider.focus()
    key = "ArrowLeft" if before == slider.get_attribute("max") else "ArrowRight"
    page.keyboard.press(key)
    if slider.input_value() == before:
        return [f"{where}: a focused slider does not move with {key}"]
    return []


def run_all(page: Page, where: str, timeout: float = 600) -> list[str]:
    """Run every cell; the errors it printed, or that it did not finish."""
    page.evaluate(
        "() => window.jupyterapp.commands.execute('notebook:run-all-cells')"
    )
    deadline = time.monotonic() + timeout
    time.sleep(2)
    while time.monotonic() < deadline:
        state = page.evaluate(RUN_STATE)
        if state["errors"]:
            return [f"{where}: {error}" for error in state["errors"]]
        if not state["pending"] and not state["busy"]:
            return []
        time.sleep(1)
    return [f"{where}: the cells did not finish within {timeout:.0f} s"]


def open_notebook(page: Page, url: str) -> None:
    page.goto(url, wait_until="domcontentloaded")
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=60_000)
    # the kernel is up once the notebook's session reports a status
    wait_for(
        page,
        "() => window.jupyterapp.shell.currentWidget?.sessionContext?.session"
        "?.kernel?.status === 'idle'",
        "kernel",
        60,
    )


def prepare(tmp: Path, chapters: list[str]) -> tuple[Path, Path]:
    """A copy of ``chapters`` (each pair, the figures, Jupytext's settings) in
    ``tmp/notebooks``, trusted as ``make lab`` trusts them, and the book's Jupyter
    settings with the check's own in ``tmp/config``."""
    root, config = tmp / "notebooks", tmp / "config"
    root.mkdir(parents=True)
    names = [f"{c}{suffix}" for c in chapters for suffix in (".py", ".ipynb")]
    for name in (*names, "jupytext.toml"):
        shutil.copy2(NOTEBOOKS / name, root / name)
    shutil.copytree(NOTEBOOKS / "figures", root / "figures")
    jupyter.configure(config)
    jupyter.merge_json(
        config / "labconfig" / "default_setting_overrides.json", SETTINGS
    )
    jupyter.trust(root)
    return root, config


def pairs(root: Path) -> dict[str, bytes]:
    """Every chapter file in ``root``, as bytes."""
    return {p.name: p.read_bytes() for p in sorted(root.glob("[0-9][0-9]_*.*"))}


def unchanged(root: Path, stored: dict[str, bytes], when: str) -> list[str]:
    """The chapter files in ``root`` that differ from ``stored``, and how."""
    problems = []
    for name, before in stored.items():
        after = (root / name).read_bytes()
        if after == before:
            continue
        problem = f"{name} changed on disk {when}"
        if name.endswith(".ipynb"):
            timed = [
                sum("execution" in c.get("metadata", {}) for c in nb["cells"])
                for nb in (json.loads(before), json.loads(after))
            ]
            problem += f" ({timed[1]} of {timed[0]} stored timings kept)"
        problems.append(problem)
    return problems


def close(page: Page) -> None:
    page.evaluate(
        "() => window.jupyterapp.shell.currentWidget.sessionContext.shutdown()"
    )
    page.close()


def check_opens_unmodified(
    context, base: str, token: str, chapters: list[str]
) -> list[str]:
    """Each chapter, opened in JupyterLab (one after another in one page) and its
    stored charts drawn, is not marked modified: a reader who only reads is
    asked nothing on closing."""
    page = context.new_page()
    page.goto(f"{base}/lab?reset&token={token}", wait_until="domcontentloaded")
    wait_for(page, "() => window.jupyterapp?.restored !== undefined", "lab", 60)
    page.evaluate("() => window.jupyterapp.restored.then(() => true)")
    problems = []
    for chapter in chapters:
        page.evaluate(
            """async path => {
              const widget = await window.jupyterapp.commands.execute(
                  'docmanager:open', {path});
              await widget.context.ready;
              return true; }""",
            f"{chapter}.ipynb",
        )
        charts = expected(chapter)[0]
        drawn = wait_for(
            page,
            f"() => {{ const d = ({CHARTS_DRAWN})(); "
            f"return d.length >= {charts} && d.every(x => x); }}",
            "charts",
            60,
        )
        if not drawn:
            problems.append(
                f"JupyterLab {chapter}.ipynb: its charts were not drawn"
            )
        # JupyterLab would add a chart's PNG just after drawing it
        elif wait_for(page, DIRTY, "modified", 3):
            problems.append(f"JupyterLab {chapter}.ipynb: opens marked modified")
        page.evaluate(
            """async () => { const widget = window.jupyterapp.shell.currentWidget;
              await widget.sessionContext.shutdown(); widget.dispose(); }"""
        )
    if page.get_by_text("Jupyter news").count():
        problems.append("JupyterLab asks about Jupyter news on its first start")
    page.close()
    return problems


# What a narrow window would have to scroll sideways or cut: a chart (its drawing,
# its controls, its actions menu) wider than its cell, a solution's code wider
# than its box, a menu bar that hides menus. Each as "what: its width > room".
OVERFLOWS = f"""() => {{
  const wide = [];
  const check = (what, el, room) => {{
    const width = Math.max(el.scrollWidth, el.getBoundingClientRect().width);
    if (width > room + 1) wide.push(`${{what}}: ${{Math.round(width)}} px`
                                    + ` > ${{Math.round(room)}} px`);
  }};
  {ROOT_NODE}.querySelectorAll({CHART}).forEach((chart, i) => {{
    const cell = chart.getBoundingClientRect();
    check(`chart ${{i + 1}}`, chart, chart.clientWidth);
    for (const part of chart.querySelectorAll('.marks, form, details')) {{
      const box = part.getBoundingClientRect();
      if (box.left < cell.left - 1 || box.right > cell.right + 1)
        wide.push(`chart ${{i + 1}}'s ${{part.tagName.toLowerCase()}} at `
          + `${{Math.round(box.left)}}-${{Math.round(box.right)}} px, its cell `
          + `${{Math.round(cell.left)}}-${{Math.round(cell.right)}} px`);
    }}
  }});
  {ROOT_NODE}.querySelectorAll('.jp-MarkdownCell details pre').forEach(
    (pre, i) => check(`solution code ${{i + 1}}`, pre, pre.clientWidth));
  const menu = document.querySelector('#jp-MainMenu');
  if (menu) check('the menu bar', menu, menu.clientWidth);
  return wide;
}}"""


def check_fits(page: Page, where: str) -> list[str]:
    """Nothing scrolls sideways inside a cell or is cut: charts, solution code
    (its toggles opened) and the menu bar fit the window."""
    return [f"{where}: {wide}" for wide in page.evaluate(OVERFLOWS)]


TRY_IT_CELL = """() => {
  const cells = window.jupyterapp.shell.currentWidget.content.model.cells;
  for (let i = 0; i < cells.length; i++)
    if ((cells.get(i).getMetadata('tags') ?? []).includes('try-it')) return i;
  return -1;
}"""


def check_try_it(context, base: str, token: str, chapter: str) -> list[str]:
    """The chapter's ``.py`` at full size: its try-it cell, given the reader's
    text (a review in German) and run alone, answers with the out-of-data
    warning within a minute; saving then leaves the pair as it was."""
    where = f"JupyterLab {chapter}.py at full size"
    page = context.new_page()
    open_notebook(page, f"{base}/lab/tree/{chapter}.py?reset&token={token}")
    index = page.evaluate(TRY_IT_CELL)
    if index < 0:
        close(page)
        return [f"{where}: no cell tagged try-it"]
    cell = f"window.jupyterapp.shell.currentWidget.content.model.cells.get({index})"
    page.evaluate(
        f"""() => {{ const cell = {cell};
        cell.sharedModel.setSource(cell.sharedModel.getSource()
            .replace(/^REVIEW = .*$/m, {json.dumps(TRY_IT_INPUT)})); }}"""
    )
    start = time.monotonic()
    page.evaluate(
        f"""() => {{ const app = window.jupyterapp;
          app.shell.currentWidget.content.activeCellIndex = {index};
          app.commands.execute('notebook:run-cell'); }}"""
    )
    # the stored answer is there until the new one replaces it
    answer = wait_for(
        page,
        f"""() => {{ const text = {cell}.outputs.toJSON()
            .map(o => o.text ?? o.ename ?? '').join('');
          return /warning|rror/.test(text) ? text : null; }}""",
        "answer",
        120,
    )
    seconds = time.monotonic() - start
    problems = []
    if not answer:
        problems.append(f"{where}: the try-it cell gave no answer in 120 s")
    elif not answer.startswith("warning: review 1:") or seconds > 60:
        problems.append(
            f"{where}: the try-it cell answered in {seconds:.0f} s "
            f"(at most 60), with the out-of-data warning expected: {answer!r}"
        )
    page.evaluate("() => window.jupyterapp.commands.execute('docmanager:save')")
    if wait_for(page, f"() => !({DIRTY})()", "saved", 30) is not True:
        problems.append(f"{where}: the chapter was not saved")
    print(f"  try-it cell answered in {seconds:.0f} s", flush=True)
    close(page)
    return problems


def check_saved_silently(page: Page, where: str) -> list[str]:
    """Saving at CI size writes the chapter as stored, with no dialog."""
    page.evaluate(
        "() => window.jupyterapp.commands.execute('docmanager:save')"
        ".catch(() => null)"
    )
    dialog = wait_for(
        page,
        "() => document.querySelector('.jp-Dialog')?.innerText ?? ''",
        "dialog",
        5,
    )
    if dialog:
        page.keyboard.press("Escape")
        return [f"{where}: saving at CI size opened a dialog: {dialog!r}"]
    return []


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chapter", default="06_masks")
    parser.add_argument("--screenshot", type=Path, help="folder for screenshots")
    parser.add_argument("--browser", default=find_browser())
    args = parser.parse_args()
    if args.browser is None:
        print(BROWSER_HINT)
        return 1
    if os.environ.get("AT_SIZE", "").lower() != "ci":
        print("lab check: run it with AT_SIZE=ci (make lab-check)")
        return 2
    chapter = args.chapter
    chapters = sorted(p.stem for p in NOTEBOOKS.glob("[0-9][0-9]_*.py"))
    charts, admonitions, figures = expected(chapter)
    toggles = (NOTEBOOKS / f"{chapter}.py").read_text().count("{dropdown} Solution")
    explorable = b'"bind"' in (NOTEBOOKS / f"{chapter}.ipynb").read_bytes()
    problems: list[str] = []
    start = time.monotonic()
    blocked: list[str] = []
    logged: list[str] = []  # the browser console's messages

    def listen(message) -> None:
        logged.append(message.text)

    def route(route_, request) -> None:
        if LOOPBACK.match(request.url) or request.url.startswith(
            ("data:", "blob:")
        ):
            route_.continue_()
        else:
            blocked.append(request.url)
            route_.abort()

    # inside the repository (its ignored build/), where a chapter finds results/
    (ROOT / "build").mkdir(exist_ok=True)
    with (
        tempfile.TemporaryDirectory(dir=ROOT / "build", prefix="lab-check-") as tmp,
        sync_playwright() as p,
    ):
        browser = p.chromium.launch(
            executable_path=args.browser, headless=True, args=CHROMIUM_FLAGS
        )
        context = browser.new_context(viewport={"width": 1280, "height": 1000})
        context.route("**/*", route)
        context.on("console", listen)
        root, config = prepare(Path(tmp) / "ci", chapters)
        stored = pairs(root)
        port, token = free_port(), secrets.token_hex(16)
        server = start_lab(root, config, port, token)
        base = f"http://127.0.0.1:{port}"
        try:
            print(f"  every chapter opened ({time.monotonic() - start:.0f} s)")
            problems += check_opens_unmodified(context, base, token, chapters)
            for name in (f"{chapter}.ipynb", f"{chapter}.py"):
                where = f"JupyterLab {name}"
                print(f"  {where} ({time.monotonic() - start:.0f} s)", flush=True)
                page = context.new_page()
                open_notebook(page, f"{base}/lab/tree/{name}?reset&token={token}")
                problems += check_rendered(
                    page, f"{where}, stored", charts, admonitions, figures
                )
                if name.endswith(".ipynb"):
                    problems += check_controls(page, where, explorable)
                    problems += check_keyboard(page, where)
                problems += run_all(page, where)
                problems += check_rendered(
                    page, f"{where}, run", charts, admonitions, figures
                )
                problems += check_solutions(page, where, toggles)
                if args.screenshot:
                    page.screenshot(path=args.screenshot / f"lab-{name}.png")
                problems += check_saved_silently(page, where)
                close(page)
            print(f"  Notebook 7 ({time.monotonic() - start:.0f} s)", flush=True)
            phone = browser.new_context(viewport={"width": 390, "height": 844})
            phone.route("**/*", route)
            phone.on("console", listen)
            page = phone.new_page()
            page.goto(
                f"{base}/notebooks/{chapter}.ipynb?token={token}",
                wait_until="domcontentloaded",
            )
            page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=60_000)
            where = f"Notebook 7 {chapter}.ipynb at 390 px"
            problems += check_rendered(page, where, charts, admonitions, figures)
            problems += check_controls(page, where, explorable)
            problems += check_solutions(page, where, toggles)
            problems += check_fits(page, where)
            if page.get_by_text("Not Trusted").count():
                problems.append(f"{where}: marked Not Trusted")
            if args.screenshot:
                page.screenshot(path=args.screenshot / "notebook-390.png")
            phone.close()
        finally:
            server.terminate()
            server.wait(timeout=30)
        problems += unchanged(root, stored, "at CI size")
        log = (config / "lab.log").read_text(errors="replace").splitlines()
        problems += [f"server log: {line}" for line in log if "not trusted" in line]
        # a try-it cell alone at full size, then saved
        print(
            f"  try-it at full size ({time.monotonic() - start:.0f} s)", flush=True
        )
        root, config = prepare(Path(tmp) / "full", [TRY_IT_CHAPTER])
        stored = pairs(root)
        server = start_lab(root, config, port, token, size="full")
        try:
            problems += check_try_it(context, base, token, TRY_IT_CHAPTER)
        finally:
            server.terminate()
            server.wait(timeout=30)
        problems += unchanged(root, stored, "after trying it and saving")
        browser.close()
    problems += [f"request left the machine: {url}" for url in sorted(set(blocked))]
    problems += [
        f"browser console, {logged.count(text)} times: {text}"
        for text in sorted(set(logged))
        if UNRESOLVED in text
    ]
    for problem in problems:
        print("PROBLEM", problem)
    print(
        f"lab check: {len(chapters)} chapters opened; {chapter} ({charts} charts, "
        f"{admonitions} admonitions) in JupyterLab and Notebook 7; "
        f"{TRY_IT_CHAPTER}'s try-it cell at full size; "
        f"{time.monotonic() - start:.0f} s, {len(problems)} problems"
    )
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
