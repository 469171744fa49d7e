"""``sortedrl model init``: a tiny Qwen2 model and a locally trained tokenizer, in HF format.

Nothing is downloaded: the tokenizer is a word-level ``tokenizers`` model trained on the toy
task's text, the weights are random. Head size 32, because vLLM's CPU attention backend supports
no smaller. An exact-match reward gives a random model no signal at all (it never answers right),
so ``warmup_steps`` optionally warm-starts it with a few hundred supervised steps on task
examples, the way RL starts from an SFT model; RL then has something to improve.

``widen_model`` grows a warm-started model to a few million parameters without training it again
(function-preserving widening, as Net2Net): the old weights sit in a corner of the larger
matrices, the norms are rescaled for the wider hidden state, and every new unit, head and layer
writes (almost) nothing into the residual stream. The larger model answers like the small one
(the same long-tailed lengths), but a decode step costs real compute, not mostly Python
(``bench/validate_cpu.py``).
"""

from __future__ import annotations

import copy
import json
import math
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from sortedrl import jsonio
from sortedrl.aside import aside
from sortedrl.errors import ConfigError
from sortedrl.interrupts import signals_deferred
from sortedrl.outputs import umask
from sortedrl.realrun.install_check import broken_install_line
from sortedrl.realrun.progress_lines import ModelInitLines
from sortedrl.realrun.task import SPECIALS, get_task

MODEL_CARD = "sortedrl_model.json"


def build_tokenizer(lines: list[str]):
    from tokenizers import Tokenizer, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.train_from_iterator(lines, trainers.WordLevelTrainer(special_tokens=SPECIALS))
    bos = tok.token_to_id("<s>")
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", bos)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>",
                                   pad_token="<pad>", unk_token="<unk>")


def init_model(out: str | Path, task: str = "sort", hidden: int = 64, layers: int = 2,
               warmup_steps: int = 300, seed: int = 0, dataset: str | None = None,
               lines: ModelInitLines | None = None) -> Path:
    """Build and save the tiny model; returns its directory. ``lines`` says what it does as it
    goes (where stderr is no terminal: :mod:`~sortedrl.realrun.progress_lines`), once its
    checks have passed."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from sortedrl.realrun.engine import quiet_transformers

    quiet_transformers()
    out = Path(out)
    if hidden % 32 or hidden < 64:
        raise ConfigError(f"--hidden {hidden}: must be a multiple of 32 and >= 64 (vLLM CPU head size)")
    if layers < 1:
        raise ConfigError(f"--layers {layers}: must be >= 1")
    if warmup_steps < 0:
        raise ConfigError(f"--warmup-steps {warmup_steps}: must be >= 0 (0: random weights)")
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out}: exists and is not a directory (a model is a directory of files)")
    if out.exists() and any(out.iterdir()):
        raise ConfigError(f"--out {out}: exists and is not empty (give a new directory; a model is never "
                          "written over another)")
    t = get_task(task, dataset)
    say = lines.phase if lines is not None else (lambda text: None)
    torch.manual_seed(seed)
    say(f"training the tokenizer on the {'--dataset file' if dataset else f'{task} task'}'s text")
    tokenizer = build_tokenizer(t.corpus(2000, seed))
    cfg = Qwen2Config(
        vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=2 * hidden,
        num_hidden_layers=layers, num_attention_heads=hidden // 32, num_key_value_heads=1,
        max_position_embeddings=4096, tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id, torch_dtype="float32",
    )
    model = Qwen2ForCausalLM(cfg)
    if warmup_steps:
        say(f"warm-starting the model: {warmup_steps:,} supervised steps")
        warm_start(model, tokenizer, t, warmup_steps, seed,
                   stepped=lines.stepped if lines is not None else None)
    card = {"task": task, "hidden": hidden, "layers": layers, "warmup_steps": warmup_steps, "seed": seed}

    def save(tmp: Path) -> None:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / MODEL_CARD).write_text(json.dumps(card, indent=2), encoding="utf-8")

    say(f"saving the model to {out}")
    save_aside(out, save)
    return out


def save_aside(out: Path, save: Callable[[Path], None]) -> None:
    """Have ``save`` write a model into a fresh hidden directory beside ``out``, then rename it
    into place: a failure or Ctrl-C removes it, so nothing half-written stays (nor is merged into
    the next run's), and two runs never share one."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=aside(out.name, "tmp-")))
    try:
        os.chmod(tmp, 0o777 & ~umask())
        save(tmp)
        mode = 0o666 & ~umask()
        for f in tmp.rglob("*"):  # safetensors writes its files 0600, whatever the umask
            if f.is_file() and not f.is_symlink():
                os.chmod(f, mode)
        with signals_deferred():
            if out.exists():
                out.rmdir()
            tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def widen_model(src: str | Path, out: str | Path, hidden: int, layers: int, intermediate: int = 0,
                noise: float = 1e-4, seed: int = 0) -> tuple[Path, int]:
    """A wider and deeper copy of the model in ``src`` that computes (almost) the same function;
    returns its directory and its parameter count. New weights read the old hidden state through
    small random weights and write into it through ``noise``-sized ones, so nothing is dead
    (every weight gets a gradient) and the answers stay the small model's."""
    import torch
    from transformers import AutoModelForCausalLM

    src, out = check_model_dir(src), Path(out)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out}: exists and is not a directory (a model is a directory of files)")
    if out.exists() and any(out.iterdir()):
        raise ConfigError(f"--out {out}: exists and is not empty")
    small = AutoModelForCausalLM.from_pretrained(str(src), dtype=torch.float32)
    c0 = small.config
    h0, i0, l0 = c0.hidden_size, c0.intermediate_size, c0.num_hidden_layers
    intermediate = intermediate or 2 * hidden
    if hidden % 32 or hidden < h0 or layers < l0 or intermediate < i0 or c0.num_key_value_heads != 1:
        raise ConfigError(f"--hidden {hidden}, --layers {layers}: must be at least the model's "
                          f"({h0}, {l0}), hidden a multiple of 32")
    cfg = copy.deepcopy(c0)
    cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers = hidden, intermediate, layers
    cfg.num_attention_heads = hidden // 32
    if getattr(cfg, "layer_types", None):
        cfg.layer_types = ["full_attention"] * layers
    torch.manual_seed(seed)
    big = type(small)(cfg)  # random init (std initializer_range) everywhere, then overwritten
    old = small.state_dict()
    scale = math.sqrt(h0 / hidden)  # RMSNorm over more (near-zero) dims: keep the old outputs
    with torch.no_grad():
        for name, w in big.state_dict().items():
            if name.endswith("norm.weight"):
                w.fill_(scale)
            elif name.endswith(("o_proj.weight", "down_proj.weight")):
                w.normal_(0.0, noise)  # what new heads, units and layers write: almost nothing
            elif name.endswith(("embed_tokens.weight", "lm_head.weight")):
                w.zero_()  # the residual stream's new dims start empty
            if name in old:
                o = old[name] * (scale if name.endswith("norm.weight") else 1.0)
                w[tuple(slice(0, n) for n in o.shape)] = o
    card = jsonio.loads((src / MODEL_CARD).read_text(encoding="utf-8")) if (src / MODEL_CARD).exists() else {}
    count = sum(p.numel() for p in big.parameters())
    card.update(hidden=hidden, layers=layers, intermediate=intermediate, parameters=count,
                widened_from=str(src), widen_noise=noise)

    def save(tmp: Path) -> None:
        big.save_pretrained(tmp)
        for f in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
            if (src / f).exists():
                shutil.copy(src / f, tmp / f)
        (tmp / MODEL_CARD).write_text(json.dumps(card, indent=2), encoding="utf-8")

    save_aside(out, save)
    return out, count


def warm_start(model, tokenizer, task, steps: int, seed: int, batch: int = 32, lr: float = 3e-3,
               max_batch_tokens: int = 16384,
               stepped: Callable[[int, int], None] | None = None) -> None:
    """Supervised steps on prompt + answer + EOS, loss on the answer tokens only. A step whose
    padded batch exceeds ``max_batch_tokens`` (long tasks) is cut into micro-batches of similar
    length whose gradients add up to the whole batch's. ``stepped(done, steps)`` after each."""
    import torch

    problems = task.problems(steps * batch, seed + 1)
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    model.train()
    eos = tokenizer.eos_token_id
    for s in range(steps):
        rows = []
        for p in problems[s * batch:(s + 1) * batch]:
            prompt = tokenizer(p.prompt)["input_ids"]
            answer = tokenizer(p.answer, add_special_tokens=False)["input_ids"] + [eos]
            rows.append((prompt + answer, [0] * len(prompt) + [1] * len(answer)))
        total = sum(sum(m) for _, m in rows)
        opt.zero_grad()
        for part in _micro_batches(rows, max_batch_tokens):
            ids, lab = _padded(part, tokenizer.pad_token_id, torch)
            share = sum(sum(m) for _, m in part) / total
            (model(input_ids=ids, labels=lab).loss * share).backward()
        opt.step()
        if stepped is not None:
            stepped(s + 1, steps)
    model.eval()


def _micro_batches(rows: list, max_tokens: int) -> list[list]:
    if len(rows) * max(len(seq) for seq, _ in rows) <= max_tokens:
        return [rows]  # the common case: one batch, in order
    rows = sorted(rows, key=lambda r: len(r[0]))
    parts, part = [], []
    for row in rows:
        if part and (len(part) + 1) * len(row[0]) > max_tokens:
            parts.append(part)
            part = []
        part.append(row)
    return parts + [part]


def _padded(rows: list, pad: int, torch):
    width = max(len(seq) for seq, _ in rows)
    ids = torch.full((len(rows), width), pad)
    lab = torch.full((len(rows), width), -100)
    for r, (seq, mask) in enumerate(rows):
        ids[r, : len(seq)] = torch.tensor(seq)
        lab[r, : len(seq)] = torch.tensor([x if k else -100 for x, k in zip(seq, mask, strict=True)])
    return ids, lab


def check_model_dir(path: str | Path) -> Path:
    """A clear error for anything that is not a model made by ``sortedrl model init``."""
    p = Path(path)
    if not p.is_dir():
        raise ConfigError(f"--model {p}: not a directory")
    for name in ("config.json", "tokenizer.json"):
        if not (p / name).exists():
            raise ConfigError(f"--model {p}: missing {name} (make one with `sortedrl model init`)")
    if not any(p.glob("*.safetensors")):
        raise ConfigError(f"--model {p}: no *.safetensors weights")
    try:
        jsonio.loads((p / "config.json").read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ConfigError(f"--model {p}/config.json: line {e.lineno}: not valid JSON ({e.msg})") from None
    from transformers import AutoConfig

    loaded = {}
    for name, load in (("config.json", AutoConfig.from_pretrained), ("tokenizer.json", load_tokenizer)):
        try:
            loaded[name] = load(str(p))
        except Exception as e:  # transformers' own checks (a field of the wrong type, ...)
            if broken_install_line(e) is not None:
                raise  # (not the file's fault: user_errors names the packages to remove)
            said = " ".join(str(e).split())[:300]
            raise ConfigError(f"--model {p}/{name}: transformers cannot load it "
                              f"({type(e).__name__}: {said})") from None
    check_weights(p, loaded["config.json"])
    return p


def check_weights(p: Path, config) -> None:
    """Each ``*.safetensors`` file of ``p`` readable (its header checked against its size), and
    every tensor in it one of the model's, of the shape ``config`` gives: a file cut short or of
    another model size was a vLLM traceback of a hundred lines or more."""
    import torch
    from safetensors import SafetensorError, safe_open
    from transformers import AutoModelForCausalLM

    try:
        with torch.device("meta"):  # shapes only: no memory, no initialisation
            model = AutoModelForCausalLM.from_config(config)
        expected = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    except Exception as e:  # a model transformers cannot build bare (quantised, remote code): headers only
        if broken_install_line(e) is not None:
            raise
        expected = None
    for path in sorted(p.glob("*.safetensors")):
        try:
            with safe_open(str(path), framework="pt") as f:
                shapes = {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}  # noqa: SIM118
        except (OSError, SafetensorError) as e:
            raise ConfigError(f"--model {path}: not readable safetensors weights ({e})") from None
        for name, shape in (shapes.items() if expected is not None else ()):
            if expected.get(name, shape) != shape or name not in expected:
                want = f"shape {list(expected[name])}" if name in expected else "no such tensor"
                raise ConfigError(f"--model {path}: tensor {name} has shape {list(shape)}, but "
                                  f"config.json's model has {want} (weights of another model?)")


def load_tokenizer(model_dir: str | Path):
    """The model's tokenizer. A model of ``model init`` gets the one it was built with (its
    ``tokenizer.json``): transformers' ``AutoTokenizer`` takes it for a Qwen2 BPE tokenizer, which
    splits words into characters and drops every word it cannot spell (``sort 3 1 =`` became
    ``3 1 =``), where the model's own maps an unknown word to ``<unk>``."""
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    if (Path(model_dir) / MODEL_CARD).exists():
        return PreTrainedTokenizerFast.from_pretrained(str(model_dir))
    return AutoTokenizer.from_pretrained(str(model_dir))
