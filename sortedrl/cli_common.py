"""Helpers the ``sortedrl`` commands share: one-line errors, all-or-nothing output, progress,
and tables.

Every command turns a :class:`~sortedrl.errors.SortedRLError` into one ``error: ...`` line on
stderr and exit code 2, with no traceback and no half-written output; Ctrl-C into one line and
exit code 130 (128 + SIGINT, as a shell reports it), SIGTERM and SIGHUP likewise (143, 129),
outputs being written all or nothing; a reader of stdout that goes away (``| head``) into a
quiet exit 141, as SIGPIPE gives (:mod:`sortedrl.broken_pipe`).
"""

from __future__ import annotations

import difflib
import functools
import math
import pathlib
import re
import signal
import sys
from collections.abc import Callable
from pathlib import Path

import typer
from rich.console import Console
from typer.core import TyperGroup

from sortedrl.broken_pipe import drop_if_unwritable, exit_if_reader_gone, reader_gone_exits
from sortedrl.cli_empty import empty_path
from sortedrl.errors import ConfigError, SortedRLError
from sortedrl.interrupts import ARRIVED, WRITTEN, Terminated, stopped_line
from sortedrl.progress import Phases
from sortedrl.realrun.install_check import README_SECTION, UNINSTALL, broken_install_line
from sortedrl.tables import UNITS
from sortedrl.tables import cell as _cell
from sortedrl.terminal import prepare as prepare_terminal
from sortedrl.traces.io import bundled_help, resolve_bundled
from sortedrl.traces.synth import AGENTIC_PRESETS, PRESETS, preset_names

err = Console(stderr=True)

try:  # typer 0.2x carries its own copy of click; before that it used click itself
    from typer._click.exceptions import ClickException, NoArgsIsHelpError, NoSuchOption
    from typer._click.globals import get_current_context
except ImportError:  # pragma: no cover - older typer
    from click.exceptions import ClickException, NoArgsIsHelpError, NoSuchOption
    from click.globals import get_current_context


# Optional modules, by the top-level name a command imports: the smallest install that brings
# it. The real runner's extras bring them all: 'cpu' (vLLM for CPU, the CPU torch) or 'gpu'.
# On CPU the extra is followed by removing the CUDA builds its dependencies bring (install_check).
CPU_EXTRA = f"on CPU 'sortedrl[cpu]', then `{UNINSTALL}`, as {README_SECTION} says"
RUNNER = f"or the real runner's extra: 'sortedrl[gpu]' on CUDA; {CPU_EXTRA}"
EXTRAS = {"torch": f"pip install torch ({RUNNER})",
          "vllm": f"pip install 'sortedrl[gpu]' (vLLM for CUDA), or {CPU_EXTRA}",
          "transformers": f"pip install transformers ({RUNNER})",
          "tokenizers": f"pip install tokenizers ({RUNNER})",
          "safetensors": f"pip install safetensors ({RUNNER})",
          "ray": "pip install 'sortedrl[ray]'", "pyarrow": "pip install pyarrow"}


INTERRUPTED = 130  # the exit code of a Ctrl-C (128 + SIGINT), as a shell gives it
_interrupt_reported = False  # a command's user_errors printed its Ctrl-C line


_NO_VALUE = re.compile(r"Option '(--[\w-]+)' does not take a value\.?")


def _flags_show_no_type() -> None:
    """typer 0.2x shows a flag's type in ``--help`` as ``<bool>``, as if it took a value
    (``--force=false`` is then an error): a flag's type column is left empty, as click's."""
    option = getattr(typer.core, "TyperOption", None)
    shown = getattr(option, "display_type_rich", None)
    if shown is None or getattr(shown, "flag_aware", False):
        return

    def display_type_rich(self, ctx):
        return None if getattr(self, "is_flag", False) else shown(self, ctx)

    display_type_rich.flag_aware = True
    option.display_type_rich = display_type_rich


_flags_show_no_type()


class OneLineUsageErrors(TyperGroup):
    """The top-level command group: a usage error (an unknown option, a value of the wrong type,
    a missing argument) is one ``error:`` line and exit 2, as every other bad input is, instead
    of typer's usage banner and boxed message. A group run with no arguments still shows its
    help. A reader of stdout (or stderr) that goes away ends the command quietly, exit 141
    (:mod:`sortedrl.broken_pipe`): caught around the options' parsing (``--help``,
    ``--version``) and every command, before click's own handler takes it (exit 1), and around
    the error lines printed here; any other failed write there (a full disk) is one ``error:``
    line and exit 2, as in a command."""

    def make_context(self, *args, **kwargs):
        with reader_gone_exits(os_error_line):
            return super().make_context(*args, **kwargs)

    def invoke(self, ctx):
        with reader_gone_exits(os_error_line):
            return super().invoke(ctx)

    def main(self, *args, **kwargs):
        prepare_terminal(err)  # COLUMNS read alike by every console; help never cut
        with reader_gone_exits(os_error_line):
            return self._one_line_errors(*args, **kwargs)

    def _one_line_errors(self, args=None, prog_name=None, complete_var=None, standalone_mode=True,
                         **extra):
        global _interrupt_reported
        _interrupt_reported = False  # (a process may run the app more than once: tests, library use)
        WRITTEN.clear()
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        empty = empty_path(self, list(sys.argv[1:] if args is None else args))
        if empty is not None:
            typer.echo(f"error: {empty}", err=True)
            sys.exit(2)
        try:
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except NoArgsIsHelpError as e:  # the help, as typer shows it
            if typer.core.HAS_RICH and self.rich_markup_mode is not None:
                from typer import rich_utils
                rich_utils.rich_format_error(e)
            else:
                e.show()
            sys.exit(e.exit_code)
        except ClickException as e:
            typer.echo(f"error: {usage_line(e)}", err=True)
            sys.exit(2)
        except typer.Abort as e:
            if isinstance(e.__context__, KeyboardInterrupt):  # (click without typer's own: Ctrl-C)
                typer.echo("error: interrupted (Ctrl-C)", err=True)
                sys.exit(INTERRUPTED)
            typer.echo("error: aborted", err=True)
            sys.exit(1)
        if code == INTERRUPTED and not _interrupt_reported:  # Ctrl-C while typer parsed the options
            typer.echo("error: interrupted (Ctrl-C)", err=True)
        # without standalone mode click returns a command's exit code (typer.Exit) or its value
        sys.exit(code if type(code) is int else 0)


def usage_line(e: ClickException) -> str:
    """A click error as one line: the command, the message, where to read its options."""
    if isinstance(e, NoSuchOption) and e.possibilities:
        e.possibilities = close_options(e.option_name, e.possibilities)
    message = " ".join(e.format_message().split())
    flag = _NO_VALUE.fullmatch(message)
    if flag is not None:  # (`--force=false`: click's error has no command to point at)
        return f"{flag[1]} takes no value: give {flag[1]} alone to turn it on, or leave it out"
    ctx = getattr(e, "ctx", None)
    if ctx is None:
        return message
    if ctx.command_path.endswith(" forecast") and message.startswith("No such option: --synthetic"):
        return (f"{ctx.command_path}: no --synthetic: a forecast runs a trace (--trace) or a trace model "
                "(--trace-model, for --steps); draw a synthetic trace first with `sortedrl trace synth "
                "PRESET --out T.jsonl`, or fit a model with `sortedrl trace fit`")
    return f"{ctx.command_path}: {message.rstrip('.')}; see `{ctx.command_path} --help`"


def close_options(given: str, options: list[str]) -> list[str]:
    """The options close to ``given`` by their names: click matched them with their dashes, which
    made every '--' name half alike (``--bogus`` was offered ``--out``, ``--trac`` ``--force``)."""
    by_name = {option.lstrip("-"): option for option in options}
    return [by_name[n] for n in difflib.get_close_matches(given.lstrip("-"), list(by_name), cutoff=0.6)]


def pin_malloc_threshold() -> bool:
    """Keep glibc's mmap threshold at its 128 KiB default for this process, and its heap's
    top in place (see below).

    glibc raises the threshold (up to 32 MiB) each time a large block is freed, so that later
    arrays of up to 32 MiB come from the heap, where freed ones are rarely returned to the
    system: a 10M-sample ``simulate`` held about 1 GB more than it used (peak 4.9 GB, 3.9 GB
    pinned; bench/sim_speed.py ``--whole``). Pinning the threshold (which turns the raising
    off) keeps big arrays in their own mappings, given back when freed. Elsewhere (not glibc)
    nothing is done. Returns whether all three settings took."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    m_trim_threshold, m_top_pad, m_mmap_threshold = -1, -2, -3  # malloc.h
    # the heap's top: grown 64 MiB at a time and given back only past 256 MiB free, so that
    # the many small blocks a run allocates and frees do not move it (and fault in its pages)
    # every few calls: 1.2 -> 0.4 system CPU s in a 1M-sample simulate
    heap_top = mallopt(m_top_pad, 64 * 2**20) == 1 and mallopt(m_trim_threshold, 256 * 2**20) == 1
    return mallopt(m_mmap_threshold, 128 * 1024) == 1 and heap_top


def end_cleanly_on_termination() -> None:
    """Make SIGTERM and SIGHUP raise :class:`Terminated` (Ctrl-C raises ``KeyboardInterrupt``
    as before), each noted in ``ARRIVED`` first (:func:`~sortedrl.interrupts.raise_if_stopped`:
    an exception Python drops does not let the outputs in): in the CLI's own process only (its
    entry point calls this), never on import, since a library's caller owns its signals."""
    def terminated(signum: int, frame: object) -> None:
        ARRIVED.append(signum)  # (raise_if_stopped: in case this exception is lost)
        raise Terminated(signum)

    def interrupted(signum: int, frame: object) -> None:
        ARRIVED.append(signum)
        raise KeyboardInterrupt

    ARRIVED.clear()  # (a new command line: an earlier one's stop in this process is not its own)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(sig) is not signal.SIG_IGN:  # (`nohup sortedrl ...`: a hang-up is let be)
            signal.signal(sig, terminated)
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # (not where it is ignored)
        signal.signal(signal.SIGINT, interrupted)


def user_errors(fn: Callable) -> Callable:
    """Report every failure a user can cause as one ``error:`` line and exit 2: a
    SortedRLError, a number that is not finite, a missing optional extra, an import that fails
    in torchvision, torchaudio or torchcodec built for another torch than the CPU one
    (:mod:`sortedrl.realrun.install_check`), an OS error, a run too large for memory; Ctrl-C as
    one line and exit 130, SIGTERM and SIGHUP as one line and exit 143 and 129; a reader of
    stdout that went away as nothing and exit 141."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            _check_finite(kwargs)
            return fn(*args, **kwargs)
        except SortedRLError as e:
            message, code = str(e), e.exit_code
        except ModuleNotFoundError as e:
            top = (e.name or "").split(".")[0]
            message, code = broken_install_line(e), 2
            if message is None:
                if top not in EXTRAS:
                    raise
                message = f"`{_command_path(fn)}` needs {top}, which is not installed: {EXTRAS[top]}"
        except OSError as e:
            exit_if_reader_gone(e)  # (`| head`: not a failure; any other broken pipe is)
            message, code = broken_install_line(e) or os_error_line(e), 2
        except (ImportError, RuntimeError) as e:  # only torch's companions built for another torch
            message, code = broken_install_line(e), 2
            if message is None:
                raise
        except MemoryError:
            message, code = ("out of memory: the run needs more than this machine has (give fewer "
                             "samples: --prompts, --steps, a smaller trace)"), 2
        except KeyboardInterrupt:
            global _interrupt_reported
            _interrupt_reported = True
            message, code = stopped_line("interrupted (Ctrl-C)"), INTERRUPTED
            ARRIVED.clear()  # (this stop is the one reported: not a later command's in this process)
        except Terminated as e:
            message, code = stopped_line(str(e)), e.exit_code
            ARRIVED.clear()
        drop_if_unwritable(sys.stdout)  # (a full disk: its buffer would fail the exit, 120)
        typer.echo(f"error: {message}", err=True)
        raise typer.Exit(code)
    return wrapper


# pathlib's reads and writes, by what their failure is called
_PATH_IO = {"read_text": "read", "read_bytes": "read", "write_text": "write", "write_bytes": "write"}


def os_error_line(e: OSError) -> str:
    """An OS error, naming its file. One that failed after the file was opened (a read of
    ``/proc/self/mem``) carries no file name: a pathlib read or write names its path then."""
    if e.filename is not None:
        return f"{e.filename}: {e.strerror or e}"
    tb, named = e.__traceback__, None
    while tb is not None:  # (the innermost pathlib call is the one that failed)
        name, me = tb.tb_frame.f_code.co_name, tb.tb_frame.f_locals.get("self")
        if name in _PATH_IO and isinstance(me, pathlib.PurePath):  # (pathlib's module moved in 3.13)
            named = f"{me}: cannot {_PATH_IO[name]} it"
        tb = tb.tb_next
    return f"output: {e.strerror or e}" if named is None else f"{named} ({e.strerror or e})"


def _command_path(fn) -> str:
    """The command as the user typed it (``sortedrl trace import``)."""
    ctx = get_current_context(silent=True)
    return ctx.command_path if ctx is not None else f"sortedrl {fn.__name__.removesuffix('_cmd')}"


def _check_finite(kwargs: dict) -> None:
    for name, value in kwargs.items():
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"--{name.replace('_', '-')} {value}: must be a finite number")


def given_options(ctx: typer.Context, names: tuple[str, ...]) -> list[str]:
    """The options among the parameters ``names`` that the command line gave (not defaults), as
    ``--option`` words in the command's order: for refusing an option that would be ignored."""
    return [f"--{p.name.replace('_', '-')}" for p in ctx.command.params
            if p.name in names and getattr(ctx.get_parameter_source(p.name), "name", "") == "COMMANDLINE"]


def slug(text: str) -> str:
    """``text`` as one safe file name (what default run directories are called): never empty
    and never starting with '.' or '-' (a hidden directory, or one read as an option)."""
    return re.sub(r"[^A-Za-z0-9_.+-]+", "_", text).strip("._-") or "run"


def perfetto_writer(timeline) -> Callable[[Path], None]:
    def write(path: Path) -> None:
        from sortedrl.plot.perfetto import perfetto_json

        path.write_text(perfetto_json(timeline), encoding="utf-8")
    return write


def print_notes(outs) -> None:
    for note in outs.notes:
        typer.echo(note, err=True)


class LazyProgress(Phases):
    """One bar (``total`` units of ``label``) on stderr, shown once a command has run a second."""

    def __init__(self, total: int, label: str) -> None:
        super().__init__(err)
        self.phase(label, total)


def summary_text(summary: dict, title: str) -> str:
    """A summary as a metric-per-row text table fitted to the terminal; knobs (as used, with
    their auto values) under it, wrapped, since one line of them can be wider than a screen. A
    real run's bound and efficiency, 0 in its summary.json, are printed ``-`` with a note: a 0
    read as "0% efficient", where a real run has no cost model to bound it with."""
    from sortedrl.policies.auto import knob_text
    from sortedrl.run_summary import UNBOUNDED, has_no_bound
    from sortedrl.tables import Col, render, terminal_width

    unbounded = UNBOUNDED if has_no_bound(summary) else ()
    rows = [[key, "-" if key in unbounded else _cell(value, key), UNITS.get(key, "")]
            for key, value in summary.items() if key not in ("params", "auto_params")]
    notes = ["knobs: " + knob_text(summary.get("params", {}), summary.get("auto_params", {}))]
    if unbounded:
        notes.append(f"{' and '.join(unbounded)}: - for a real run, which has no cost model to bound it "
                     "with (summary.json holds 0); replay its trace.jsonl on a calibrated profile "
                     "with `sortedrl simulate` for one")
    return render([Col("metric", left=True), Col("value"), Col("unit", left=True)], rows,
                  terminal_width(), title, notes)


# -- options several commands take ------------------------------------------------------------------

def _preset_default(field: str) -> str:
    """Help text for a per-preset default: the value most presets share, then the exceptions."""
    values = {name: getattr(p, field) for name, p in {**PRESETS, **AGENTIC_PRESETS}.items()}
    common = max(set(values.values()), key=list(values.values()).count)
    others = ", ".join(f"{name} {v}" for name, v in values.items() if v != common)
    return f"the preset's, {common}" + (f"; {others}" if others else "")


TRACE = typer.Option(None, "--trace", "--trace-model", callback=lambda p: p and resolve_bundled(p),
                     help="length trace (.jsonl, .csv, .parquet; a bundled one by its name: "
                          f"{bundled_help()}), or a trace model from `trace fit`")
SYNTHETIC = typer.Option(None, "--synthetic", help=f"synthetic preset ({', '.join(preset_names())})")
CLUSTER = typer.Option("h100-llama3.1-8b", "--cluster", help=(
    "a preset GPU-MODEL, optionally with -tpN, -Ngpu, -Nseq, -disagg (`sortedrl clusters` lists them with their "
    "tp and GPUs; defaults 8 GPUs unless the model needs more, 256 seqs per engine, colocated), a "
    "cluster JSON file, or a calibrated profile"))
SEED = typer.Option(0, "--seed", help="seed: synthetic traces, the lengths of regenerated responses (--regen resample), searches")
PROMPTS = typer.Option(None, "--prompts", show_default=False,
                       help=f"synthetic or trace model: prompts per step (default: {_preset_default('prompts')}; a "
                            "trace model's own)")
GROUP_SIZE = typer.Option(None, "--group-size", show_default=False,
                          help=f"synthetic: responses per prompt, GRPO n (default: {_preset_default('group_size')})")
STEPS = typer.Option(4, "--steps", help="synthetic or trace model: training steps (the first is every "
                                        "policy's warm-up)")
TIMELINE = typer.Option("npz", "--timeline", help="timeline file format: npz (columnar, fast, the "
                        "default) or jsonl (text); on the bundled math-16k 54-114 and 141-326 bytes a "
                        "sample, by policy, and more where samples are regenerated or preempted (a row "
                        "per attempt and span); docs/metrics.md")
FORCE = typer.Option(False, "--force", help="replace existing outputs (written atomically)")
WORKERS = typer.Option(1, "--workers", help="simulations at once, in local processes (the same "
                       "results; each holds a whole run in memory)")
REGEN = typer.Option("resample", "--regen", help="length of a regenerated attempt: resample (a fresh "
                     "draw for its prompt, docs/metrics.md) or same (repeat the recorded length)")
