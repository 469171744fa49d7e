"""Where a command's run comes from: its trace (a file, a pipe, a trace model or a synthetic
preset) and its cluster, and what a run directory's marker records of them.

Split from :mod:`sortedrl.cli_common` (the commands' shared error handling, outputs and
tables): these helpers read and name the inputs. A trace file's shape options are refused
rather than ignored, a refused synthetic option is named as the command line spells it, and a
marker records a file by its resolved path and a pipe by the hash of its bytes, so a re-run is
recognised however the input was typed.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from sortedrl import file_kinds, streams
from sortedrl.cli_common import get_current_context, slug
from sortedrl.errors import ConfigError, TraceError, not_found
from sortedrl.traces.io import BUNDLED, read_trace, trace_label
from sortedrl.traces.schema import Trace
from sortedrl.traces.synth import check_synthesis, synthesize


def check_input_trace(trace: Path | None, synthetic: str | None, prompts: int | None,
                      group_size: int | None, steps: int | None, seed: int) -> None:
    """The cheap checks of a run's trace, made before its run directory is compared with the
    run it holds (that refusal hid them: a mistyped ``--synthetic math16k`` was "a run with
    other options"): one of --trace and --synthetic, a preset and its shape options, a trace
    file that is there and is no other file of sortedrl's own (a profile: said so, not that it
    "has its own steps"), the shape options a file refuses, and a trace model's fields. A trace
    file's rows are read later."""
    if (trace is None) == (synthetic is None):
        raise ConfigError("give exactly one of --trace FILE or --synthetic PRESET")
    if trace is None:
        _options_named(check_synthesis, synthetic, prompts, group_size, steps, seed)
        return
    from sortedrl.traces.model import is_trace_model, load_model

    trace_source(trace, None)  # (there, or the error)
    model = is_trace_model(trace)
    if not model and (what := file_kinds.not_a_trace(trace)) is not None:  # (what it is, before --steps)
        raise TraceError(what)
    check_no_shape_options(trace, model, prompts, group_size, steps)
    if model:
        load_model(trace)


def load_input_trace(trace: Path | None, synthetic: str | None, prompts: int | None,
                     group_size: int | None, steps: int | None, seed: int) -> Trace:
    check_input_trace(trace, synthetic, prompts, group_size, steps, seed)
    if trace is not None:
        from sortedrl.traces.model import generate, is_trace_model, load_model

        if is_trace_model(trace):  # --trace-model MODEL.json: a run of --steps from the model
            return generate(load_model(trace), 1 if steps is None else steps, seed=seed, prompts=prompts)
        return read_trace(trace)
    return synthesized(synthetic, prompts, group_size, steps, seed)


# synthesize()'s parameters, as the commands' options name them
SYNTH_OPTIONS = {"prompts": "--prompts", "group_size": "--group-size", "steps": "--steps", "seed": "--seed",
                 "dataset_size": "--dataset-size", "max_response_len": "--max-response-len"}


def synthesized(preset: str, prompts: int | None, group_size: int | None, steps: int | None, seed: int,
                dataset_size: int | None = None, max_response_len: int | None = None) -> Trace:
    """:func:`~sortedrl.traces.synth.synthesize`, a refused value named by its option (the
    function names its parameter: `group_size must be >= 1` for --group-size 0)."""
    return _options_named(synthesize, preset, prompts, group_size, steps, seed, dataset_size, max_response_len)


def _options_named(call: Callable, preset: str, prompts: int | None, group_size: int | None,
                   steps: int | None, seed: int, dataset_size: int | None = None,
                   max_response_len: int | None = None) -> Any:
    """``call(preset, ...)`` (:func:`synthesize` or :func:`check_synthesis`), a refused value
    named by its option rather than its parameter."""
    try:
        return call(preset, prompts=prompts, group_size=group_size, steps=steps, seed=seed,
                    dataset_size=dataset_size, max_response_len=max_response_len)
    except ConfigError as e:
        name = str(e).split(" ", 1)[0]
        if name in SYNTH_OPTIONS:
            raise ConfigError(SYNTH_OPTIONS[name] + str(e)[len(name):]) from None
        raise


# what --prompts, --group-size and --steps set; a trace file has all three, a trace model its group size
SHAPE_OPTIONS = {"prompts": "prompts per step", "group_size": "group size", "steps": "steps"}


def check_no_shape_options(trace: Path, model: bool, prompts: int | None, group_size: int | None,
                           steps: int | None) -> None:
    """Refuse the options that shape a synthetic trace when the trace comes from a file, which
    has its own shape (a trace model takes --prompts and --steps, not --group-size): given, they
    were silently ignored."""
    values = {"prompts": prompts, "group_size": group_size, "steps": steps}
    usable = ("prompts", "steps") if model else ()
    given = [name for name in SHAPE_OPTIONS if name not in usable and typed_option(name, values[name])]
    if given:
        options = " and ".join(f"--{name.replace('_', '-')}" for name in given)
        what = "a trace model" if model else "a trace file"
        raise ConfigError(f"{options}: not with {what} ({trace} has its own "
                          f"{' and '.join(SHAPE_OPTIONS[name] for name in given)}); "
                          f"{'they shape' if len(given) > 1 else 'it shapes'} a --synthetic trace"
                          + (" or a --trace-model's draws" if not model and "group_size" not in given else ""))


def typed_option(name: str, value: object) -> bool:
    """Whether the user gave option ``name``: typed on the command line (an option with a
    default), or not None (outside a command)."""
    ctx = get_current_context(silent=True)
    if ctx is None or name not in ctx.params:
        return value is not None
    return getattr(ctx.get_parameter_source(name), "name", "") == "COMMANDLINE"


def input_files(*paths: Path | str | None) -> list[Path]:
    """The arguments that name existing files: what no output may overwrite or delete."""
    return [Path(p) for p in paths if p is not None and Path(p).exists()]


SOURCE_CHARS = 64  # the most of a default run directory's name that the trace's name takes


def source_name(trace: Path | None, synthetic: str | None) -> str:
    """What a default run directory calls the trace: the file's stem or the preset's name; a
    pipe's as the summary will (``trace_label``: its metadata's source, else stdin or pipe).
    At most :data:`SOURCE_CHARS` characters, as a file name (:func:`slug`), a file's as a
    pipe's: a metadata source of 300 characters made a name too long for the filesystem."""
    name = Path(trace_label(trace)).stem if trace is not None else str(synthetic)
    return slug(name)[:SOURCE_CHARS].rstrip("._-")


def trace_source(trace: Path | None, synthetic: str | None) -> str:
    """What a run directory's marker records as the run's trace (``source``): a file as its
    resolved absolute path, the same however it was typed and never another file of the same
    name seen from another directory; a bundled trace (``math-16k``) and a synthetic preset as
    they are; a pipe or FIFO (``/dev/stdin``, ``<(zcat run.jsonl.gz)``) by the hash of its bytes
    (``pipe sha256:HEX``): its path is a descriptor's, the same for every trace piped in. A trace
    that is not there is an error here, before the outputs are checked (it is what is wrong)."""
    if trace is None:
        return str(synthetic)
    if not Path(trace).exists():
        raise TraceError(not_found(trace))
    regular = Path(trace).parent != BUNDLED and Path(trace).is_file()  # (links followed)
    if regular:
        return str(Path(trace).resolve())
    digest = streams.digest(trace)
    return str(trace) if digest is None else f"pipe {digest}"


def source_names(trace: Path | None, synthetic: str | None) -> dict[str, str | None]:
    """How a re-run's refusal names the options (:func:`sortedrl.run_marker.differences`): the
    trace's as this command was given it (``--synthetic``, ``--trace-model``, ``--trace``), and
    None for a shape option with no effect on this run (a trace file's ``--steps``, which only
    its default was: check_no_shape_options refuses one typed)."""
    if trace is None:
        return {"source": "--synthetic"}
    from sortedrl.traces.model import is_trace_model

    if is_trace_model(trace):
        return {"source": "--trace-model", "group_size": None}
    return {"source": "--trace", "prompts": None, "group_size": None, "steps": None}


def cluster_source(cluster: str) -> str:
    """What a marker records as the run's ``--cluster``: a file (``.json``: a cluster file or a
    profile) as its resolved absolute path, as :func:`trace_source` a trace; a preset as named."""
    return str(Path(cluster).resolve()) if cluster.endswith(".json") else cluster


def run_identity(trace: Path | None, synthetic: str | None, cluster: str, *, seed: int, prompts: int,
                 group_size: int, steps: int, regen: bool, **options: object) -> dict:
    """What a run directory's marker records of the command's inputs (``simulate``, ``compare``,
    ``tune``): its trace and cluster (:func:`trace_source`, :func:`cluster_source`), the
    command's own ``options`` (``--policy``, ``--set``, ...) and the shape options, which a
    re-run must give alike (:meth:`~sortedrl.outputs.Outputs.run_dir`)."""
    return dict(source=trace_source(trace, synthetic), **options, cluster=cluster_source(cluster), seed=seed,
                prompts=prompts, group_size=group_size, steps=steps, regen=regen)
