"""``sortedrl model init``: a tiny Qwen2 model and a locally trained tokenizer, in HF format.

Nothing is downloaded: the tokenizer is a word-level ``tokenizers`` model trained on the toy
task's text, the weights are random. Head size 32, because vLLM's CPU attention backend supports
no smaller. An exact-match reward gives a random model no signal at all (it never answers right),
so ``warmup_steps`` optionally warm-starts it with a few hundred supervised steps on task
examples, the way RL starts from an SFT model; RL then has something to improve.
"""

from __future__ import annotations

import json
from pathlib import Path

from sortedrl.errors import ConfigError
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
               warmup_steps: int = 300, seed: int = 0, dataset: str | None = None) -> Path:
    """Build and save the tiny model; returns its directory."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    out = Path(out)
    if out.exists() and any(out.iterdir()):
        raise ConfigError(f"--out {out}: exists and is not empty")
    if hidden % 32 or hidden < 64:
        raise ConfigError(f"--hidden {hidden}: must be a multiple of 32 and >= 64 (vLLM CPU head size)")
    t = get_task(task, dataset)
    torch.manual_seed(seed)
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
        warm_start(model, tokenizer, t, warmup_steps, seed)
    tmp = out.with_name(f".{out.name}.tmp")
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    (tmp / MODEL_CARD).write_text(json.dumps({"task": task, "hidden": hidden, "layers": layers,
                                              "warmup_steps": warmup_steps, "seed": seed}, indent=2))
    if out.exists():
        out.rmdir()
    tmp.rename(out)
    return out


def warm_start(model, tokenizer, task, steps: int, seed: int, batch: int = 32, lr: float = 3e-3,
               max_batch_tokens: int = 16384) -> None:
    """Supervised steps on prompt + answer + EOS, loss on the answer tokens only. A step whose
    padded batch exceeds ``max_batch_tokens`` (long tasks) is cut into micro-batches of similar
    length whose gradients add up to the whole batch's."""
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
        json.loads((p / "config.json").read_text())
    except json.JSONDecodeError as e:
        raise ConfigError(f"--model {p}/config.json: line {e.lineno}: not valid JSON ({e.msg})") from None
    return p
