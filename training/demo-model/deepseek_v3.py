"""DeepSeek-V3's architecture in PyTorch, written from Supernode's C++ forward (model/transformer.cpp,
model/moe_layer.cpp, kernels/moe_gate.cpp, kernels/rope.cpp) and the DeepSeek-V3 technical report:
multi-head latent attention with q/kv LoRA and a decoupled RoPE key, dense first layers, MoE layers
with sigmoid scores, e_score_correction_bias and group-limited top-k routing plus a shared expert,
and one multi-token-prediction (MTP) module.

Module and parameter names are the Hugging Face checkpoint's ("model.layers.0.self_attn.q_a_proj
.weight"), so a state_dict is a checkpoint in DeepSeek's layout. The MTP module is layer
num_hidden_layers; during training it shares the main embedding and output head (as the report
describes), and the exporter writes them as its embed_tokens and shared_head.head copies.
"""
import math

import torch
import torch.nn.functional as F
from torch import nn


def rms_norm(x, weight, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        return rms_norm(x, self.weight, self.eps)


def yarn_mscale(scale, mscale):
    return 1.0 if scale <= 1.0 else 0.1 * mscale * math.log(scale) + 1.0


class Rope:
    """Rotary embedding on interleaved pairs (x[2i], x[2i+1]), with YaRN when configured."""

    def __init__(self, cfg):
        dim, theta = cfg["qk_rope_head_dim"], cfg["rope_theta"]
        inv_freq = [1.0 / theta ** (2 * i / dim) for i in range(dim // 2)]
        self.cos_scale = 1.0
        rs = cfg.get("rope_scaling") or {}
        if rs.get("type") == "yarn":
            factor, orig = rs["factor"], rs["original_max_position_embeddings"]

            def correction_dim(rotations):
                return dim * math.log(orig / (rotations * 2 * math.pi)) / (2 * math.log(theta))

            low = max(math.floor(correction_dim(rs["beta_fast"])), 0.0)
            high = min(math.ceil(correction_dim(rs["beta_slow"])), dim - 1.0)
            if low == high:
                high += 0.001
            for i in range(dim // 2):
                ramp = min(max((i - low) / (high - low), 0.0), 1.0)
                inv_freq[i] = inv_freq[i] / factor * ramp + inv_freq[i] * (1.0 - ramp)
            self.cos_scale = yarn_mscale(factor, rs["mscale"]) / yarn_mscale(
                factor, rs["mscale_all_dim"])
        self.inv_freq = torch.tensor(inv_freq, dtype=torch.float64)

    def apply(self, x, positions):
        """x: [..., T, heads?, dim] with positions [T] on dim -3 or -2 as given by `x`'s layout."""
        angle = positions.to(torch.float64)[:, None] * self.inv_freq[None, :]
        cos = (torch.cos(angle) * self.cos_scale).to(x.dtype)
        sin = (torch.sin(angle) * self.cos_scale).to(x.dtype)
        while cos.dim() < x.dim() - 1:
            cos, sin = cos.unsqueeze(-2), sin.unsqueeze(-2)
        a, b = x[..., 0::2], x[..., 1::2]
        return torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1).flatten(-2)


def linear(n_in, n_out):
    return nn.Linear(n_in, n_out, bias=False)


class Attention(nn.Module):
    """Multi-head latent attention: queries through a LoRA (q_a, norm, q_b); keys and values from a
    normalized latent (kv_a, norm, kv_b) plus one RoPE key shared by every head."""

    def __init__(self, cfg):
        super().__init__()
        h, nh = cfg["hidden_size"], cfg["num_attention_heads"]
        self.nh, self.nope, self.rope_dim, self.vd = (nh, cfg["qk_nope_head_dim"],
                                                      cfg["qk_rope_head_dim"], cfg["v_head_dim"])
        self.lora, eps = cfg["kv_lora_rank"], cfg["rms_norm_eps"]
        qk = self.nope + self.rope_dim
        self.q_a_proj = linear(h, cfg["q_lora_rank"])
        self.q_a_layernorm = RMSNorm(cfg["q_lora_rank"], eps)
        self.q_b_proj = linear(cfg["q_lora_rank"], nh * qk)
        self.kv_a_proj_with_mqa = linear(h, self.lora + self.rope_dim)
        self.kv_a_layernorm = RMSNorm(self.lora, eps)
        self.kv_b_proj = linear(self.lora, nh * (self.nope + self.vd))
        self.o_proj = linear(nh * self.vd, h)
        self.scale = 1.0 / math.sqrt(qk)
        rs = cfg.get("rope_scaling") or {}
        if rs.get("type") == "yarn" and rs.get("mscale_all_dim", 0.0):
            self.scale *= yarn_mscale(rs["factor"], rs["mscale_all_dim"]) ** 2

    def forward(self, x, rope, positions):
        B, T, _ = x.shape
        q = self.q_b_proj(self.q_a_layernorm(self.q_a_proj(x))).view(B, T, self.nh, -1)
        q_nope, q_pe = q[..., :self.nope], q[..., self.nope:]
        kva = self.kv_a_proj_with_mqa(x)
        latent = self.kv_a_layernorm(kva[..., :self.lora])
        k_pe = rope.apply(kva[..., self.lora:], positions)  # [B, T, rope]
        q_pe = rope.apply(q_pe, positions)
        kv = self.kv_b_proj(latent).view(B, T, self.nh, self.nope + self.vd)
        k_nope, v = kv[..., :self.nope], kv[..., self.nope:]
        k = torch.cat((k_nope, k_pe[:, :, None, :].expand(B, T, self.nh, self.rope_dim)), -1)
        q = torch.cat((q_nope, q_pe), -1)
        scores = torch.einsum("bihd,bjhd->bhij", q, k) * self.scale
        causal = torch.ones(T, T, dtype=torch.bool).triu(1)
        probs = scores.masked_fill(causal, float("-inf")).softmax(-1)
        out = torch.einsum("bhij,bjhd->bihd", probs, v).reshape(B, T, self.nh * self.vd)
        return self.o_proj(out)


class MLP(nn.Module):
    def __init__(self, h, inter):
        super().__init__()
        self.gate_proj, self.up_proj, self.down_proj = linear(h, inter), linear(h, inter), linear(
            inter, h)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Gate(nn.Module):
    """Sigmoid scores; the choice adds e_score_correction_bias (not trained by gradients: updated by
    auxiliary-loss-free balancing); groups ranked by the sum of their two best biased scores, the
    top topk_group groups kept, the top-k experts of those chosen; weights are the unbiased scores,
    normalized and scaled by routed_scaling_factor (kernels/moe_gate.cpp)."""

    def __init__(self, cfg):
        super().__init__()
        self.n, self.k = cfg["n_routed_experts"], cfg["num_experts_per_tok"]
        self.groups, self.topk_groups = cfg["n_group"], cfg["topk_group"]
        self.normalize, self.scaling = cfg["norm_topk_prob"], cfg["routed_scaling_factor"]
        self.weight = nn.Parameter(torch.empty(self.n, cfg["hidden_size"]))
        self.register_buffer("e_score_correction_bias", torch.zeros(self.n))

    def forward(self, x):
        scores = torch.sigmoid(F.linear(x, self.weight))
        choice = scores.detach() + self.e_score_correction_bias
        if self.groups > 1:
            grouped = choice.view(-1, self.groups, self.n // self.groups)
            group_score = grouped.topk(min(2, grouped.shape[-1]), -1).values.sum(-1)
            keep = group_score.topk(self.topk_groups, -1).indices
            mask = torch.ones_like(group_score, dtype=torch.bool).scatter(1, keep, False)
            choice = grouped.masked_fill(mask[..., None], float("-inf")).view(-1, self.n)
        experts = choice.topk(self.k, -1).indices
        weights = scores.gather(1, experts)
        if self.normalize and self.k > 1:
            weights = weights / weights.sum(-1, keepdim=True)
        return experts, weights * self.scaling, scores


class MoE(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        h, inter = cfg["hidden_size"], cfg["moe_intermediate_size"]
        self.gate = Gate(cfg)
        self.experts = nn.ModuleList(MLP(h, inter) for _ in range(cfg["n_routed_experts"]))
        self.shared_experts = MLP(h, inter * cfg["n_shared_experts"])
        self.last_load = None  # tokens routed to each expert in the last forward
        self.last_balance_loss = None

    def forward(self, x):
        shape = x.shape
        flat = x.reshape(-1, shape[-1])
        experts, weights, scores = self.gate(flat)
        out = torch.zeros_like(flat)
        load = torch.bincount(experts.flatten(), minlength=len(self.experts))
        for e in torch.nonzero(load).flatten().tolist():
            rows, slot = torch.nonzero(experts == e, as_tuple=True)
            out.index_add_(0, rows, self.experts[e](flat[rows]) * weights[rows, slot, None])
        self.last_load = load
        # The report's complementary sequence-wise balance loss (per batch here): f_i P_i.
        k, n = experts.shape[1], len(self.experts)
        f = load.to(flat.dtype) * n / (k * flat.shape[0])
        p = (scores / scores.sum(-1, keepdim=True)).mean(0)
        self.last_balance_loss = (f * p).sum()
        return (out + self.shared_experts(flat)).view(shape)


def is_moe_layer(cfg, layer):
    """As model_config::is_moe_layer: MoE from first_k_dense_replace on, every moe_layer_freq."""
    return (cfg["n_routed_experts"] > 0 and layer >= cfg["first_k_dense_replace"]
            and layer % cfg.get("moe_layer_freq", 1) == 0)


class Block(nn.Module):
    def __init__(self, cfg, moe):
        super().__init__()
        eps = cfg["rms_norm_eps"]
        self.input_layernorm = RMSNorm(cfg["hidden_size"], eps)
        self.self_attn = Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg["hidden_size"], eps)
        self.mlp = MoE(cfg) if moe else MLP(cfg["hidden_size"], cfg["intermediate_size"])

    def forward(self, x, rope, positions):
        x = x + self.self_attn(self.input_layernorm(x), rope, positions)
        return x + self.mlp(self.post_attention_layernorm(x))


class SharedHead(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.norm = RMSNorm(cfg["hidden_size"], cfg["rms_norm_eps"])


class MTPBlock(Block):
    """The MTP module: mixes the embedding of token i+1 with the main model's hidden state at i
    (eh_proj over [enorm(embedding); hnorm(hidden)]), runs one more block and predicts token i+2.
    `hidden` is the main model's output after its final norm, as Supernode's engine feeds it."""

    def __init__(self, cfg):
        super().__init__(cfg, is_moe_layer(cfg, cfg["num_hidden_layers"]))
        h, eps = cfg["hidden_size"], cfg["rms_norm_eps"]
        self.enorm, self.hnorm = RMSNorm(h, eps), RMSNorm(h, eps)
        self.eh_proj = linear(2 * h, h)
        self.shared_head = SharedHead(cfg)

    def forward_mtp(self, next_embedding, hidden, rope, positions):
        x = self.eh_proj(torch.cat((self.enorm(next_embedding), self.hnorm(hidden)), -1))
        return self.shared_head.norm(super().forward(x, rope, positions))


class Body(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        L = cfg["num_hidden_layers"]
        self.embed_tokens = nn.Embedding(cfg["vocab_size"], cfg["hidden_size"])
        layers = [Block(cfg, is_moe_layer(cfg, l)) for l in range(L)]
        layers += [MTPBlock(cfg) for _ in range(cfg.get("num_nextn_predict_layers", 0))]
        self.layers = nn.ModuleList(layers)
        self.norm = RMSNorm(cfg["hidden_size"], cfg["rms_norm_eps"])


class DeepseekV3(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.model = Body(cfg)
        self.lm_head = linear(cfg["hidden_size"], cfg["vocab_size"])
        self.rope = Rope(cfg)
        self.num_layers = cfg["num_hidden_layers"]

    def main_layers(self):
        return self.model.layers[:self.num_layers]

    def mtp(self):
        extra = self.model.layers[self.num_layers:]
        return extra[0] if len(extra) else None

    def moe_layers(self):
        return [b.mlp for b in self.model.layers if isinstance(b.mlp, MoE)]

    def hidden(self, tokens):
        """Final-normed hidden states [B, T, H] of the main model."""
        positions = torch.arange(tokens.shape[1])
        x = self.model.embed_tokens(tokens)
        for block in self.main_layers():
            x = block(x, self.rope, positions)
        return self.model.norm(x)

    def hidden_states(self, tokens):
        """The main model's final-normed hidden states [B, T, H] and the MTP module's [B, T-1, H]
        (row i from the main state at i and token i+1), None without an MTP module."""
        h = self.hidden(tokens)
        mtp = self.mtp()
        if mtp is None or tokens.shape[1] < 2:
            return h, None
        positions = torch.arange(tokens.shape[1] - 1)
        return h, mtp.forward_mtp(self.model.embed_tokens(tokens[:, 1:]), h[:, :-1], self.rope,
                                  positions)

    def forward(self, tokens):
        """Main logits [B, T, V] and MTP logits [B, T-1, V] (row i predicts token i+2)."""
        h, m = self.hidden_states(tokens)
        return self.lm_head(h), None if m is None else self.lm_head(m)
