"""``calibrate`` with a file option and no file after it (an unset shell variable): the next option
was read as the file (``--from-metrics --cluster NAME`` then said --cluster was missing); now one
error line names the option."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from sortedrl.cli import app

runner = CliRunner()
PRESET = "h100-llama3.1-8b"


# -- 7. a file option with no file ------------------------------------------------------------------


@pytest.mark.parametrize("args, message", [
    (["--from-metrics", "--cluster", PRESET], "--from-metrics: no file given (the next argument, --cluster, is an "
                                              "option); give FILE ... after it"),
    (["--from-metrics", "", "--cluster", PRESET], "--from-metrics: an empty file name (an unset shell variable?); "
                                                  "give FILE ... after it"),
    (["--from-metrics=", "--cluster", PRESET], "--from-metrics: an empty file name (an unset shell variable?); "
                                               "give FILE ... after it"),
    (["--cluster", PRESET, "--from-metrics"], "--from-metrics: no file given; give FILE ... after it"),
    (["--from-vllm-bench", "--cluster", PRESET], "--from-vllm-bench: no file given (the next argument, --cluster, "
                                                 "is an option); give FILE ... after it"),
])
def test_a_file_option_with_no_file_names_the_option(tmp_path, args, message):
    out = tmp_path / "j.json"
    r = runner.invoke(app, ["calibrate", "--out", str(out), *args])
    assert (r.exit_code, r.stdout, r.stderr) == (2, "", f"error: {message}\n")
    assert not out.exists()


def test_an_empty_name_among_a_file_options_names_is_refused_too(tmp_path):
    m = tmp_path / "m.csv"
    m.write_text("step,timing_s/update_actor,perf/total_num_tokens\n1,5,1000\n2,6,2000\n")
    r = runner.invoke(app, ["calibrate", "--from-metrics", str(m), "", "--cluster", PRESET,
                            "--out", str(tmp_path / "j.json")])
    assert (r.exit_code, r.stderr) == (2, "error: --from-metrics: an empty file name (an unset shell variable?); "
                                          "give FILE ... after it\n")  # (it said "no file given" beside m.csv)
