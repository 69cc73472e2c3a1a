"""Move every control of the site's explorable charts in a headless browser; check
that the chart is drawn again, differently.

For every chapter page whose charts bind parameters to inputs (Vega-Lite's
``bind``): each slider and dropdown is set to another value, and the chart's
drawing (its SVG, or its canvas's pixels) must change, with no error box, no
request leaving the machine and no chart wider than its column; at a 1280 px
laptop window and at a 390 px phone. Run
after ``jupyter-book build book``:

    python tests/explorables_check.py book/_build/html
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from playwright.sync_api import sync_playwright
from site_check import CHROMIUM_FLAGS, CLIPPED_CHARTS, LOCAL_SCHEMES

from annotated_transformer.doctor import BROWSER_HINT, find_browser

WIDTHS = (1280, 390)

# Vega's inputs for bound parameters (sliders, dropdowns, checkboxes, radios).
CONTROLS = ".vega-bindings input, .vega-bindings select"

# The drawing of the chart that holds control ``n`` of the page.
DRAWING = """n => {
  const input = document.querySelectorAll(CONTROLS)[n];
  const chart = input.closest('.vega-embed');
  const svg = chart.querySelector('svg.marks');
  if (svg) return svg.outerHTML;
  const canvas = chart.querySelector('canvas');
  return canvas ? canvas.toDataURL() : '';
}"""

# Set input ``n`` to another value as a reader would, and fire the event Vega
# listens to; returns what it was set to.
MOVE = """n => {
  const input = document.querySelectorAll(CONTROLS)[n];
  if (input.tagName === 'SELECT') {
    input.selectedIndex = (input.selectedIndex + 1) % input.options.length;
    input.dispatchEvent(new Event('change', {bubbles: true}));
  } else if (input.type === 'range') {
    const low = +input.min, high = +input.max, step = +input.step || 1;
    const value = +input.value + step <= high ? +input.value + step : low;
    input.value = value;
    input.dispatchEvent(new Event('input', {bubbles: true}));
  } else {
    input.checked = !input.checked;
    input.dispatchEvent(new Event('change', {bubbles: true}));
  }
  return (input.name || input.parentElement.textContent).trim() + ' = '
    + (input.tagName === 'SELECT' ? input.options[input.selectedIndex].text
       : input.type === 'range' ? input.value : input.checked);
}"""
DRAWING, MOVE = (
    script.replace("CONTROLS", repr(CONTROLS)) for script in (DRAWING, MOVE)
)


def check_page(page, path: Path) -> tuple[list[str], int]:
    """Move each control of ``page`` once; (problems, controls moved)."""
    problems: list[str] = []
    page.wait_for_function(
        "() => [...document.querySelectorAll('.vega-embed')].every("
        "e => e.querySelector('svg.marks, canvas'))",
        timeout=20_000,
    )
    count = page.locator(CONTROLS).count()
    for n in range(count):
        before = page.evaluate(DRAWING, n)
        moved = page.evaluate(MOVE, n)
        try:
            page.wait_for_function(
                f"before => ({DRAWING})({n}) !== before", arg=before, timeout=3_000
            )
        except Exception:
            problems.append(
                f"{path.name}: moving {moved!r} left its chart unchanged"
            )
    errors = page.locator(".vega-embed .error").all_inner_texts()
    problems += [f"{path.name}: chart error: {text[:200]}" for text in errors]
    problems += [
        f"{path.name}: chart {title!r} is {extra} px wider than its column"
        for title, extra in page.evaluate(CLIPPED_CHARTS)
    ]
    return problems, count


def main() -> int:
    start = time.perf_counter()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("site", type=Path, help="the built site (book/_build/html)")
    parser.add_argument(
        "--browser", help="Chromium, Chrome or Edge (default: found)"
    )
    args = parser.parse_args()
    executable = args.browser or find_browser()
    if executable is None:
        print(BROWSER_HINT)
        return 1
    # pages whose charts bind a parameter to an input
    pages = [
        path
        for path in sorted((args.site.resolve() / "notebooks").glob("*.html"))
        if '"bind"' in path.read_text(encoding="utf-8")
    ]
    if not pages:
        print(f"explorables check: no page under {args.site} has a bound control")
        return 1
    problems: list[str] = []
    with sync_playwright() as p:
        chromium = {"executable_path": executable, "args": CHROMIUM_FLAGS}
        browser = p.chromium.launch(headless=True, **chromium)
        for path in pages:
            # checked at the laptop's width, then narrowed to the phone's and
            # reloaded: each control is moved from the chart's first state (from
            # the state the first pass left, a move can rightly change nothing,
            # e.g. the temperature once top-k is 1)
            page = browser.new_page(viewport={"width": WIDTHS[0], "height": 900})
            outside: list[str] = []
            page.on(
                "request",
                lambda r, out=outside: (
                    None if r.url.startswith(LOCAL_SCHEMES) else out.append(r.url)
                ),
            )
            page.goto(path.as_uri(), wait_until="load")
            for width in WIDTHS:
                if width != WIDTHS[0]:
                    page.set_viewport_size({"width": width, "height": 900})
                    page.reload(wait_until="load")
                found, moved = check_page(page, path)
                problems += [f"{width} px: {problem}" for problem in found]
                say = f"{moved} controls, {len(found)} problems"
                print(f"  {width} px {path.name}: {say}")
            problems += [
                f"{path.name}: request left the machine: {u}" for u in outside
            ]
            page.close()
        browser.close()
    for problem in problems:
        print("PROBLEM", problem)
    seconds = time.perf_counter() - start
    print(
        f"explorables check: {len(pages)} pages at {len(WIDTHS)} widths, "
        f"{len(problems)} problems, {seconds:.0f} s"
    )
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
