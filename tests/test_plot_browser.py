"""The timeline and report pages rendered by a real browser (headless Chromium), offline.

Chromium runs each page from a ``file://`` URL with the network closed to it (``--disable-*``
flags, no proxy) and a virtual-time budget, then dumps the rendered DOM and takes a screenshot.
The test asserts that plotly drew every figure (each figure div gets ``data-rendered="1"`` once
drawn), that the legends and axis titles are in the SVG, and that the screenshot shows the lane
colours. Skipped, with the reason, only where Chromium is not installed.

Run: pytest tests/test_plot_browser.py
"""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from sortedrl.compare import PolicySpec, run_compare
from sortedrl.plot.report import PALETTE, write_report
from sortedrl.plot.timeline_plot import COLORS, write_timeline_html
from sortedrl.policies.registry import make_policy
from sortedrl.sim.cluster import preset
from sortedrl.sim.run import simulate
from sortedrl.traces.synth import synthesize

CLUSTER = "h100-llama3.1-8b-2gpu-8seq"
WIDTH, HEIGHT = 1400, 1300
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-extensions", "--hide-scrollbars", "--mute-audio",
         "--proxy-server=127.0.0.1:9", "--virtual-time-budget=20000",
         "--enable-logging=stderr", "--v=0",
         f"--window-size={WIDTH},{HEIGHT}"]


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None and Path("/usr/bin/chromium").exists():
        found = "/usr/bin/chromium"
    if found is None:
        pytest.skip("chromium is not installed: apt-get install chromium (Debian) to run the "
                    "browser test")
    return found


def render(page: Path, tmp: Path) -> tuple[str, np.ndarray]:
    """The DOM after the scripts ran, and the screenshot as an (H, W, 3) uint8 array; the
    page's console messages are kept in ``CONSOLE[page]``."""
    shot = tmp / f"{page.stem}.png"
    cmd = [chromium(), *FLAGS, f"--user-data-dir={tmp / 'profile'}", f"--screenshot={shot}",
           "--dump-dom", page.resolve().as_uri()]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    CONSOLE[page] = [line for line in done.stderr.splitlines() if ":CONSOLE" in line]
    with Image.open(shot) as im:
        pixels = np.asarray(im.convert("RGB"))
    return done.stdout, pixels


CONSOLE: dict[Path, list[str]] = {}


def legend_texts(dom: str) -> list[str]:
    """Entries of every legend (plotly draws legend N's texts with class legendNtext)."""
    return [html.unescape(t) for t in re.findall(r'class="legend\d*text"[^>]*>([^<]*)<', dom)]


def axis_titles(dom: str, axis: str) -> list[str]:
    """Titles of the x or y axes of every subplot (classes xtitle, x2title, ...)."""
    return [html.unescape(t) for t in re.findall(rf'class="{axis}\d*title"[^>]*>([^<]*)<', dom)]


def rgb(hex_color: str) -> np.ndarray:
    return np.array([int(hex_color[i:i + 2], 16) for i in (1, 3, 5)], dtype=np.uint8)


def share_of(pixels: np.ndarray, color: str) -> float:
    return float(np.mean(np.all(pixels == rgb(color), axis=-1)))


def check_not_blank(pixels: np.ndarray) -> None:
    assert pixels.shape == (HEIGHT, WIDTH, 3)
    colors = np.unique(pixels.reshape(-1, 3), axis=0)
    assert len(colors) >= 100, len(colors)  # text, lines, fills: not a flat page
    background = np.all(pixels == 255, axis=-1)
    assert 0.12 < 1 - background.mean() < 0.95  # the timeline page of the small run draws ~15% ink


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    root = tmp_path_factory.mktemp("pages")
    tr = synthesize("logic-8k", prompts=16, group_size=2, steps=2)
    r = simulate(tr, make_policy("sortedrl", [], tr), preset(CLUSTER))
    timeline = write_timeline_html(r.timeline, root / "run" / "timeline.html", r.summary)
    cmp = root / "cmp"
    summaries = []
    for spec, res in run_compare(tr, [PolicySpec("sync", "sync"),
                                      PolicySpec("oracle_sorted", "oracle_sorted")],
                                 preset(CLUSTER)):
        (cmp / spec.label).mkdir(parents=True)
        res.timeline.write_jsonl(cmp / spec.label / "timeline.jsonl")
        summaries.append({"label": spec.label, **res.summary})
    (cmp / "compare.json").write_text(json.dumps(summaries))
    return timeline, write_report(cmp), r


def test_timeline_page_renders_every_lane_in_chromium(pages, tmp_path):
    timeline, _, r = pages
    dom, pixels = render(timeline, tmp_path)
    assert re.search(r'<div id="timeline"[^>]*data-rendered="1"', dom), "plotly did not render"
    assert dom.count('class="main-svg"') >= 2
    assert legend_texts(dom) == [
        "engine 0: rollout", "engine 0: prefill", "engine 1: rollout", "engine 1: prefill",
        "trainer: train", "trainer: sync", "engines: offload", "engines: onload", "idle",
        "running samples (total)", "slots (2 x 8)", "engine 0 running", "engine 1 running"]
    assert axis_titles(dom, "x") == ["time (s)"] * 3
    assert axis_titles(dom, "y") == ["lane", "running samples", "sample (id)"]
    assert "policy version" in dom
    ticks = re.findall(r'class="ytick"[^>]*>.*?data-unformatted="([^"]*)"', dom)
    assert {"engine 0", "engine 1", "trainer", "offload/onload"} <= set(ticks)
    # one drawn bar per span in the sample panel, plus the lane bars
    assert dom.count('class="point"') >= len(r.timeline.spans)
    assert dom.count("<tr>") == 1 + len(r.timeline.trains)  # step table: header + one per update
    check_not_blank(pixels)
    # the sample bars' colours logged "WARN: Invalid color specifier: Int8Array(447)" once a bar
    assert CONSOLE[timeline] == []
    assert share_of(pixels, COLORS["rollout"]) > 0.01  # the lanes are drawn
    assert share_of(pixels, COLORS["idle"]) > 0.001  # and so is the bubble


def test_report_page_renders_in_chromium(pages, tmp_path):
    _, report, _ = pages
    dom, pixels = render(report, tmp_path)
    for div in ("bars", "lengths"):
        assert re.search(rf'<div id="{div}"[^>]*data-rendered="1"', dom), f"{div} not rendered"
    legend = legend_texts(dom)
    assert legend[:2] == ["sync", "oracle_sorted (oracle)"]
    assert "samples" in legend and any(t.startswith("mean ") for t in legend)
    ytitles = axis_titles(dom, "y")
    for title in ("makespan (s)", "bubble ratio", "useful tokens/s", "staleness mean (versions)",
                  "samples"):
        assert title in ytitles
    assert "response length (tokens)" in axis_titles(dom, "x")
    check_not_blank(pixels)
    assert CONSOLE[report] == []


def test_runs_page_of_a_real_and_a_simulated_run_renders_in_chromium(pages, tmp_path):
    """``report RUN1 RUN2 --out``: the bars and the overlaid length outlines, one per run."""
    from sortedrl.plot.report_runs import load_runs, runs_page

    real = Path(shutil.copytree(Path(__file__).parent / "fixtures" / "run-sync", tmp_path / "real"))
    sim = tmp_path / "sim"
    sim.mkdir()
    r = pages[2]
    r.timeline.write_jsonl(sim / "timeline.jsonl")
    (sim / "summary.json").write_text(json.dumps(r.summary))
    out = tmp_path / "runs.html"
    runs = load_runs([real, sim])
    out.write_text(runs_page(runs, out))
    dom, pixels = render(out, tmp_path)
    for div in ("bars", "lengths"):
        assert re.search(rf'<div id="{div}"[^>]*data-rendered="1"', dom), f"{div} not rendered"
    n = runs[1].lengths.size
    assert legend_texts(dom) == ["real", "sim", "real (128 samples, mean 9 tokens)",
                                 f"sim ({n:,} samples, mean {runs[1].lengths.mean():,.0f} tokens)"]
    assert "samples (% of the run's)" in axis_titles(dom, "y")
    assert "response length (tokens)" in axis_titles(dom, "x")
    assert len(np.unique(pixels.reshape(-1, 3), axis=0)) >= 100  # text, lines, fills
    for color in PALETTE[:2]:  # each run's bars, in its colour (outlines draw little ink)
        assert share_of(pixels, color) > 0.01
    assert CONSOLE[out] == []
