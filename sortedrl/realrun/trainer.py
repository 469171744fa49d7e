"""The GRPO trainer: plain torch, one update per ``Train`` action.

Deliberate choices (after TRL's GRPOTrainer and the reference notes, anchors.md §C):
- advantages are group-normalised, ``(r - mean) / (std + 1e-4)`` with the sample std (n - 1),
  over the group's *trained* attempts: those in this update plus those trained in earlier ones
  (a policy may spread a group over updates). A dropped attempt (aborted and regenerated) or a
  discarded or filtered sample never enters a baseline (:class:`GroupRewards`); with group size
  1, verl's convention: mean 0, std 1, so the advantage is the reward;
- the loss is the token-level clipped surrogate with DAPO normalisation (summed over tokens,
  divided by the batch's response tokens); the batch runs in micro-batches of similar length
  whose attention matrices stay under a bound (:func:`micro_batches`), gradients summed;
- the "old" log-probs are vLLM's behaviour log-probs, kept per token with the policy version that
  sampled it. ``objective="bypass"`` (the default): every token, stale or not, is PPO-clipped
  against them, as verl's bypass mode does. Tokens from an older version get ``min(ratio,
  is_cap)`` inside the graph, which *masks* a token beyond the cap (zero gradient) rather than
  truncating its weight, so stale data cannot blow the update up but policies with more stale
  tokens lose more gradient (and the clip removes the gradient of a stale token whose ratio
  drifted past 1 + clip with A > 0). ``objective="decoupled"``: AReaL's decoupled PPO loss,
  clipped against the proximal policy (the weights being trained) and weighted by proximal /
  behaviour, a weight above ``is_cap`` masking the token (:meth:`GRPOTrainer._decoupled`). The
  log-ratio is clamped to +-20 before exp (verl). A group split over updates is baselined on
  its members trained so far, and
  each update is one AdamW step whatever its size: docs/policies.md, "What the real runner's
  update is, and is not";
- an optional k3 KL to the initial weights (``kl_coef``);
- the weights and AdamW stay in fp32; ``dtype="bfloat16"`` runs the forward under autocast and
  pushes bf16 weights to the engine (mixed precision, as verl and TRL train);
- temperature is applied to the trainer's logits exactly as vLLM applies it when sampling, and
  the mismatch between vLLM's and the trainer's log-probs of on-policy tokens is logged every
  update (it should be ~0 in fp32).
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass

MAX_PAIRS = 2**21  # padded (query, key) pairs per micro-batch: bounds the attention memory
EPS = 1e-4  # added to a group's reward std
MAX_LOG_RATIO = 20.0  # the log importance ratio is clamped to +-this before exp, as in verl
OBJECTIVES = ("bypass", "decoupled")  # how stale tokens are trained (module docstring)


def micro_batches(batch: list, max_pairs: int = MAX_PAIRS) -> list[list[int]]:
    """Indices of ``batch`` cut into micro-batches of similar length (prompt + response), each
    padded to its longest with at most ``max_pairs`` (query, key) pairs (an attention matrix is
    that big): the simulator's :func:`sortedrl.sim.cost.micro_batches`, which costs them."""
    from sortedrl.sim.cost import micro_batches as split

    return split([len(r.prompt) + len(r.response) for r in batch], max_pairs)


@dataclass
class Rollout:
    sample: int
    group: int
    prompt: list[int]
    response: list[int]
    behaviour: list[float]  # vLLM log-prob of each response token
    versions: list[int]  # policy version that sampled each token
    reward: float
    mask: list[bool] | None = None  # multi-turn: False for tool-output tokens (never trained)


def trained_tokens(r: Rollout) -> int:
    """Response tokens the loss covers: all of them, less a multi-turn response's tool output."""
    return len(r.response) if r.mask is None else sum(r.mask)


def group_advantages(batch: list[Rollout], trained_before: dict[int, list[float]],
                     group_size: int) -> list[float]:
    """GRPO advantages of ``batch``: ``(r - mean) / (std + EPS)`` with the sample std (n - 1, as
    ``torch.std`` in TRL, verl, slime and AReaL). Group g's baseline is ``trained_before[g]``
    (rewards of its attempts trained in earlier updates) plus the rewards of its members in this
    batch. With ``group_size`` 1 a group's mean is 0 and its std 1 (verl's convention): the
    advantage is the reward over ``1 + EPS``. The lone trained member of a larger group (the
    first of a group split over updates) has no baseline yet and gets 0."""
    rewards: dict[int, list[float]] = {}
    for r in batch:
        rewards.setdefault(r.group, list(trained_before.get(r.group, ()))).append(r.reward)
    out = []
    for r in batch:
        rs = rewards[r.group]
        n = len(rs)
        if group_size == 1:
            mean, std = 0.0, 1.0
        elif n == 1:
            mean, std = r.reward, 0.0
        else:
            mean = sum(rs) / n
            std = math.sqrt(sum((x - mean) ** 2 for x in rs) / (n - 1))
        out.append((r.reward - mean) / (std + EPS))
    return out


class GroupRewards:
    """Rewards per GRPO group, counting trained attempts only.

    ``finished`` records the reward of a sample's current attempt; a later attempt of the same
    sample (the first was dropped and regenerated) replaces it, so a dropped attempt's reward
    never reaches a baseline. ``advantages`` computes an update's advantages and then records its
    rewards as trained. Samples that are never trained (discarded, filtered) never count.
    """

    def __init__(self, group_size: int) -> None:
        self.group_size = group_size
        self.current: dict[int, float] = {}  # sample -> reward of its latest finished attempt
        self.trained: dict[int, list[float]] = {}  # group -> rewards of its trained attempts

    def finished(self, sample: int, reward: float) -> None:
        self.current[sample] = reward

    def advantages(self, batch: list[Rollout]) -> list[float]:
        for r in batch:
            if self.current.get(r.sample) != r.reward:
                raise ValueError(f"sample {r.sample}: trained reward differs from its last attempt's")
        out = group_advantages(batch, self.trained, self.group_size)
        for r in batch:
            self.trained.setdefault(r.group, []).append(r.reward)
        return out


class GRPOTrainer:
    def __init__(self, model_dir: str, lr: float = 1e-3, clip: float = 0.2, kl_coef: float = 0.0,
                 temperature: float = 1.0, is_cap: float = 2.0, seed: int = 0,
                 device: str = "cpu", dtype: str = "float32", max_pairs: int = MAX_PAIRS,
                 objective: str = "bypass") -> None:
        if objective not in OBJECTIVES:
            raise ValueError(f"objective {objective!r}: expected one of {', '.join(OBJECTIVES)}")
        import torch
        from transformers import AutoModelForCausalLM

        from sortedrl.realrun.engine import quiet_transformers

        quiet_transformers()
        torch.manual_seed(seed)
        self.torch = torch
        self.device = torch.device(device)
        # fp32 master weights whatever ``dtype``: AdamW on bf16 weights rounds away every step
        # below half a bf16 ulp of the weight; ``dtype`` is the forward's (autocast) and the
        # weights' pushed to the engine
        self.dtype = getattr(torch, dtype)
        self.model = AutoModelForCausalLM.from_pretrained(
            model_dir, dtype=torch.float32).to(self.device)
        self.model.train()
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=lr)
        self.ref = copy.deepcopy(self.model).eval() if kl_coef > 0 else None
        self.clip, self.kl_coef, self.temperature, self.is_cap = clip, kl_coef, temperature, is_cap
        self.max_pairs, self.objective = max_pairs, objective
        self.pad = self.model.config.pad_token_id or 0
        self._warm_up()

    def _warm_up(self) -> None:
        """One forward and backward pass on a dummy batch, gradients discarded and no optimizer
        step: the CPU kernels' first-use cost stays out of the first update's time."""
        vocab = self.model.config.vocab_size
        dummy = [Rollout(0, 0, [1, 2, 3], [min(4, vocab - 1)] * 4, [0.0] * 4, [0] * 4, 0.0)]
        logp, mask = self._logps(self.model, dummy)
        (logp * mask).sum().backward()
        self.opt.zero_grad(set_to_none=True)

    def _logps(self, model, batch: list[Rollout]):
        torch = self.torch
        seqs = [r.prompt + r.response for r in batch]
        width = max(map(len, seqs))
        ids = torch.full((len(seqs), width), self.pad, dtype=torch.long, device=self.device)
        attn = torch.zeros((len(seqs), width), dtype=torch.long, device=self.device)
        for k, s in enumerate(seqs):
            ids[k, : len(s)] = torch.tensor(s, device=self.device)
            attn[k, : len(s)] = 1
        with torch.autocast(self.device.type, dtype=self.dtype, enabled=self.dtype != torch.float32):
            logits = model(input_ids=ids, attention_mask=attn).logits[:, :-1]
        logits = logits.float() / self.temperature
        logp = torch.log_softmax(logits, dim=-1)
        target = ids[:, 1:]
        picked = logp.gather(-1, target.unsqueeze(-1)).squeeze(-1)
        mask = torch.zeros_like(picked)
        for k, r in enumerate(batch):
            start = len(r.prompt) - 1  # position predicting the first response token
            mask[k, start: start + len(r.response)] = 1.0
            if r.mask is not None:  # tool output inside the response is context, not trained
                mask[k, start: start + len(r.response)] = torch.tensor(r.mask, device=self.device)
        return picked, mask

    def update(self, batch: list[Rollout], advantages: list[float], version: int) -> dict:
        """One optimizer step; returns the update's metrics. The batch runs in micro-batches of
        similar length (:func:`micro_batches`) whose gradients add up to the whole batch's."""
        total = max(1, sum(map(trained_tokens, batch)))
        sums = dict.fromkeys(("loss", "kl", "mismatch", "mismatch_signed", "fresh", "clipped",
                              "stale", "capped"), 0.0)
        self.opt.zero_grad()
        for part in micro_batches(batch, self.max_pairs):
            self._accumulate([batch[k] for k in part], [advantages[k] for k in part], version,
                             total, sums)
        self.opt.step()
        fresh = max(1.0, sums["fresh"])
        return {
            "loss": sums["loss"],
            "kl_ref": sums["kl"],
            "logprob_mismatch": sums["mismatch"] / fresh,  # mean |trainer - vLLM|
            "mismatch_kl": sums["mismatch_signed"] / fresh,  # E[vLLM - trainer] on fresh tokens
            "clip_fraction": sums["clipped"] / total,
            "stale_tokens": int(sums["stale"]),
            "capped_tokens": int(sums["capped"]),  # tokens beyond is_cap: no policy gradient
            "tokens": int(sum(map(trained_tokens, batch)) or 1),
        }

    def _accumulate(self, batch: list[Rollout], advantages: list[float], version: int, total: int,
                    sums: dict) -> None:
        """Forward and backward of one micro-batch; its loss is its share of the whole batch's
        (token sums divided by the whole batch's response tokens, DAPO's normalisation)."""
        torch = self.torch
        logp, mask = self._logps(self.model, batch)
        behaviour = torch.zeros_like(logp)
        stale = torch.zeros_like(logp, dtype=torch.bool)
        adv = torch.zeros_like(logp)
        for k, r in enumerate(batch):
            start = len(r.prompt) - 1
            n = len(r.response)
            behaviour[k, start: start + n] = torch.tensor(r.behaviour, device=self.device)
            stale[k, start: start + n] = torch.tensor([v < version for v in r.versions], device=self.device)
            adv[k, start: start + n] = advantages[k]
        raw = torch.exp(torch.clamp(logp - behaviour, -MAX_LOG_RATIO, MAX_LOG_RATIO))
        if self.objective == "decoupled":
            surrogate, unclipped, clipped, capped = self._decoupled(logp, raw, adv, mask)
        else:
            capped = stale & (raw.detach() > self.is_cap)  # the clamp gives these no policy gradient
            ratio = torch.where(stale, torch.clamp(raw, max=self.is_cap), raw)
            unclipped = ratio * adv
            clipped = torch.clamp(ratio, 1 - self.clip, 1 + self.clip) * adv
            surrogate = torch.minimum(unclipped, clipped)
        loss = -(surrogate * mask).sum() / total
        if self.ref is not None:
            with torch.no_grad():
                ref_logp, _ = self._logps(self.ref, batch)
            d = ref_logp - logp
            kl = ((torch.exp(d) - d - 1) * mask).sum() / total
            loss = loss + self.kl_coef * kl
            sums["kl"] += float(kl)
        loss.backward()
        fresh = mask * (~stale).float()
        diff = (logp.detach() - behaviour) * fresh
        sums["loss"] += float(loss.detach())
        sums["mismatch"] += float(diff.abs().sum())
        sums["mismatch_signed"] += float((-diff).sum())
        sums["fresh"] += float(fresh.sum())
        # verl's pg_clipfrac: tokens whose clipped branch won the min, so the clip removed their
        # gradient (A > 0 and ratio > 1 + clip, or A < 0 and ratio < 1 - clip)
        sums["clipped"] += float(((clipped < unclipped).detach().float() * mask).sum())
        sums["stale"] += float((stale.float() * mask).sum())
        sums["capped"] += float((capped.float() * mask).sum())

    def _decoupled(self, logp, raw, adv, mask):
        """AReaL's decoupled PPO loss (``use_decoupled_loss``, ``behav_imp_weight_cap``): the
        ratio is taken against the proximal policy and PPO-clipped, and each token is weighted by
        proximal / behaviour, a weight above ``is_cap`` masking the token (AReaL filters them).
        One optimizer step per update makes the proximal policy the weights being trained, so
        its log-probs are this forward's, detached (AReaL's recompute, without a second pass):
        the ratio is 1, the clip never binds, and the gradient is weight x advantage x the
        log-prob's gradient. Returns (surrogate, unclipped, clipped, capped)."""
        torch = self.torch
        weight = raw.detach()  # exp(proximal - behaviour), the log clamped to +-20
        capped = (weight > self.is_cap) & (mask > 0)
        weight = torch.where(capped, torch.zeros_like(weight), weight)
        ratio = torch.exp(logp - logp.detach())
        unclipped = ratio * adv
        clipped = torch.clamp(ratio, 1 - self.clip, 1 + self.clip) * adv
        return torch.minimum(unclipped, clipped) * weight, unclipped, clipped, capped

    def state_dict(self) -> dict:
        """The weights for the engine, in the run's dtype (the fp32 master weights, cast)."""
        return {k: v.to(self.dtype) if v.is_floating_point() else v
                for k, v in self.model.state_dict().items()}

    def save(self, path: str) -> None:
        self.torch.save({"model": self.model.state_dict(), "opt": self.opt.state_dict()}, path)

    def load(self, path: str) -> None:
        state = self.torch.load(path, weights_only=True)
        self.model.load_state_dict(state["model"])
        self.opt.load_state_dict(state["opt"])
