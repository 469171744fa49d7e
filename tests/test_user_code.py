"""The user's own code named ``module:name`` (``--policy``, ``--reward``): a name that is no
module, a module that raises or does not parse on import, a policy that raises in ``__init__``
or in a hook are each one ``error:`` line naming the option or policy and where it was raised,
exit 2, nothing written; in compare's worker processes too. (Before: a ValueError, TypeError,
RuntimeError or SyntaxError traceback.)

Run: pytest tests/test_user_code.py
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sortedrl.cli import app
from sortedrl.errors import ConfigError
from sortedrl.realrun.dataset import get_reward

TRACE = str(Path(__file__).resolve().parents[1] / "sortedrl" / "traces" / "data" / "logic-8k.jsonl")
HOOKS = """
from sortedrl.policies.sync import SyncPolicy


class StartBug(SyncPolicy):
    name = "start_bug"

    def on_start(self, view):
        return {}["missing"]


class InitBug(SyncPolicy):
    def __init__(self, params=None, ctx=None):
        raise RuntimeError("two\\nlines")


class KnobBug(SyncPolicy):
    def __init__(self, params=None, ctx=None):
        raise ValueError("batch must be >= 1")
"""


def at(cls: type, hook: str) -> str:
    """`` (at FILE:LINE)``: where a test's policy class defines ``hook``, as an error names it."""
    fn = getattr(cls, hook)
    return f" (at {inspect.getsourcefile(fn)}:{inspect.getsourcelines(fn)[1]})"


def one_error_line(tmp_path: Path, *args: str) -> str:
    """Run a command writing into tmp_path/out; its one error line (checked to be the only one,
    with exit 2, no traceback and nothing written)."""
    out = tmp_path / "out"
    r = CliRunner().invoke(app, [*args, "--out", str(out)])
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("error: "), r.stderr
    assert not out.exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".out")]
    return r.stderr.rstrip("\n")


@pytest.mark.parametrize("spec, line", [
    (":Harvest", "error: --policy ':Harvest': '' is not a module name (module:name, the module's "
                 "full dotted name on the Python path, e.g. my_policies:MyPolicy)"),
    (".mypol:Harvest", "error: --policy '.mypol:Harvest': '.mypol' is not a module name "
                       "(module:name, the module's full dotted name on the Python path, e.g. "
                       "my_policies:MyPolicy)"),
    ("mypol:", "error: --policy 'mypol:': '' is not a name in a module (module:name, e.g. "
               "my_policies:MyPolicy)"),
])
def test_a_policy_spec_that_names_no_module_is_one_error_line(tmp_path, spec, line):
    assert one_error_line(tmp_path, "simulate", "--trace", TRACE, "--policy", spec) == line


@pytest.mark.parametrize("module, code, raised", [
    ("raises", "x = 1\nraise RuntimeError('no GPU here')\n", "RuntimeError: no GPU here (at {path}:2)"),
    ("unparsed", "def f(:\n    pass\n", "SyntaxError: invalid syntax (at {path}:1)"),
])
@pytest.mark.parametrize("command", [["simulate"], ["compare", "--policy", "sync", "--workers", "2"]])
def test_a_module_that_raises_on_import_is_one_error_line(tmp_path, monkeypatch, module, code,
                                                          raised, command):
    path = tmp_path / f"{module}.py"
    path.write_text(code)
    monkeypatch.syspath_prepend(str(tmp_path))
    line = one_error_line(tmp_path, *command, "--trace", TRACE, "--policy", f"{module}:P")
    assert line == (f"error: --policy '{module}:P': importing module '{module}' raised "
                    + raised.format(path=path))


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_policy_that_raises_is_one_error_line_naming_where(tmp_path, monkeypatch, workers):
    module = f"hook_bugs_{workers}"  # a module imported once stays imported: one per test
    where = tmp_path / f"{module}.py"
    where.write_text(HOOKS)
    monkeypatch.syspath_prepend(str(tmp_path))
    compare = ["compare", "--trace", TRACE, "--policy", "sync", "--workers", workers]
    # a hook, run in a worker process with --workers 2: the same line, not a _RemoteTraceback
    assert one_error_line(tmp_path, *compare, "--policy", f"{module}:StartBug") == (
        f"error: policy start_bug raised KeyError: 'missing' (in on_start at {where}:9)")
    assert one_error_line(tmp_path, *compare, "--policy", f"{module}:InitBug") == (
        f"error: policy {module}:InitBug raised RuntimeError: two lines (at {where}:14)")
    # a ValueError is a refused knob, as the built-in policies raise it; a user's says where too
    # (it said only the message, with no place to look)
    assert one_error_line(tmp_path, *compare, "--policy", f"{module}:KnobBug") == (
        f"error: policy {module}:KnobBug: batch must be >= 1 (at {where}:19)")


def test_a_reward_that_names_no_module_is_one_error_line():
    with pytest.raises(ConfigError, match=r"^--reward '\.grade:f': '\.grade' is not a module name"):
        get_reward(".grade:f")


def test_an_error_raised_inside_sortedrl_names_the_users_line_first(tmp_path, monkeypatch):
    """A helper of sortedrl's given a bad argument raised where the helper is: the error named
    only sortedrl/policies/common.py, not the user's line that called it."""
    import sortedrl.policies.common as common

    (tmp_path / "helper_misuse.py").write_text(
        "from sortedrl.policies.base import Policy\nfrom sortedrl.policies.common import SampleQueue\n"
        "class Misuse(Policy):\n    name = 'misuse'\n    def on_start(self, view):\n"
        "        SampleQueue().add_fresh('all')\n        return []\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    line = one_error_line(tmp_path, "simulate", "--trace", TRACE, "--policy", "helper_misuse:Misuse")
    mine, theirs = re.escape(str(tmp_path / "helper_misuse.py")), re.escape(inspect.getsourcefile(common))
    assert re.fullmatch(rf"error: policy misuse raised TypeError: .+ \(in on_start at {mine}:6, raised in {theirs}:\d+\)",
                        line), line
