"""``calibrate --from-vllm-bench`` reads SGLang's benchmark client's JSON lines.

slime and AReaL roll out on SGLang, whose ``python -m sglang.bench_serving --output-file F.jsonl
--output-details`` appends one run a line (sgl-project/sglang ``python/sglang/bench_serving.py``
at 0033168: its ``result`` dict, then ``input_lens``, ``output_lens``, ``ttfts``, ``itls``,
``generated_texts``, ``errors``), keys it kept from vLLM's older ``benchmark_serving.py``. The
runs here are the recorded vLLM files (tests/fixtures/vllm_bench) laid out so: the same
requests must fit the same terms, to the last bit.

Run: pytest tests/test_calibration_sglang_bench.py
"""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from sortedrl.cli import app

runner = CliRunner()
BENCH = Path(__file__).parent / "fixtures" / "vllm_bench"
CLUSTER = "h100-llama3.1-8b-1gpu-32seq"
# SGLang's result dict, in its order (bench_serving.py), then its --output-details lists
RESULT = ("backend", "dataset_name", "request_rate", "max_concurrency", "sharegpt_output_len",
          "random_input_len", "random_output_len", "random_range_ratio", "duration", "completed",
          "total_input_tokens", "total_output_tokens", "total_output_tokens_retokenized",
          "request_throughput", "input_throughput", "output_throughput", "mean_e2e_latency_ms",
          "median_e2e_latency_ms", "std_e2e_latency_ms", "p99_e2e_latency_ms", "mean_ttft_ms",
          "median_ttft_ms", "std_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "median_tpot_ms",
          "std_tpot_ms", "p99_tpot_ms", "mean_itl_ms", "median_itl_ms", "std_itl_ms", "p95_itl_ms",
          "p99_itl_ms", "concurrency", "accept_length")


def sglang_line(vllm_file: Path) -> str:
    raw = json.loads(vllm_file.read_text())
    run = {key: raw.get(key) for key in RESULT} | {"backend": "sglang-oai", "dataset_name": "random"}
    assert raw["request_rate"] == "inf"  # (vLLM's string; SGLang's float, which json.dumps writes Infinity)
    run["request_rate"] = float("inf")
    n = len(raw["input_lens"])
    run |= {"input_lens": raw["input_lens"], "output_lens": raw["output_lens"], "ttfts": raw["ttfts"],
            "itls": raw["itls"], "generated_texts": [""] * n, "errors": raw["errors"]}
    return json.dumps(run)


def calibrate(tmp_path, *files: Path) -> tuple[int, list[str], dict | None]:
    out = tmp_path / f"p{len(list(tmp_path.iterdir()))}.json"
    r = runner.invoke(app, ["calibrate", "--from-vllm-bench", *map(str, files), "--cluster", CLUSTER,
                            "--out", str(out)])
    return r.exit_code, r.output.splitlines(), json.loads(out.read_text()) if out.exists() else None


def test_sglang_runs_fit_as_the_same_vllm_runs(tmp_path):
    lines = tmp_path / "sglang.jsonl"  # two runs appended, as two bench_serving calls write them
    lines.write_text("".join(sglang_line(BENCH / f"c{c}-r0.json") + "\n" for c in (4, 16)))
    plain = []
    for c in (4, 16):  # the vLLM files without the send times SGLang's client does not save
        raw = json.loads((BENCH / f"c{c}-r0.json").read_text())
        path = tmp_path / f"c{c}.json"
        path.write_text(json.dumps({k: v for k, v in raw.items() if k not in ("start_times", "queue_times")}))
        plain.append(path)
    assert '"request_rate": Infinity' in lines.read_text()
    code, out, sglang = calibrate(tmp_path, lines)
    assert code == 0, out
    code, out, vllm = calibrate(tmp_path, *plain)
    assert code == 0, out
    assert sglang["costs"] == vllm["costs"]
    assert [f["path"] for f in sglang["fit"]["engine"]["files"]] == [f"{lines}:1", f"{lines}:2"]
    assert (sglang["engine"], vllm["engine"]) == ("sglang", "vllm-cpu")  # (the vLLM files name their engine)


def test_a_run_given_twice_or_a_bad_line_is_one_error(tmp_path):
    one = sglang_line(BENCH / "c4-r0.json")
    twice = tmp_path / "twice.jsonl"
    twice.write_text(one + "\n\n" + one + "\n")
    code, out, profile = calibrate(tmp_path, twice)
    assert (code, out, profile) == (2, [f"error: {twice}:3: the same content as {twice}:1: a benchmark run "
                                        "given twice; give each run once"], None)
    bad = tmp_path / "bad.jsonl"
    bad.write_text(one + "\n" + one[:-1] + "\n")
    code, out, profile = calibrate(tmp_path, bad)
    assert code == 2 and profile is None and out[0].startswith(f"error: {bad}:2: not valid JSON (")
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    assert calibrate(tmp_path, empty)[:2] == (2, [f"error: {empty}: no benchmark run in it (an empty JSON lines "
                                                  "file)"])
