"""tune names a policy of yours as given to --policy (module:Class), where compare labels it by
its class: `--param Class.k` and `--policy LABEL=module:Class` said only "not among the --policy
list" and "'LABEL=module' is not a module name". Each now says what to give instead, and a
module:Class whose module holds dots is read as one name."""

from __future__ import annotations

from typer.testing import CliRunner

from sortedrl.cli import app
from sortedrl.tune.space import parse_spaces

SMALL = ["--synthetic", "math-16k", "--prompts", "16", "--steps", "2", "--cluster", "h100-llama3.1-8b-1gpu",
         "--budget", "2"]
MODULE = ("from dataclasses import dataclass, field\nfrom sortedrl.policies.sync import SyncPolicy\n"
          "@dataclass(frozen=True)\nclass Knobs:\n    rollout_batch: int = 0\n    minibatches: int = 1\n"
          "    filter_groups: bool = False\n    k: int = field(default=8, metadata={'help': 'k'})\n"
          "class Mine(SyncPolicy):\n    name = 'mine'\n    Params = Knobs\n")


def test_a_users_policy_is_named_as_given_to_policy(tmp_path, monkeypatch):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "mypol.py").write_text(MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    spaces = parse_spaces(["pkg.mypol:Mine"], ["pkg.mypol:Mine.k=16:64"])
    assert [(s.policy, [d.key for d in s.dims]) for s in spaces] == [("pkg.mypol:Mine", ["k"])]
    r = CliRunner().invoke(app, ["tune", *SMALL, "--policy", "pkg.mypol:Mine", "--param", "Mine.k=16:64",
                                 "--out", str(tmp_path / "t")])
    assert (r.exit_code, r.stderr) == (2, "error: --param 'Mine.k=16:64': policy 'Mine' is not among the "
                                          "--policy list (pkg.mypol:Mine); name it as given to --policy: "
                                          "pkg.mypol:Mine.k\n")
    r = CliRunner().invoke(app, ["tune", *SMALL, "--policy", "m=pkg.mypol:Mine", "--out", str(tmp_path / "t")])
    assert (r.exit_code, r.stderr) == (2, "error: --policy 'm=pkg.mypol:Mine': tune takes no LABEL= (each "
                                          "policy is tuned once, named as given); give --policy "
                                          "pkg.mypol:Mine\n")
    assert not (tmp_path / "t").exists()
