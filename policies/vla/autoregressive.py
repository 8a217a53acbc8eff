"""ARVLA: an OpenVLA-style autoregressive VLA.

Shapes: B batch, K chunk, A action width, M = K * A action tokens, T prefix tokens.

Every action dimension in [-1, 1] is cut into `num_bins` equal bins; bin b is token id
`base + b`, the last `num_bins` ids of the LM's vocabulary (appended to the word
tokenizer's vocabulary in the tiny preset; a real LM's last ids, as OpenVLA does). The
chunk is decoded token by token (dimension-major within a step, step after step) with the
LM's KV cache; the logits are restricted to the action ids and divided by `temperature`
(deterministic: the argmax, or with greedy="mean" the bin nearest the mean of the
distribution at temperature 1). The first action token is predicted from the prefix's
final marker token. With `state_token` (the default) the normalised, padded proprioceptive state
is projected into one token between the instruction and the marker, so the LM sees where
the arm is (OpenVLA reads images only; OpenVLA-OFT and pi0-FAST add the state). The value
head reads the marker's last hidden state, detached.

act's replay is the sampled bin ids int64 [B, M]; evaluate recomputes their log-probs with
one teacher-forced forward. log_prob_parts [B, n, A] are the executed actions' token
log-probs under the sampling temperature (tokens of actions past `execute_steps` are
sampled after them and never executed, so they are left out); log_prob is their sum.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from policies.base import ActOutput, Evaluation
from policies.vla.common import VLAPolicy
from policies.vla.config import ARVLAConfig


class ARVLA(VLAPolicy):
    name = "ar_vla"
    config_class = ARVLAConfig
    causal_lm = True
    marker = True

    def __init__(self, config: ARVLAConfig, _source_dir: Any = None):
        super().__init__(config, _source_dir)
        self.base_id = self.prefix.lm.get_input_embeddings().num_embeddings - config.num_bins
        self.state_proj = (torch.nn.Linear(config.max_state_dim, self.prefix.width)
                           if config.state_token else None)

    def extra_vocab(self) -> int:
        # The word tokenizer gets num_bins new ids; a real LM gives up its last num_bins ids.
        return self.config.num_bins if self.tokenizer.hf is None else 0

    # -- action <-> tokens --------------------------------------------------------
    def to_bins(self, actions: torch.Tensor) -> torch.Tensor:
        """float [B, K, A] in [-1, 1] -> bin ids int64 [B, K * A]."""
        nb = self.config.num_bins
        b = ((actions.clamp(-1, 1) + 1) / 2 * nb).floor().long().clamp(0, nb - 1)
        return b.reshape(actions.shape[0], -1)

    def from_bins(self, bins: torch.Tensor) -> torch.Tensor:
        """bin ids [B, K * A] -> bin centres float32 [B, K, A]."""
        centres = -1.0 + (bins.float() + 0.5) * 2.0 / self.config.num_bins
        return centres.reshape(bins.shape[0], self.config.chunk_size, self.config.action_dim)

    def action_logits(self, hidden: torch.Tensor, temperature: float | None = None) -> torch.Tensor:
        """Hidden [..., D] -> logits [..., num_bins] over the action ids only, / temperature."""
        temperature = self.config.temperature if temperature is None else temperature
        head = self.prefix.lm.get_output_embeddings()
        w = head.weight[self.base_id:self.base_id + self.config.num_bins]
        b = None if head.bias is None else head.bias[self.base_id:self.base_id + self.config.num_bins]
        return F.linear(hidden, w, b).float() / temperature

    def _embed_bins(self, bins: torch.Tensor) -> torch.Tensor:
        return self.prefix.lm.get_input_embeddings()(bins + self.base_id)

    def _prefix_embeds(self, obs: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
        B = obs["state"].shape[0]
        ids, mask = self.text(obs, B)
        state = None
        if self.state_proj is not None:  # [B, 1, D]
            state = self.state_proj(self.padded_state(obs).to(self.state_proj.weight.dtype))[:, None]
        return self.prefix.embed(obs, ids, mask, state)  # [B, T, D], [B, T]

    # -- Policy contract -------------------------------------------------------------
    @torch.no_grad()
    def act(self, obs: dict[str, Any], deterministic: bool = False) -> ActOutput:
        """Chunk float32 [B, n, A] (n = execute_steps or K); log_prob [B] = sum of the executed tokens' log-probs;
        replay {"bins": int64 [B, M], "decode_log_prob": float [B] (the cached decoding's own sum)}."""
        embeds, mask = self._prefix_embeds(obs)
        hidden, cache = self.prefix.run(embeds, mask)
        B, M = embeds.shape[0], self.config.chunk_size * self.config.action_dim
        value = self.value_from(hidden[:, -1], obs)
        h, pos, past_mask = hidden[:, -1], mask.long().sum(1), mask
        one = torch.ones(B, 1, dtype=torch.bool, device=mask.device)
        bins, decoded = [], torch.zeros(B, device=embeds.device)
        for j in range(M):
            logits = self.action_logits(h, temperature=1.0)  # [B, nb]
            logp = torch.log_softmax(logits / self.config.temperature, dim=-1)
            # the deterministic token does not depend on the sampling temperature
            tok = self._greedy(logits) if deterministic else torch.multinomial(logp.exp(), 1).squeeze(-1)
            decoded += logp.gather(-1, tok[:, None]).squeeze(-1)
            bins.append(tok)
            if j + 1 < M:  # feed the token back through the cached LM
                out, cache = self.prefix.run(self._embed_bins(tok)[:, None], one, past=cache,
                                             past_mask=past_mask, start=pos)
                h, pos, past_mask = out[:, -1], pos + 1, torch.cat([past_mask, one], dim=1)
        bins_t = torch.stack(bins, dim=1)
        # Score the sampled tokens with the one teacher-forced forward that evaluate() uses: the
        # cached decoding's own log-prob (`log_prob` above) differs from it by float error only
        # (about 1e-7 per token, tested), and this way the first PPO ratio is exactly 1.
        logp, _ = self._teacher_forced(obs, bins_t)
        parts = self._parts(logp, bins_t)
        return ActOutput(self.executed(self.from_bins(bins_t)), parts.sum((1, 2)), value,
                         {"bins": bins_t, "decode_log_prob": decoded}, parts)

    def _greedy(self, logits: torch.Tensor) -> torch.Tensor:
        """The deterministic token of logits [B, nb] at temperature 1: int64 [B]."""
        if self.config.greedy == "argmax":
            return logits.argmax(-1)
        if self.config.greedy == "vertex":
            return vertex_bin(logits)
        bins = torch.arange(logits.shape[-1], device=logits.device, dtype=logits.dtype)
        return (torch.softmax(logits, dim=-1) @ bins).round().long()  # the bin nearest the mean

    def _parts(self, logp: torch.Tensor, bins: torch.Tensor) -> torch.Tensor:
        """Per-token log-probs of the executed actions: logp [B, M, nb], bins [B, M] -> [B, n, A]."""
        tok = logp.gather(-1, bins[..., None]).squeeze(-1)  # [B, M]
        return self.executed(tok.view(bins.shape[0], self.config.chunk_size, self.config.action_dim))

    def _teacher_forced(self, obs: dict[str, Any], bins: torch.Tensor,
                        temperature: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """One forward over [prefix ; bins[:, :-1]] -> log-probs [B, M, nb], marker hidden [B, D]."""
        embeds, mask = self._prefix_embeds(obs)
        T = embeds.shape[1]
        seq = torch.cat([embeds, self._embed_bins(bins[:, :-1])], dim=1)
        full = torch.cat([mask, torch.ones(bins.shape[0], bins.shape[1] - 1, dtype=torch.bool,
                                           device=mask.device)], dim=1)
        hidden, _ = self.prefix.run(seq, full)
        logp = torch.log_softmax(self.action_logits(hidden[:, T - 1:], temperature), dim=-1)  # [B, M, nb]
        return logp, hidden[:, T - 1]

    def evaluate(self, obs: dict[str, Any], replay: dict[str, torch.Tensor]) -> Evaluation:
        """log_prob [B] and parts [B, n, A] (the executed actions' tokens, under the sampling
        temperature), entropy [B] (sum of those tokens' entropies), value [B]."""
        bins = replay["bins"].to(self.device)
        logp, h = self._teacher_forced(obs, bins)
        parts = self._parts(logp, bins)
        ent = -(logp.exp() * logp).sum(-1)  # [B, M]
        entropy = self.executed(ent.view(bins.shape[0], self.config.chunk_size, -1)).sum((1, 2))
        return Evaluation(parts.sum((1, 2)), entropy, self.value_from(h, obs), parts)

    def get_value(self, obs: dict[str, Any]) -> torch.Tensor:
        if self.critic is None:
            raise NotImplementedError("ARVLA was built with critic=False")
        if self.config.critic_obs == "privileged":
            return self.value_from(None, obs)
        embeds, mask = self._prefix_embeds(obs)
        hidden, _ = self.prefix.run(embeds, mask)
        return self.value_from(hidden[:, -1], obs)

    def sft_loss(self, obs: dict[str, Any], actions: torch.Tensor) -> torch.Tensor:
        """Token cross-entropy on demonstrated chunks [B, K, A]; obs['action_valid'] bool [B, K]
        (optional) masks steps past an episode's end. With config.label_sigma > 0 the target
        of each token is a Gaussian over the bins around the demonstrated one."""
        bins = self.to_bins(actions.to(self.device))
        logp, _ = self._teacher_forced(obs, bins, temperature=1.0)  # [B, M, nb]
        sigma = self.config.label_sigma
        if sigma > 0:
            j = torch.arange(logp.shape[-1], device=logp.device, dtype=logp.dtype)
            target = torch.softmax(-0.5 * ((j - bins[..., None].to(logp.dtype)) / sigma) ** 2, dim=-1)
            nll = -(target * logp).sum(-1)  # [B, M]
        else:
            nll = -logp.gather(-1, bins[..., None]).squeeze(-1)  # [B, M]
        valid = obs.get("action_valid")
        if valid is None:
            return nll.mean()
        w = valid.to(nll.device, nll.dtype).repeat_interleave(self.config.action_dim, dim=1)
        return (nll * w).sum() / w.sum().clamp(min=1.0)


def vertex_bin(logits: torch.Tensor) -> torch.Tensor:
    """The bin nearest the peak of a parabola fitted to the log-probs: logits [B, nb] -> int64 [B].

    A least-squares fit of log p_j ~ a u_j^2 + b u_j + c over the bins (u_j in [-1, 1]),
    each bin weighted by p_j; the peak is -b / 2a, clamped to the range. For the Gaussian
    bumps that label_sigma SFT teaches this is the bump's centre, like the mean, but where
    the bump is cut by the end of the range (a demonstrated action at +-1, common when the
    expert saturates its command) the mean is pulled inwards by about 0.8 sigma and the
    vertex is not. A distribution with no peak (a >= 0, e.g. all mass on one or two bins)
    falls back to the mean.
    """
    nb = logits.shape[-1]
    logp = torch.log_softmax(logits.double(), dim=-1)
    p = logp.exp()
    u = torch.linspace(-1.0, 1.0, nb, dtype=torch.float64, device=logits.device)
    X = torch.stack([u * u, u, torch.ones_like(u)], dim=-1)  # [nb, 3]
    z = torch.where(p > 0, logp, torch.zeros_like(logp))  # -inf log-probs carry no weight
    G = torch.einsum("bj,jk,jl->bkl", p, X, X) + 1e-9 * torch.eye(3, dtype=torch.float64, device=logits.device)
    a, b, _ = torch.linalg.solve(G, (p * z) @ X).unbind(-1)  # [B] each
    peak = torch.where(a < 0, -b / (2 * a.clamp(max=-1e-12)), p @ u).clamp(-1.0, 1.0)
    return ((peak + 1) / 2 * (nb - 1)).round().long()
