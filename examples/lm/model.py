"""A decoder-only transformer language model in plain torch.nn (GPT-2's
layout: pre-norm blocks, learned positions, tied input and output
embeddings), in the two sizes of examples/lm/train.py.

Runs on torch 1.13 and 2.x: where torch has scaled_dot_product_attention
(2.0 on) the attention uses it (fused kernels on a GPU); otherwise it is
written out, with the same result up to rounding.
"""

import dataclasses
import math

import torch
import torch.nn.functional as F


@dataclasses.dataclass
class GPTConfig:
    n_layer: int
    n_head: int
    d_model: int
    context: int
    vocab_size: int
    dropout: float = 0.0


# The model sizes train.py offers. vocab_size None: the tokenizer's.
SIZES = {
    # 8 x 512: 25.2 M parameters in the blocks, about 29.5 M with an 8192-piece embedding.
    "25m": dict(n_layer=8, n_head=8, d_model=512, context=256, vocab_size=None),
    # GPT-2 small: 124.4 M parameters with its 50,257-token vocabulary (a model shape:
    # a smaller tokenizer leaves rows unused).
    "gpt2": dict(n_layer=12, n_head=12, d_model=768, context=1024, vocab_size=50257),
    # GPT-2 medium: 354.8 M parameters, for host-memory measurements.
    "gpt2-medium": dict(n_layer=24, n_head=16, d_model=1024, context=1024, vocab_size=50257),
}


class CausalSelfAttention(torch.nn.Module):
    def __init__(self, cfg):
        super().__init__()
        if cfg.d_model % cfg.n_head:
            raise ValueError(f"d_model {cfg.d_model} is not a multiple of n_head {cfg.n_head}")
        self.n_head = cfg.n_head
        self.qkv = torch.nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.proj = torch.nn.Linear(cfg.d_model, cfg.d_model)
        self.dropout = cfg.dropout
        self._fused = hasattr(F, "scaled_dot_product_attention")
        if not self._fused:
            mask = torch.ones(cfg.context, cfg.context, dtype=torch.bool).tril()
            self.register_buffer("mask", mask, persistent=False)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.n_head, c // self.n_head).transpose(1, 2) for z in (q, k, v))
        p = self.dropout if self.training else 0.0
        if self._fused:
            y = F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(~self.mask[:t, :t], float("-inf")).softmax(dim=-1)
            y = F.dropout(att, p, self.training) @ v
        y = y.transpose(1, 2).reshape(b, t, c)
        return F.dropout(self.proj(y), self.dropout, self.training)


class Block(torch.nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.ln1 = torch.nn.LayerNorm(cfg.d_model)
        self.attn = CausalSelfAttention(cfg)
        self.ln2 = torch.nn.LayerNorm(cfg.d_model)
        self.fc = torch.nn.Linear(cfg.d_model, 4 * cfg.d_model)
        self.out = torch.nn.Linear(4 * cfg.d_model, cfg.d_model)
        self.dropout = cfg.dropout

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        h = self.out(F.gelu(self.fc(self.ln2(x))))
        return x + F.dropout(h, self.dropout, self.training)


class GPT(torch.nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.tok = torch.nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.pos = torch.nn.Embedding(cfg.context, cfg.d_model)
        self.blocks = torch.nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = torch.nn.LayerNorm(cfg.d_model)
        self.apply(self._init)
        # GPT-2's scaling of the projections into the residual stream: each
        # block adds two, so their variance is kept from growing with depth.
        for block in self.blocks:
            for proj in (block.attn.proj, block.out):
                torch.nn.init.normal_(proj.weight, 0.0, 0.02 / math.sqrt(2 * cfg.n_layer))

    @staticmethod
    def _init(m):
        if isinstance(m, torch.nn.Linear):
            torch.nn.init.normal_(m.weight, 0.0, 0.02)
            torch.nn.init.zeros_(m.bias)
        elif isinstance(m, torch.nn.Embedding):
            torch.nn.init.normal_(m.weight, 0.0, 0.02)

    def forward(self, idx, targets=None):
        """Logits (batch, time, vocab); with targets, (logits, mean cross-entropy)."""
        t = idx.size(1)
        if t > self.cfg.context:
            raise ValueError(f"sequence of {t} tokens is longer than the context {self.cfg.context}")
        x = self.tok(idx) + self.pos(torch.arange(t, device=idx.device))
        for block in self.blocks:
            x = block(x)
        logits = self.ln_f(x) @ self.tok.weight.t()  # tied output embedding
        if targets is None:
            return logits
        loss = F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.reshape(-1))
        return logits, loss

    def num_parameters(self, embeddings=True):
        n = sum(p.numel() for p in self.parameters())
        return n if embeddings else n - self.tok.weight.numel() - self.pos.weight.numel()


def build(size, vocab_size=None, context=None, dropout=0.0):
    """The GPT of one of SIZES; vocab_size and context override the size's."""
    if size not in SIZES:
        raise ValueError(f"unknown model size {size!r}: one of {', '.join(SIZES)}")
    shape = dict(SIZES[size])
    if vocab_size is not None:
        shape["vocab_size"] = vocab_size
    if context is not None:
        shape["context"] = context
    if shape["vocab_size"] is None:
        raise ValueError(f"size {size!r} takes its vocabulary from the tokenizer: pass vocab_size")
    return GPT(GPTConfig(dropout=dropout, **shape))


def parameter_groups(model, weight_decay):
    """AdamW groups: decay on the matrices of the linear layers and the
    (tied) token embedding; none on biases, norms and the position table,
    whose shrinking towards zero only hurts."""
    decay, rest = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        (decay if p.dim() >= 2 and not name.startswith("pos.") else rest).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": rest, "weight_decay": 0.0}]
