#!/usr/bin/env python3
"""Trains the demo model on the corpus prepare_corpus.py made; resumable, deterministic for a seed.

  train.py --corpus DIR --run DIR [--steps N] [--seed S]

Every step's batch is drawn from a generator seeded by (seed, step), so a run resumed from its
checkpoint (RUN/checkpoint.pt, written every --checkpoint-every steps and at the end) continues
exactly as an uninterrupted one. Logs one JSON line per logged step to RUN/log.jsonl.

Only the vocabulary rows the corpus uses are trained (vocab.json maps row -> DeepSeek-V3 id).
Hidden channel BIAS_CHANNEL is a constant: every embedding row holds BIAS_CONSTANT there and no
layer writes into it (the rows of o_proj and down_proj that would are held at zero; the MTP
eh_proj passes the embedding's channel through), so the final norm's output is positive there
whatever the text. Each head row's weight on that channel acts as a bias, and export.py gives the
rows no text trained a large negative one: they can never win a greedy step.
"""
import argparse
import json
import math
import os
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from deepseek_v3 import MLP, DeepseekV3, MoE  # noqa: E402
from demo_config import BIAS_CHANNEL, BIAS_CONSTANT, BOS, EOS, demo_config  # noqa: E402

MTP_LOSS_WEIGHT = 0.3  # the report's lambda for the first part of training
BALANCE_LOSS_WEIGHT = 1e-4  # the report's alpha for the complementary sequence-wise loss
BIAS_UPDATE_SPEED = 1e-3  # the report's gamma for auxiliary-loss-free balancing


def load_corpus(corpus_dir):
    docs = {p: json.load(open(os.path.join(corpus_dir, p + ".json"), encoding="utf-8"))
            for p in ("train", "heldout")}
    used = {BOS, EOS}
    for part in docs.values():
        for d in part:
            used.update(d["ids"])
    vocab = sorted(used)  # row r of the trained tables is DeepSeek-V3 id vocab[r]
    row = {t: r for r, t in enumerate(vocab)}

    def stream(part):
        out = []
        for d in docs[part]:
            out += [row[BOS]] + [row[t] for t in d["ids"]] + [row[EOS]]
        return torch.tensor(out, dtype=torch.long)

    return vocab, stream("train"), stream("heldout")


def batch_at(stream, step, seed, batch, seq):
    g = torch.Generator().manual_seed(seed * 1_000_003 + step)
    starts = torch.randint(0, len(stream) - seq - 1, (batch,), generator=g)
    return torch.stack([stream[s:s + seq + 1] for s in starts.tolist()])


def init_weights(model, seed):
    torch.manual_seed(seed)
    depth = model.cfg["num_hidden_layers"] + model.cfg["num_nextn_predict_layers"]
    for name, p in model.named_parameters():
        if name.endswith("norm.weight"):
            continue  # ones
        if "embed_tokens" in name:
            torch.nn.init.normal_(p, std=1.0)
        elif name == "lm_head.weight":
            torch.nn.init.normal_(p, std=0.5 / math.sqrt(p.shape[1]))
        else:
            std = 1.0 / math.sqrt(p.shape[1])
            if name.endswith(("o_proj.weight", "down_proj.weight")):
                std /= math.sqrt(2.0 * depth)
            torch.nn.init.normal_(p, std=std)
    enforce_bias_channel(model)


@torch.no_grad()
def enforce_bias_channel(model):
    model.model.embed_tokens.weight[:, BIAS_CHANNEL] = BIAS_CONSTANT
    for block in model.model.layers:
        block.self_attn.o_proj.weight[BIAS_CHANNEL, :] = 0.0
        mlps = [block.mlp] if isinstance(block.mlp, MLP) else (
            list(block.mlp.experts) + [block.mlp.shared_experts])
        for m in mlps:
            m.down_proj.weight[BIAS_CHANNEL, :] = 0.0
    mtp = model.mtp()
    if mtp is not None:
        mtp.eh_proj.weight[BIAS_CHANNEL, :] = 0.0
        mtp.eh_proj.weight[BIAS_CHANNEL, BIAS_CHANNEL] = 1.0
        norms = [model.model.norm, mtp.enorm, mtp.shared_head.norm]
    else:
        norms = [model.model.norm]
    for n in norms:  # a positive channel stays positive through the norms
        n.weight[BIAS_CHANNEL].clamp_(min=0.1)


@torch.no_grad()
def balance_experts(model):
    """Auxiliary-loss-free balancing: raise the bias of under-loaded experts, lower the others."""
    for moe in model.moe_layers():
        load = moe.last_load.to(torch.float32)
        moe.gate.e_score_correction_bias += BIAS_UPDATE_SPEED * torch.sign(load.mean() - load)


def losses(model, tokens):
    inputs, targets = tokens[:, :-1], tokens[:, 1:]
    logits, mtp_logits = model(inputs)
    main = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
    # MTP row i sees tokens up to i+1 and predicts i+2.
    mtp = F.cross_entropy(mtp_logits.reshape(-1, mtp_logits.shape[-1]),
                          targets[:, 1:].reshape(-1))
    balance = sum(m.last_balance_loss for m in model.moe_layers())
    return main, mtp, balance


def spaced_windows(stream, length, windows):
    """`windows` windows of `length` tokens spread evenly over `stream`."""
    stride = (len(stream) - length) // windows
    return torch.stack([stream[i * stride:i * stride + length] for i in range(windows)])


@torch.no_grad()
def heldout_loss(model, stream, seq, windows=32):
    """Mean main and MTP loss over `windows` fixed, evenly spaced held-out windows."""
    model.eval()
    tokens = spaced_windows(stream, seq + 1, windows)
    total = [0.0, 0.0]
    for chunk in tokens.split(8):
        main, mtp, _ = losses(model, chunk)
        total[0] += main.item() * len(chunk)
        total[1] += mtp.item() * len(chunk)
    model.train()
    return total[0] / windows, total[1] / windows


def learning_rate(step, steps, peak, warmup):
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(1, steps - warmup)
    return peak * (0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * progress)))


def save(path, model, optimizer, step, vocab, args, elapsed):
    tmp = path + ".partial"
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step,
                "vocab": vocab, "config": model.cfg, "args": vars(args), "elapsed": elapsed}, tmp)
    os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--run", required=True)
    ap.add_argument("--steps", type=int, default=1000)  # the shipped model's
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--checkpoint-every", type=int, default=100)
    ap.add_argument("--eval-every", type=int, default=100)
    args = ap.parse_args()
    torch.set_num_threads(1)
    os.makedirs(args.run, exist_ok=True)

    vocab, train, heldout = load_corpus(args.corpus)
    cfg = demo_config(len(vocab))
    model = DeepseekV3(cfg)
    init_weights(model, args.seed)
    decay = [p for n, p in model.named_parameters() if p.dim() > 1]
    no_decay = [p for n, p in model.named_parameters() if p.dim() <= 1]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                                   {"params": no_decay, "weight_decay": 0.0}],
                                  lr=args.lr, betas=(0.9, 0.95))
    ckpt_path = os.path.join(args.run, "checkpoint.pt")
    step, elapsed = 0, 0.0
    if os.path.exists(ckpt_path):
        ckpt = torch.load(ckpt_path)
        if ckpt["vocab"] != vocab:
            raise SystemExit("checkpoint vocabulary differs from the corpus: a different corpus?")
        model.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        step, elapsed = ckpt["step"], ckpt["elapsed"]
        print(f"resuming at step {step}", flush=True)
    with open(os.path.join(args.run, "vocab.json"), "w") as f:
        json.dump(vocab, f)
    log = open(os.path.join(args.run, "log.jsonl"), "a")
    params = sum(p.numel() for p in model.parameters())
    print(f"{params} parameters, {len(vocab)} vocabulary rows, {len(train)} training tokens",
          flush=True)

    model.train()
    while step < args.steps:
        t0 = time.time()
        lr = learning_rate(step, args.steps, args.lr, args.warmup)
        for group in optimizer.param_groups:
            group["lr"] = lr
        tokens = batch_at(train, step, args.seed, args.batch, args.seq)
        main, mtp, balance = losses(model, tokens)
        loss = main + MTP_LOSS_WEIGHT * mtp + BALANCE_LOSS_WEIGHT * balance
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        enforce_bias_channel(model)
        balance_experts(model)
        step += 1
        elapsed += time.time() - t0
        record = {"step": step, "loss": main.item(), "mtp_loss": mtp.item(), "lr": lr,
                  "elapsed_s": round(elapsed, 1),
                  "tokens_per_s": round(args.batch * args.seq / (time.time() - t0), 1)}
        if step % args.eval_every == 0 or step == args.steps:
            record["heldout_loss"], record["heldout_mtp_loss"] = heldout_loss(model, heldout,
                                                                              args.seq)
            skew = [round((m.last_load.max() / m.last_load.float().mean()).item(), 2)
                    for m in model.moe_layers()]
            record["load_skew"] = skew
        log.write(json.dumps(record) + "\n")
        log.flush()
        if step % 10 == 0 or "heldout_loss" in record:
            print(json.dumps(record), flush=True)
        if step % args.checkpoint_every == 0 or step == args.steps:
            save(ckpt_path, model, optimizer, step, vocab, args, elapsed)


if __name__ == "__main__":
    main()
