#!/usr/bin/env python3
"""Writes the trained demo model in its compact form, the file committed to git and expanded by
`supernode model make --preset demo`:

  export.py --run RUN_DIR --corpus CORPUS_DIR --out training/demo-model/demo-weights.safetensors

The compact file is a safetensors file in DeepSeek-V3's tensor names, holding
  - every linear as F8_E4M3 with 128x128-block weight_scale_inv (DeepSeek's release format), norms,
    the router and eh_proj as BF16, e_score_correction_bias as F32;
  - model.embed_tokens.weight and lm_head.weight for the trained rows only, F8_E4M3 with one scale
    per row, and vocab_ids (I32): the DeepSeek-V3 id of each of those rows;
  - untrained.embed_row and untrained.head_row (BF16): the row every other id gets.
The MTP module's embed_tokens and shared_head.head are the main ones (shared in training).

The untrained head row is -K on the bias channel and zero elsewhere (see train.py), so its logit
is -K times the final norm's bias channel, which is positive at every position. K is chosen on the
held-out text so that the untrained logit sits at least MARGIN below the best trained logit at
every position there, doubled for text unlike it; 129,280 - 29,208 rows that far below take less
than 1e-12 of the probability. tests/model/demo_model_agreement_test checks it on its prompts.
"""
import argparse
import json
import os

import numpy as np
import torch

import safetensors_io as st
from deepseek_v3 import DeepseekV3
from demo_config import BIAS_CHANNEL, BIAS_CONSTANT, DEEPSEEK_V3_VOCAB
from train import load_corpus, spaced_windows

MARGIN = 40.0
FP8_BLOCK = 128
VOCAB_TABLES = ("model.embed_tokens.weight", "lm_head.weight")


@torch.no_grad()
def untrained_logit_scale(model, stream, seq=256, windows=64):
    """The smallest K with -K * h[bias] <= max trained logit - MARGIN at every held-out position
    of both heads, times two."""
    model.eval()
    worst, smallest_bias = 0.0, float("inf")
    for chunk in spaced_windows(stream, seq, windows).split(8):
        for hidden in model.hidden_states(chunk):
            bias = hidden[..., BIAS_CHANNEL]
            if bias.min() <= 0:
                raise SystemExit("the bias channel is not positive: train.py's invariant broke")
            best = model.lm_head(hidden).max(-1).values
            worst = max(worst, ((MARGIN - best) / bias).max().item())
            smallest_bias = min(smallest_bias, bias.min().item())
    return 2.0 * worst, smallest_bias


def compact_tensors(state, vocab, head_scale):
    out = []
    for name, value in state.items():
        a = value.detach().to(torch.float32).numpy()
        if name in VOCAB_TABLES:
            scale_inv = np.maximum(np.abs(a).max(1, keepdims=True), 1e-30) / 448.0
            out += [(name, "F8_E4M3", st.to_e4m3(a / scale_inv)),
                    (name + "_scale_inv", "F32", scale_inv.astype(np.float32))]
        elif name.endswith("e_score_correction_bias"):
            out.append((name, "F32", a))
        elif a.ndim == 2 and not name.endswith(("gate.weight", "eh_proj.weight")):
            codes, scale_inv = st.quantize_blocks(a, FP8_BLOCK, FP8_BLOCK)
            out += [(name, "F8_E4M3", codes), (name + "_scale_inv", "F32", scale_inv)]
        else:
            out.append((name, "BF16", st.to_bf16(a)))
    hidden = state["lm_head.weight"].shape[1]
    embed_row, head_row = np.zeros(hidden, np.float32), np.zeros(hidden, np.float32)
    embed_row[BIAS_CHANNEL] = BIAS_CONSTANT
    head_row[BIAS_CHANNEL] = -head_scale
    out += [("vocab_ids", "I32", np.array(vocab, dtype=np.int32)),
            ("untrained.embed_row", "BF16", st.to_bf16(embed_row)),
            ("untrained.head_row", "BF16", st.to_bf16(head_row))]
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--run", required=True)
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    torch.set_num_threads(1)
    ckpt = torch.load(os.path.join(args.run, "checkpoint.pt"))
    vocab, _, heldout = load_corpus(args.corpus)
    if ckpt["vocab"] != vocab:
        raise SystemExit("the checkpoint was trained on another corpus")
    model = DeepseekV3(ckpt["config"])
    model.load_state_dict(ckpt["model"])
    head_scale, smallest_bias = untrained_logit_scale(model, heldout)
    config = dict(ckpt["config"], vocab_size=DEEPSEEK_V3_VOCAB)
    metadata = {"format": "supernode-demo-compact-1", "config": json.dumps(config),
                "trained_steps": str(ckpt["step"]), "training_seconds": str(round(ckpt["elapsed"])),
                "untrained_head_scale": repr(head_scale)}
    st.write(args.out, compact_tensors(ckpt["model"], vocab, head_scale), metadata)
    print(json.dumps({"out": args.out, "bytes": os.path.getsize(args.out), "step": ckpt["step"],
                      "untrained_head_scale": head_scale, "smallest_bias_channel": smallest_bias}))


if __name__ == "__main__":
    main()
