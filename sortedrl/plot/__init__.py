"""Plots of runs and comparisons: HTML timelines, comparison reports and Perfetto traces.

``docs/plots.md`` describes each plot. Everything here reads the files that ``simulate``,
``compare`` and ``tune`` write, and nothing else; pages are self-contained (plotly.js inlined).
"""

from sortedrl.plot.inputs import PlotError
from sortedrl.plot.timeline_plot import timeline_figure, write_timeline_html

__all__ = ["PlotError", "timeline_figure", "write_timeline_html"]
