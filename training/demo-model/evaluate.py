#!/usr/bin/env python3
"""Measures the trained demo model on the held-out text, next to count models of the training text.

  evaluate.py --run RUN_DIR --corpus CORPUS_DIR --out EVAL_DIR

Held-out text: the held-out documents as one stream (BOS doc EOS ...), cut into windows of
WINDOW tokens; every token after a window's first is predicted from the tokens before it in the
window. The same targets are scored by
  - the PyTorch model at the training checkpoint (FP32, softmax over the trained rows);
  - a unigram model (add-one over the corpus's vocabulary) and an interpolated bigram model
    (absolute discounting, d = 0.75, backing off to that unigram), both counted on the training
    text. Both know which tokens the corpus uses at all, which only helps them.
Writes EVAL_DIR/heldout-sequences.json for `supernode model perplexity` (our engine, FP32 and
INT8, on the shipped checkpoint), EVAL_DIR/evaluation.json with the figures, the MTP module's
held-out loss and top-1 accuracy (token i+2), and each MoE layer's expert-load skew (max/mean
tokens per expert over the held-out text), and EVAL_DIR/loss.svg, the loss curve.
"""
import argparse
import collections
import json
import math
import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from deepseek_v3 import DeepseekV3  # noqa: E402
from train import load_corpus  # noqa: E402

WINDOW = 256
DISCOUNT = 0.75


def windows_of(stream):
    n = len(stream) // WINDOW
    return stream[:n * WINDOW].view(n, WINDOW)


def count_models(train, vocab_size):
    unigram = torch.bincount(train, minlength=vocab_size).double()
    p_uni = (unigram + 1) / (unigram.sum() + vocab_size)
    pairs = collections.Counter(zip(train[:-1].tolist(), train[1:].tolist()))
    followers = collections.Counter(v for v, _ in pairs)
    context = collections.Counter(train[:-1].tolist())
    return p_uni, pairs, followers, context


def count_model_nll(windows, p_uni, pairs, followers, context):
    uni = bi = 0.0
    for w in windows.tolist():
        for prev, cur in zip(w[:-1], w[1:]):
            uni -= math.log(p_uni[cur])
            c = context.get(prev, 0)
            if c == 0:
                p = p_uni[cur].item()
            else:
                p = (max(pairs.get((prev, cur), 0) - DISCOUNT, 0) / c +
                     DISCOUNT * followers[prev] / c * p_uni[cur].item())
            bi -= math.log(p)
    return uni, bi


@torch.no_grad()
def model_figures(model, windows):
    model.eval()
    nll = mtp_nll = 0.0
    mtp_right = 0
    loads = [torch.zeros(len(m.experts), dtype=torch.long) for m in model.moe_layers()]
    for chunk in windows.split(8):
        logits, mtp_logits = model(chunk)
        nll += F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]),
                               chunk[:, 1:].reshape(-1), reduction="sum").item()
        mtp_targets = chunk[:, 2:].reshape(-1)
        mtp_rows = mtp_logits[:, :-1].reshape(-1, mtp_logits.shape[-1])
        mtp_nll += F.cross_entropy(mtp_rows, mtp_targets, reduction="sum").item()
        mtp_right += (mtp_rows.argmax(-1) == mtp_targets).sum().item()
        for total, m in zip(loads, model.moe_layers()):
            total += m.last_load  # each MoE layer runs once per forward
    n, n_mtp = windows.shape[0] * (WINDOW - 1), windows.shape[0] * (WINDOW - 2)
    skew = [round((l.max() / l.double().mean()).item(), 3) for l in loads]
    return nll / n, mtp_nll / n_mtp, mtp_right / n_mtp, skew, [l.tolist() for l in loads]


def loss_svg(log_path, out_path):
    records = [json.loads(l) for l in open(log_path)]
    train = [(r["step"], r["loss"]) for r in records]
    held = [(r["step"], r["heldout_loss"]) for r in records if "heldout_loss" in r]
    smooth, avg = [], None
    for s, v in train:  # exponential moving average, as loss curves are usually shown
        avg = v if avg is None else 0.95 * avg + 0.05 * v
        smooth.append((s, avg))
    W, H, pad = 640, 360, 50
    steps = max(s for s, _ in train)
    lo, hi = 3.0, 11.0

    def xy(s, v):
        return (pad + (W - 2 * pad) * s / steps,
                H - pad - (H - 2 * pad) * (min(max(v, lo), hi) - lo) / (hi - lo))

    def line(points, color):
        d = " ".join("%.1f,%.1f" % xy(s, v) for s, v in points)
        return f'<polyline fill="none" stroke="{color}" stroke-width="1.5" points="{d}"/>'

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" '
             f'font-family="sans-serif" font-size="12">',
             f'<rect width="{W}" height="{H}" fill="white"/>',
             f'<line x1="{pad}" y1="{H - pad}" x2="{W - pad}" y2="{H - pad}" stroke="black"/>',
             f'<line x1="{pad}" y1="{pad}" x2="{pad}" y2="{H - pad}" stroke="black"/>']
    for v in range(int(lo), int(hi) + 1):
        x, y = xy(0, v)
        parts.append(f'<text x="{x - 8}" y="{y + 4}" text-anchor="end">{v}</text>')
    for s in range(0, steps + 1, max(1, steps // 5)):
        x, y = xy(s, lo)
        parts.append(f'<text x="{x}" y="{y + 16}" text-anchor="middle">{s}</text>')
    parts += [line(smooth, "#1f77b4"), line(held, "#d62728"),
              f'<text x="{W / 2}" y="{H - 10}" text-anchor="middle">step '
              f'(batch 8 x 256 tokens)</text>',
              f'<text x="{W - pad}" y="{pad - 20}" text-anchor="end" fill="#1f77b4">training loss '
              f'(moving average)</text>',
              f'<text x="{W - pad}" y="{pad - 6}" text-anchor="end" fill="#d62728">held-out loss'
              f'</text>',
              f'<text x="{pad}" y="{pad - 20}">cross-entropy (nats per token)</text>', '</svg>']
    with open(out_path, "w") as f:
        f.write("\n".join(parts) + "\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--run", required=True)
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    torch.set_num_threads(1)
    os.makedirs(args.out, exist_ok=True)
    vocab, train, heldout = load_corpus(args.corpus)
    windows = windows_of(heldout)
    with open(os.path.join(args.out, "heldout-sequences.json"), "w") as f:
        json.dump({"sequences": [[vocab[t] for t in w] for w in windows.tolist()]}, f)

    ckpt = torch.load(os.path.join(args.run, "checkpoint.pt"))
    model = DeepseekV3(ckpt["config"])
    model.load_state_dict(ckpt["model"])
    nll, mtp_nll, mtp_top1, skew, loads = model_figures(model, windows)
    uni, bi = count_model_nll(windows, *count_models(train, len(vocab)))
    n = windows.shape[0] * (WINDOW - 1)
    figures = {"heldout_tokens_scored": n, "window": WINDOW, "trained_steps": ckpt["step"],
               "training_seconds": round(ckpt["elapsed"]),
               "perplexity": {"pytorch_fp32": math.exp(nll), "unigram": math.exp(uni / n),
                              "bigram": math.exp(bi / n)},
               "mtp": {"heldout_perplexity": math.exp(mtp_nll), "top1_accuracy": mtp_top1},
               "expert_load_skew_max_over_mean": skew, "expert_loads": loads}
    with open(os.path.join(args.out, "evaluation.json"), "w") as f:
        json.dump(figures, f, indent=2)
    loss_svg(os.path.join(args.run, "log.jsonl"), os.path.join(args.out, "loss.svg"))
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
