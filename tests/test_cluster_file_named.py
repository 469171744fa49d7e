"""An error about a cluster file names the file as the user gave it.

A file's fields are checked when it is read, and again on the cluster a policy runs on (the
disaggregated split ``async`` needs) and against the trace (one sequence must fit an engine's
KV). Those later checks named the cluster by its label, the file's stem: ``error: cl6: field
'train_gpus': ...`` for ``--cluster conf/cl6.json``, which names no file the user has.

Run: pytest tests/test_cluster_file_named.py
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from sortedrl.cli import app
from sortedrl.sim.cluster import cluster_from_dict, load_cluster

runner = CliRunner()
RUN = ["--synthetic", "logic-8k", "--prompts", "8", "--group-size", "2", "--steps", "1"]


@pytest.mark.parametrize("fields, policy, message", [
    # the split a disaggregated-only policy runs on
    ({"train_gpus": 7, "tp": 2}, "async", "conf/cl6.json: field 'train_gpus': 7 trainer GPUs of 8 leave no "
                                           "rollout engine of tp=2"),
    # a split no policy could run on, refused with the file whatever the policy
    ({"train_gpus": 9}, "sync", "conf/cl6.json: field 'train_gpus': 9 trainer GPUs of 8 leave none to roll out "
                                "in the disaggregated split that async and one_step_off run on (a colocated "
                                "cluster uses train_gpus only for that split)"),
    ({"gpus": 1}, "async", "policy async needs separate rollout and training GPUs (a disaggregated "
                           "cluster); conf/cl6.json has 1 GPU: give a cluster of 2 or more GPUs"),
    # the trace's longest sequence against one engine's KV
    ({"kv_budget_tokens": 5000}, "sync", "conf/cl6.json: impossible cluster: the KV budget of 4,950 tokens "
                                         "per engine cannot hold one sequence of 8,614 tokens (trace "
                                         "logic-8k: its longest prompt, 422 tokens, plus its "
                                         "max_response_len, 8,192; a smaller cap or a cluster with more "
                                         "KV cache fits it)"),
])
@pytest.mark.parametrize("command", ["simulate", "compare", "tune"])
def test_a_cluster_file_error_names_the_file_as_given(tmp_path, monkeypatch, fields, policy, message, command):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "cl6.json").write_text(json.dumps({"preset": "h100-llama3.1-8b", **fields}))
    policies = ["--policy", policy] + (["--policy", "sync"] if command == "compare" and policy != "sync" else [])
    r = runner.invoke(app, [command, *RUN, *policies, "--cluster", "conf/cl6.json", "--out", "o"])
    assert (r.exit_code, r.stdout, r.stderr) == (2, "", f"error: {message}\n")
    assert not (tmp_path / "o").exists()


def test_the_file_is_no_field_of_the_cluster(tmp_path):
    """The file a cluster came from is not one of its fields: a tune.json's cluster_fields
    leave it out, a cluster file may not set it, and two reads of one cluster are equal."""
    path = tmp_path / "cl6.json"
    path.write_text(json.dumps({"preset": "h100-llama3.1-8b", "gpus": 4}))
    cluster = load_cluster(str(path))
    assert (cluster.name, cluster.where) == ("cl6", str(path))
    assert "source" not in cluster.fields()
    assert cluster_from_dict(cluster.fields(), "tune.json", "cl6") == cluster
    with pytest.raises(Exception, match="unknown field 'source'"):
        cluster_from_dict({"source": "x"}, "c.json", "c")


def test_the_kv_refusal_says_the_clause_that_decides():
    # a budget of exactly the sequence's tokens: the token its next step writes is what does not fit
    # (it read 'the KV budget of 8,520 tokens per engine cannot hold one sequence of 8,520 tokens');
    # a budget that holds it but for the watermark says so
    import dataclasses

    from sortedrl.errors import ConfigError
    from sortedrl.sim.cluster import preset

    base = preset("h100-llama3.1-8b-1gpu")
    exact = dataclasses.replace(base, kv_budget_tokens=8520, kv_watermark=0.0)
    with pytest.raises(ConfigError) as e:
        exact.check_fits(8520, "c.json")
    assert str(e.value) == ("c.json: impossible cluster: the KV budget of 8,520 tokens per engine cannot hold "
                            "one sequence of 8,520 tokens and the one its next step writes")
    exact.check_fits(8519, "c.json")
    marked = dataclasses.replace(base, kv_budget_tokens=8600, kv_watermark=0.01)
    with pytest.raises(ConfigError) as e:
        marked.check_fits(8520, "c.json")
    assert str(e.value) == ("c.json: impossible cluster: the KV budget of 8,514 tokens per engine (8,600 less its "
                            "kv_watermark of 1%) cannot hold one sequence of 8,520 tokens")
