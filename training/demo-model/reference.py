#!/usr/bin/env python3
"""The PyTorch side of tests/model/demo_model_agreement_test: greedy decoding in FP32 with the
model code training used, on a full checkpoint in DeepSeek's layout (what `supernode model make
--preset demo` writes), recomputing every step from the whole sequence (no KV cache).

  reference.py --model DIR --request REQUEST.json --out OUT_PREFIX [--record FIXTURE.json]

REQUEST.json: {"prompts": [[ids...], ...], "steps": 32}. Writes OUT_PREFIX.json
({"tokens": [[...], ...], "mtp_argmax": [[...], ...]}) and OUT_PREFIX.bin: float32 logits
[prompts][steps][vocab_size], the logits each greedy step chose from, then [prompts][vocab_size],
the MTP module's logits at the last row of each final sequence. The MTP module runs on the whole
final sequence: row i sees the main hidden state at i and token i+1; mtp_argmax is its greedy
guess at token i+2 for every row.

--record also writes what CI checks without torch (tests/model/data/demo_pytorch_reference.json,
demo_model_agreement.the_engine_matches_the_recorded_pytorch_run): the prompts, the tokens, the
MTP guesses, and for every greedy step the 16 largest logits with their ids and the row's
largest magnitude (the scale its relative tolerance is taken against).
"""
import argparse
import json
import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
import numpy as np  # noqa: E402
import torch  # noqa: E402

import safetensors_io as st  # noqa: E402
from deepseek_v3 import DeepseekV3  # noqa: E402


def load_checkpoint(model_dir):
    """DeepseekV3 with a checkpoint's weights; the MTP module's embedding and head must be the
    main ones, as training shares them."""
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    _, tensors = st.read(os.path.join(model_dir, "model.safetensors"))
    model = DeepseekV3(cfg)
    block = (cfg.get("quantization_config") or {}).get("weight_block_size", [128, 128])
    state = {name: torch.from_numpy(np.array(st.load_float(tensors, name, block)))
             for name in model.state_dict()}
    model.load_state_dict(state)
    mtp = "model.layers.%d." % cfg["num_hidden_layers"]
    for copy, main in ((mtp + "embed_tokens.weight", "model.embed_tokens.weight"),
                       (mtp + "shared_head.head.weight", "lm_head.weight")):
        if copy in tensors and not np.array_equal(tensors[copy][1], tensors[main][1]):
            raise SystemExit(f"{copy} differs from {main}: this code shares them")
    model.eval()
    return model


@torch.no_grad()
def greedy(model, prompt, steps):
    seq, logits = list(prompt), []
    for _ in range(steps):
        h = model.hidden(torch.tensor([seq]))
        row = model.lm_head(h[0, -1])
        logits.append(row.numpy().astype(np.float32))
        seq.append(int(row.argmax()))
    return seq, np.stack(logits)


@torch.no_grad()
def mtp_rows(model, seq):
    _, mtp_logits = model(torch.tensor([seq]))
    return mtp_logits[0].argmax(-1).tolist(), mtp_logits[0, -1].numpy().astype(np.float32)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--request", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--record", help="also write the compact fixture CI compares against")
    args = ap.parse_args()
    torch.set_num_threads(1)
    with open(args.request) as f:
        request = json.load(f)
    model = load_checkpoint(args.model)
    tokens, mtp_argmax, mtp_last, top = [], [], [], []
    with open(args.out + ".bin", "wb") as bin_out:
        for prompt in request["prompts"]:
            seq, logits = greedy(model, prompt, request["steps"])
            tokens.append(seq[len(prompt):])
            bin_out.write(logits.tobytes())
            top.append([top_of(row) for row in logits])
            argmax, last = mtp_rows(model, seq)
            mtp_argmax.append(argmax)
            mtp_last.append(last)
        for last in mtp_last:
            bin_out.write(last.tobytes())
    with open(args.out + ".json", "w") as f:
        json.dump({"tokens": tokens, "mtp_argmax": mtp_argmax}, f)
    if args.record:
        with open(args.record, "w") as f:
            json.dump({"steps": request["steps"], "prompts": request["prompts"], "tokens": tokens,
                       "mtp_argmax": mtp_argmax, "top_logits": top}, f, separators=(",", ":"))
            f.write("\n")


def top_of(row, k=16):
    """The k largest logits of a row as [id, value] (ties to the lower id), and its scale."""
    ids = sorted(range(len(row)), key=lambda i: (-float(row[i]), i))[:k]
    return {"scale": float(np.abs(row).max()),
            "top": [[i, float(row[i])] for i in ids]}


if __name__ == "__main__":
    main()
