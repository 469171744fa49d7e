"""Policy names: the registry from a name to its class, plus ``module:Class`` for a user's own.

A new built-in policy is one class and one line in ``BUILTIN``.
"""

from __future__ import annotations

import difflib
import inspect
import os
import shlex
from pathlib import Path

from sortedrl.errors import ConfigError, SortedRLError, did_you_mean
from sortedrl.policies.async_rl import AsyncPolicy
from sortedrl.policies.base import Policy, RunContext, parse_params
from sortedrl.policies.checks import check_policy_class, no_attach_oracle
from sortedrl.policies.one_step_off import OneStepOffPolicy
from sortedrl.policies.oracle_sorted import OracleSortedPolicy
from sortedrl.policies.partial import PartialRolloutPolicy
from sortedrl.policies.predictors import OracleLengths
from sortedrl.policies.sortedrl import SortedRLPolicy
from sortedrl.policies.sync import SyncPolicy
from sortedrl.policies.tail_batch import TailBatchPolicy
from sortedrl.user_code import import_user_module, is_users, raised, users_frame

BUILTIN: dict[str, type[Policy]] = {
    "sync": SyncPolicy,
    "sortedrl": SortedRLPolicy,
    "partial": PartialRolloutPolicy,
    "tail_batch": TailBatchPolicy,
    "async": AsyncPolicy,
    "one_step_off": OneStepOffPolicy,
    "oracle_sorted": OracleSortedPolicy,
}


def policy_class(name: str, option: str = "--policy") -> type[Policy]:
    """Resolve a built-in name or ``package.module:ClassName`` (given to ``option``)."""
    if name in BUILTIN:
        return BUILTIN[name]
    module, _, cls_name = name.partition(":")
    if "/" in module or os.sep in module:  # (a file's path: "is not a module name" said no more)
        path = Path(module)
        raise ConfigError(f"{option} {name!r}: {module!r} is a file's path, not a module name: put its directory "
                          f"on the Python path and name the module, PYTHONPATH={shlex.quote(str(path.parent))} sortedrl ... {option} "
                          f"{path.stem if path.suffix == '.py' else path.name}:{cls_name or 'ClassName'}")
    if ":" not in name:
        raise ConfigError(f"unknown policy {name!r}{did_you_mean(name, BUILTIN)} (known: {', '.join(BUILTIN)}; "
                          "or module:Class for your own)")
    mod, cls_name = import_user_module(name, option)
    cls = getattr(mod, cls_name, None)
    if cls is None and not hasattr(mod, cls_name):
        names = {n.lower(): n for n in dir(mod) if not n.startswith("_")}
        close = difflib.get_close_matches(cls_name.lower(), names, n=1)
        hint = f" (did you mean {names[close[0]]}?)" if close else ""
        raise ConfigError(f"{option} {name!r}: no name {cls_name!r} in module {mod.__name__}{hint}")
    if not (inspect.isclass(cls) and issubclass(cls, Policy)):
        raise ConfigError(f"{option} {name!r}: {cls_name!r} is not a Policy subclass in {mod.__name__}")
    check_policy_class(cls)
    return cls


def summary_of(cls: type) -> str:
    """The first paragraph of a policy class's docstring, on one line (``sortedrl policies``)."""
    doc = inspect.cleandoc(cls.__doc__ or "")
    return " ".join(doc.split("\n\n", 1)[0].split())


def builtin_class(name: object, where: str) -> type[Policy]:
    """The built-in policy a file names (a run's meta, a tune.json): a ``module:Class`` there is
    refused without importing it, since an import runs the module's code, and a file may come
    from someone else."""
    if isinstance(name, str) and name in BUILTIN:
        return BUILTIN[name]
    if isinstance(name, str) and ":" in name:
        raise ConfigError(f"{where}: policy {name!r} is not built in, and importing it would run "
                          "code that a file names")
    hint = did_you_mean(name, BUILTIN) if isinstance(name, str) else ""
    raise ConfigError(f"{where}: unknown policy {name!r}{hint} (known: {', '.join(BUILTIN)})")


def run_context(trace) -> RunContext:
    """The public facts about a trace that a policy may size itself by."""
    return RunContext(prompts_per_step=trace.prompts_per_step, group_size=trace.meta.group_size,
                      num_groups=trace.num_groups, max_response_len=trace.meta.max_response_len)


def make_policy(name: str, sets: list[str], trace, label: str = "") -> Policy:
    """Instantiate a policy for ``trace`` with its ``--set key=value`` knobs (``--set
    label.key=value`` in compare and forecast: ``label`` names them so in an error).

    The trace's true lengths reach a policy only through an explicit oracle, and only when the
    policy asks for one (``wants_oracle``); such runs are labelled oracle in every output.
    """
    cls = policy_class(name)
    params = parse_params(cls.Params, sets, name, label=label)
    try:
        policy = cls(params, run_context(trace))
    except ValueError as e:  # a refused knob: the built-in policies check theirs so
        at = users_frame(e) if is_users(cls) else None  # (a user's: where, as for any exception)
        raise ConfigError(f"policy {name}: {e}" + (f" (at {at})" if at else "")) from None
    except SortedRLError:
        raise
    except Exception as e:
        if not is_users(cls):
            raise
        raise ConfigError(f"policy {name} raised {raised(e)}") from None
    if getattr(params, "filter_groups", False) and trace.reward is None:
        raise ConfigError(f"{trace.name}: policy {name}: filter_groups=true needs a reward column, "
                          "and this trace has none")
    if getattr(policy, "wants_oracle", False):
        attach_oracle(policy, name, trace)
    return policy


def attach_oracle(policy: Policy, name: str, trace) -> None:
    """Hand ``policy`` the trace's true lengths (its ``attach_oracle``) and label it an oracle:
    ``policy.oracle`` is what every output reads (the summary's ``"oracle"``, the banner,
    compare's star), whoever wrote the policy. A value the policy gives ``oracle`` itself (the
    oracle object, say) is kept if it is true."""
    attach = getattr(policy, "attach_oracle", None)
    if not callable(attach):
        raise ConfigError(no_attach_oracle(name))
    lengths = getattr(trace, "response_len", None)
    if lengths is None:  # a real run: no length exists before it is generated
        raise ConfigError(f"policy {name} reads true response lengths (an oracle), which a real "
                          "run does not know before generating them (oracle_sorted: --set "
                          "predictor=history)")
    try:
        attach(OracleLengths(lengths.tolist()))
    except SortedRLError:
        raise
    except Exception as e:
        if not is_users(type(policy)):
            raise
        raise ConfigError(f"policy {name} raised {raised(e)}") from None
    if not policy.oracle:
        policy.oracle = True
