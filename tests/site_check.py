"""Open the built site in a headless browser; check what a reader sees.

For every chapter page: the math is typeset by the bundled MathJax (no raw TeX such
as ``$``, ``\\(``, ``\\frac`` or ``^\\top`` left in the text outside math and code,
no MathJax error), every Altair chart is drawn by the bundled Vega (no error box)
and fits the page column (at 390 px too), no script fails, every figure (an image
of the article) loads and has alt text, and no request leaves the machine (every
URL the page asks for is a local file); and no page of the book is wider than a
390 px phone. Run after ``jupyter-book build book``:

    python tests/site_check.py book/_build/html [--screenshot PAGE_STEM OUT.png]

The browser is the doctor's ``find_browser()``: ``AT_BROWSER``, else Chromium,
Chrome or Edge where the platform keeps them, else the one
``playwright install chromium`` downloads.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from playwright.sync_api import sync_playwright

from annotated_transformer.doctor import BROWSER_HINT, find_browser

LOCAL_SCHEMES = ("file:", "data:", "blob:", "about:")
CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

# Charts whose cell output is wider than the page column (at the 1280 px window
# below; from 1200 to 1279 px the column is 624 px), so that the reader must scroll
# sideways (book.css lets a wide output scroll rather than be
# cut): (title, extra pixels).
SCROLLING_CHARTS = """() => [...document.querySelectorAll("div[id^='altair-viz-']")]
.flatMap(chart => {
  const output = chart.closest('.cell_output .output');
  const extra = output ? output.scrollWidth - output.clientWidth : 0;
  const title = chart.querySelector('.role-title-text');
  return extra > 0 ? [[title ? title.textContent : chart.id, extra]] : [];
})"""

# Charts drawn wider than the output box that holds them, at the window's width:
# cut off, or scrolling sideways (title, extra pixels). At a phone's width every
# chart must fit its column (book.css and rendering.fit_column see to it).
CLIPPED_CHARTS = """() => [...document.querySelectorAll('.vega-embed')]
.flatMap(chart => {
  const box = chart.closest('.cell_output .output') || chart.parentElement;
  const drawing = chart.querySelector('svg.marks, canvas');
  if (!drawing) return [];
  const right = drawing.getBoundingClientRect().right;
  const edge = box.getBoundingClientRect().right;
  const scrolled = box.scrollWidth - box.clientWidth;
  const extra = Math.max(Math.round(right - edge), scrolled);
  const title = chart.querySelector('.role-title-text');
  return extra > 1 ? [[title ? title.textContent : chart.id, extra]] : [];
})"""

# The article's images (the diagrams): [src, loaded with a width, alt text] each.
FIGURES = """() => [...document.querySelectorAll('article img')]
.map(img => [img.getAttribute('src'), img.complete && img.naturalWidth > 0,
             (img.getAttribute('alt') || '').trim()])"""


def check_figures(page, name: str) -> tuple[list[str], int]:
    """Every image of the article loaded (naturalWidth > 0) and
    says what it shows (alt)."""
    page.wait_for_function(
        "() => [...document.querySelectorAll('article img')].every(img => "
        "img.complete)",
        timeout=20_000,
    )
    images = page.evaluate(FIGURES)
    problems = [
        f"{name}: figure {src} did not load"
        for src, loaded, _ in images
        if not loaded
    ]
    problems += [
        f"{name}: figure {src} has no alt text" for src, _, alt in images if not alt
    ]
    return problems, len(images)


# Raw TeX that a reader would see: text outside math, code and outputs that still
# holds a dollar sign not followed by a digit (an amount such as "$5" is prose), a
# TeX delimiter, a control word such as \\frac, or a sub/superscript such as ^\\top
# or _{ij}.
RAW_TEX = r"""() => {
  const skip = 'mjx-container, .math, pre, code, .cell_output, script, style, '
    + '.MathJax';
  const tex = /\$(?!\d)|\\[()[\]]|\\[A-Za-z]{2,}|[_^]\{|\^\\/;
  const found = [];
  const walker = document.createTreeWalker(
    document.querySelector('article') || document.body, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    if (node.parentElement.closest(skip)) continue;
    const match = node.textContent.match(tex);
    if (match) {
      const text = node.textContent, at = match.index;
      found.push(text.slice(Math.max(0, at - 40), at + 40).replace(/\s+/g, ' '));
    }
  }
  return found;
}"""

# Math that MathJax left untypeset or could not parse (it shows
# the TeX or a red error).
UNTYPESET = """() => [
  ...[...document.querySelectorAll('article .math')]
    .filter(m => !m.querySelector('mjx-container') && !m.closest('mjx-container'))
    .map(m => 'untypeset: ' + m.textContent.slice(0, 80)),
  ...[...document.querySelectorAll('article mjx-merror')]
    .map(m => 'MathJax error: '
      + (m.getAttribute('data-mjx-error') || m.textContent)),
]"""


def check_page(page, path: Path) -> tuple[list[str], int, int, int]:
    """Load one page; return (problems found, charts, typeset
    math elements, figures)."""
    outside: list[str] = []
    page.on(
        "request",
        lambda r: (
            None if r.url.startswith(LOCAL_SCHEMES) else outside.append(r.url)
        ),
    )
    script_errors: list[str] = []
    page.on("pageerror", lambda error: script_errors.append(str(error)))
    page.goto(path.as_uri(), wait_until="load")
    problems = []
    charts = page.locator("div[id^='altair-viz-']").count()
    if charts:
        try:
            page.wait_for_function(
                "n => document.querySelectorAll("
                "\"div[id^='altair-viz-'] svg, div[id^='altair-viz-'] "
                'canvas").length >= n',
                arg=charts,
                timeout=20_000,
            )
        except Exception:
            drawn = page.locator(
                "div[id^='altair-viz-'] svg, div[id^='altair-viz-'] canvas"
            ).count()
            problems.append(
                f"{path.name}: only {drawn} of {charts} Altair charts were drawn"
            )
        errors = page.locator("div[id^='altair-viz-'] .error").all_inner_texts()
        problems += [f"{path.name}: chart error: {text[:200]}" for text in errors]
        problems += [
            f"{path.name}: chart {title!r} makes its output scroll by {extra} px: "
            "narrow it"
            for title, extra in page.evaluate(SCROLLING_CHARTS)
        ]
    has_math = "$" in page.content() or page.locator(".math").count() > 0
    if has_math:
        try:
            page.wait_for_selector(
                "article mjx-container", state="attached", timeout=20_000
            )
        except Exception:
            problems.append(f"{path.name}: math is not typeset (no mjx-container)")
        else:
            page.wait_for_timeout(
                500
            )  # let MathJax finish the elements after the first
        problems += [f"{path.name}: {text}" for text in page.evaluate(UNTYPESET)]
    problems += [
        f"{path.name}: raw TeX in the text: {t!r}" for t in page.evaluate(RAW_TEX)
    ]
    found, figures = check_figures(page, path.name)
    problems += found
    problems += [f"{path.name}: script error: {e[:200]}" for e in script_errors]
    # a cell waiting for the reader's input says how to run it (kernel_notes.py)
    try_it = page.locator("div.cell_input", has_text="try_it(").count()
    note = "This cell runs in Jupyter"
    notes = page.locator(".admonition", has_text=note).count()
    if notes < try_it:
        missing = try_it - notes
        problems.append(f"{path.name}: {missing} try-it cell(s) without {note!r}")
    problems += [
        f"{path.name}: request left the machine: {url}"
        for url in sorted(set(outside))
    ]
    return problems, charts, page.locator("mjx-container").count(), figures


PHONE = 390  # px: a phone's width, at which no page may scroll sideways
NOT_READ = ("search", "genindex")  # the site's own pages, not the book's


def wider_than_a_phone(page, path: Path) -> list[str]:
    """The loaded ``page`` narrowed to :data:`PHONE` px: wide code, tables and
    equations scroll inside their own boxes, so the page itself must not be wider
    than the screen."""
    page.set_viewport_size({"width": PHONE, "height": 800})
    page.wait_for_timeout(300)  # let the theme lay out the page again
    extra = page.evaluate("document.documentElement.scrollWidth") - PHONE
    found = (
        [f"{path.name}: at {PHONE} px the page scrolls sideways by {extra} px"]
        if extra > 0
        else []
    )
    return found + [
        f"{path.name}: at {PHONE} px chart {title!r} is {extra} px wider than its "
        "column"
        for title, extra in page.evaluate(CLIPPED_CHARTS)
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "site", type=Path, help="the built site, e.g. book/_build/html"
    )
    parser.add_argument("--screenshot", nargs=2, metavar=("PAGE_STEM", "PNG"))
    parser.add_argument(
        "--browser", default=find_browser(), help="Chromium, Chrome or Edge"
    )
    args = parser.parse_args()
    if args.browser is None:
        print(BROWSER_HINT)
        return 1

    pages = sorted((args.site.resolve() / "notebooks").glob("*.html"))
    if not pages:
        print(
            f"site check: no chapter pages under {args.site / 'notebooks'}; build "
            "the site first"
        )
        return 1
    problems: list[str] = []
    with tempfile.TemporaryDirectory() as profile, sync_playwright() as p:
        browser = p.chromium.launch_persistent_context(
            profile,
            executable_path=args.browser,
            headless=True,
            args=CHROMIUM_FLAGS,
            viewport={
                "width": 1280,
                "height": 1600,
            },  # a laptop: a 688 px page column
        )
        phone: list[str] = []
        for path in pages:
            page = browser.new_page()
            found, charts, math, figures = check_page(page, path)
            problems += found
            print(
                f"  {path.name}: {charts} charts, {math} math elements, {figures} "
                f"figures, {len(found)} problems"
            )
            if args.screenshot and path.stem == args.screenshot[0]:
                page.screenshot(path=args.screenshot[1], full_page=False)
            phone += wider_than_a_phone(page, path)
            page.close()
        # the pages around the chapters (preface, results, ...), at a phone's width
        for path in sorted(args.site.resolve().glob("*.html")):
            if path.stem in NOT_READ:
                continue
            page = browser.new_page()
            page.goto(path.as_uri(), wait_until="load")
            phone += wider_than_a_phone(page, path)
            page.close()
        print(f"  at {PHONE} px: {len(phone)} page(s) wider than the screen")
        problems += phone
        browser.close()
    for problem in problems:
        print("PROBLEM", problem)
    print(f"site check: {len(pages)} pages, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
