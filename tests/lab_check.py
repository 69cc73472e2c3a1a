"""Open a chapter in JupyterLab and Notebook 7 in a headless browser, offline; check
what a reader sees.

JupyterLab is started on 127.0.0.1 over a copy of the chapter (its ``.py``, its
``.ipynb`` and the figures, in ``build/``), so nothing in ``notebooks/`` is touched;
the browser may reach nothing but the loopback address. Then:

- the ``.ipynb`` in JupyterLab (1280 px): the stored charts are drawn and the MyST
  markup is rendered before any cell runs; each control of an explorable chart
  (a slider, a dropdown) redraws its chart when moved, with no kernel involved;
  all cells run (``AT_SIZE=ci``) with no
  error output and every chart drawn again; saving is refused (the guard on CI-size
  outputs) and the file on disk is unchanged;
- the ``.py`` opens as a notebook (Jupytext's viewer), with the stored charts of its
  pair, and runs the same way;
- the ``.ipynb`` in Notebook 7 at a phone's 390 px: charts and MyST rendered, the
  controls redraw their charts.

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

from annotated_transformer.book.rendering import MIME_TYPE
from annotated_transformer.doctor import BROWSER_HINT, find_browser

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--no-first-run"]
LOOPBACK = re.compile(r"^(https?|wss?)://(127\.0\.0\.1|localhost)(:\d+)?/")
# MyST markup that must not reach the reader as text.
RAW_MYST = re.compile(r":::\{|\{ref\}`|^\([\w-]+\)=$|```\{", re.M)
# Autosave off (a CI-size notebook must not be saved; the guard would refuse it),
# and every cell laid out, so that the page holds every output.
SETTINGS = {
    "@jupyterlab/docmanager-extension:plugin": {"autosave": False},
    "@jupyterlab/notebook-extension:tracker": {"windowingMode": "none"},
    "@jupyterlab/apputils-extension:notification": {"fetchNews": "false"},
}
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


def start_lab(root: Path, config: Path, port: int, token: str) -> subprocess.Popen:
    """JupyterLab on 127.0.0.1:``port`` over ``root``; its log: config/lab.log."""
    env = {**os.environ, "JUPYTER_CONFIG_DIR": str(config)}
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
    charts, admonitions, figures = expected(chapter)
    toggles = (NOTEBOOKS / f"{chapter}.py").read_text().count("{dropdown} Solution")
    problems: list[str] = []
    start = time.monotonic()
    # inside the repository (its ignored build/), where a chapter finds results/
    (ROOT / "build").mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(
        dir=ROOT / "build", prefix="lab-check-"
    ) as tmp:
        root, config = Path(tmp) / "notebooks", Path(tmp) / "config"
        root.mkdir()
        for name in (f"{chapter}.py", f"{chapter}.ipynb", "jupytext.toml"):
            shutil.copy2(NOTEBOOKS / name, root / name)
        shutil.copytree(NOTEBOOKS / "figures", root / "figures")
        stored = (root / f"{chapter}.ipynb").read_bytes()
        explorable = b'"bind"' in stored  # a chart with controls
        overrides = config / "labconfig" / "default_setting_overrides.json"
        overrides.parent.mkdir(parents=True)
        overrides.write_text(json.dumps(SETTINGS))
        port, token = free_port(), secrets.token_hex(16)
        server = start_lab(root, config, port, token)
        blocked: list[str] = []

        def route(route_, request) -> None:
            if LOOPBACK.match(request.url) or request.url.startswith(
                ("data:", "blob:")
            ):
                route_.continue_()
            else:
                blocked.append(request.url)
                route_.abort()

        try:
            with sync_playwright() as p:
                browser = p.chromium.launch(
                    executable_path=args.browser, headless=True, args=CHROMIUM_FLAGS
                )
                context = browser.new_context(
                    viewport={"width": 1280, "height": 1000}
                )
                context.route("**/*", route)
                base = f"http://127.0.0.1:{port}"
                for name in (f"{chapter}.ipynb", f"{chapter}.py"):
                    where = f"JupyterLab {name}"
                    print(
                        f"  {where} ({time.monotonic() - start:.0f} s)", flush=True
                    )
                    page = context.new_page()
                    open_notebook(
                        page, f"{base}/lab/tree/{name}?reset&token={token}"
                    )
                    problems += check_rendered(
                        page, f"{where}, stored", charts, admonitions, figures
                    )
                    if name.endswith(".ipynb"):
                        problems += check_controls(page, where, explorable)
                    problems += run_all(page, where)
                    problems += check_rendered(
                        page, f"{where}, run", charts, admonitions, figures
                    )
                    problems += check_solutions(page, where, toggles)
                    if args.screenshot:
                        page.screenshot(path=args.screenshot / f"lab-{name}.png")
                    if name.endswith(".ipynb"):
                        problems += check_save_refused(page, where)
                    page.evaluate(
                        "() => window.jupyterapp.shell.currentWidget.sessionContext"
                        ".shutdown()"
                    )
                    page.close()
                print(
                    f"  Notebook 7 ({time.monotonic() - start:.0f} s)", flush=True
                )
                phone = browser.new_context(viewport={"width": 390, "height": 844})
                phone.route("**/*", route)
                page = phone.new_page()
                page.goto(
                    f"{base}/notebooks/{chapter}.ipynb?token={token}",
                    wait_until="domcontentloaded",
                )
                page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=60_000)
                problems += check_rendered(
                    page,
                    f"Notebook 7 {chapter}.ipynb at 390 px",
                    charts,
                    admonitions,
                    figures,
                )
                problems += check_controls(
                    page, f"Notebook 7 {chapter}.ipynb at 390 px", explorable
                )
                if args.screenshot:
                    page.screenshot(path=args.screenshot / "notebook-390.png")
                browser.close()
        finally:
            server.terminate()
            server.wait(timeout=30)
        if (root / f"{chapter}.ipynb").read_bytes() != stored:
            problems.append(f"{chapter}.ipynb changed on disk at CI size")
        problems += [
            f"request left the machine: {url}" for url in sorted(set(blocked))
        ]
    for problem in problems:
        print("PROBLEM", problem)
    print(
        f"lab check: {chapter} ({charts} charts, {admonitions} admonitions) in "
        f"JupyterLab and Notebook 7, {time.monotonic() - start:.0f} s, "
        f"{len(problems)} problems"
    )
    return 1 if problems else 0


def check_save_refused(page: Page, where: str) -> list[str]:
    """Saving at CI size must fail with the guard's message."""
    page.evaluate(
        "() => window.jupyterapp.commands.execute('docmanager:save')"
        ".catch(() => null)"
    )
    dialog = wait_for(
        page,
        "() => document.querySelector('.jp-Dialog')?.innerText ?? ''",
        "dialog",
        20,
    )
    page.keyboard.press("Escape")
    if "AT_SIZE=ci" not in str(dialog):
        return [f"{where}: saving at CI size was not refused (dialog: {dialog!r})"]
    return []


if __name__ == "__main__":
    sys.exit(main())
