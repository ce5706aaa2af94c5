"""Distils all-MiniLM-L6-v2 into the static table `embed/model/` ships (model2vec's recipe):

1. every token of the model's WordPiece vocabulary is encoded alone (`[CLS] token [SEP]`) by the
   transformer (numpy forward pass, `minilm.py`), and its output state is kept;
2. the 384-dimensional vectors are rotated by PCA onto their principal components (keeping
   DIM of them) and partially whitened;
3. each row is weighted by smooth inverse frequency, a / (a + p(token)), with p counted on a
   reference corpus: the docstrings of the Python standard library (text about functions and
   their parameters, and independent of any MCP server), so that frequent words ("the", "get",
   "a") weigh little in a mean;
4. optionally (`--tune N`), the table is fitted so that the mean of a sentence's rows
   approximates the transformer's embedding of the whole sentence (PCA-projected), on N
   sentences of that same corpus (tokenlearn's idea), by a few epochs of least squares.

Writes embed/model/static.safetensors (`embeddings`, f16 [vocab, DIM]) and
embed/model/vocab.txt (one WordPiece token a line, the row order).

    python distill.py MINILM_DIR OUT_DIR [--dim 384] [--whiten 0.5] [--tune N] [--cache FILE.npy]
"""

import argparse
import ast
import collections
import os
import random
import sys
import sysconfig

import numpy as np
from safetensors.numpy import save_file

from minilm import MiniLM


def docstrings():
    """Every docstring of the standard library's modules (not its tests)."""
    root = sysconfig.get_paths()["stdlib"]
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in ("test", "tests", "idlelib", "site-packages", "lib2to3")]
        for fn in filenames:
            if not fn.endswith(".py"):
                continue
            try:
                tree = ast.parse(open(os.path.join(dirpath, fn), encoding="utf-8").read())
            except (SyntaxError, UnicodeDecodeError, ValueError):
                continue
            for node in ast.walk(tree):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Module)):
                    d = ast.get_docstring(node)
                    if d:
                        out.append(d)
    return sorted(set(out))


def sentences(docs):
    """Docstrings cut into short passages: a first paragraph, at most 20 words."""
    out = []
    for d in docs:
        for para in d.split("\n\n")[:3]:
            words = para.split()
            if 3 <= len(words):
                out.append(" ".join(words[:20]))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("out")
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--whiten", type=float, default=0.5)
    ap.add_argument("--tune", type=int, default=0)
    ap.add_argument("--sif", type=float, default=1e-3)
    ap.add_argument("--cache", help="a .npy file keeping step 1's vectors between runs")
    args = ap.parse_args()

    m = MiniLM(args.model)
    vocab = m.tok.get_vocab()
    inv = [None] * len(vocab)
    for t, i in vocab.items():
        inv[i] = t
    n = len(inv)
    cls, sep = vocab["[CLS]"], vocab["[SEP]"]

    # 1. Each token alone through the transformer.
    vecs = np.zeros((n, m.hidden), dtype=np.float32)
    bs = 1024
    if args.cache and os.path.exists(args.cache):
        vecs = np.load(args.cache)
    for i in range(0, n if not vecs.any() else 0, bs):
        ids = np.array([[cls, t, sep] for t in range(i, min(n, i + bs))], dtype=np.int64)
        h = m.forward(ids, np.ones_like(ids))
        # The token's own output (position 1), not the mean with [CLS] and [SEP]: their
        # states are much alike for every token, and ranked tools slightly worse.
        vecs[i : i + len(ids)] = h[:, 1]
        print(f"\rtokens {i + len(ids)}/{n}", end="", file=sys.stderr)
    print(file=sys.stderr)
    if args.cache:
        np.save(args.cache, vecs)

    # 2. PCA.
    mean = vecs.mean(0)
    u, s, vt = np.linalg.svd(vecs - mean, full_matrices=False)
    # Partial whitening: each component divided by its singular value to the power WHITEN
    # (0.5 by default), which evens out the few dominant directions a mean would otherwise
    # follow; the same projection is applied to the passages of step 4.
    proj = vt[: args.dim].T / s[: args.dim] ** args.whiten  # [hidden, dim]
    table = (vecs - mean) @ proj
    print(f"PCA keeps {float((s[: args.dim] ** 2).sum() / (s**2).sum()):.3f} of the variance", file=sys.stderr)

    # 3. Smooth inverse frequency from the reference corpus.
    docs = docstrings()
    sents = sentences(docs)
    counts = collections.Counter()
    for e in m.tok.encode_batch(docs):
        counts.update(e.ids)
    total = sum(counts.values())
    p = np.array([counts.get(i, 0) / total for i in range(n)], dtype=np.float64)
    w = args.sif / (args.sif + p)
    table = table * w[:, None].astype(np.float32)
    print(f"corpus: {len(docs)} docstrings, {total} tokens, {len(sents)} passages", file=sys.stderr)

    # 4. Fit the rows so that a passage's mean approximates the transformer's embedding of it.
    if args.tune:
        random.seed(7)
        random.shuffle(sents)
        # Sorted by length, so that a batch pads little.
        sents = sorted(sents[: args.tune], key=len)
        target = np.zeros((len(sents), args.dim), dtype=np.float32)
        for i in range(0, len(sents), 256):
            # The passage's mean-pooled hidden state, centred and projected like the token
            # vectors of step 1, so that both live in one space.
            y = (m.encode(sents[i : i + 256], normalize=False) - mean) @ proj
            target[i : i + 256] = y / np.linalg.norm(y, axis=1, keepdims=True)
            print(f"\rteacher {min(i + 256, len(sents))}/{len(sents)}", end="", file=sys.stderr)
        print(file=sys.stderr)
        encs = [np.array([t for t in e.ids if t not in (cls, sep)]) for e in m.tok.encode_batch(sents)]
        lr = 0.5
        for epoch in range(6):
            order = list(range(len(sents)))
            random.shuffle(order)
            loss = 0.0
            for j in order:
                ids = encs[j]
                if len(ids) == 0:
                    continue
                x = table[ids].mean(0)
                nx = np.linalg.norm(x) + 1e-8
                xn = x / nx
                # Gradient of 1 - cos(x, target) with respect to x, spread over the rows.
                g = -(target[j] - xn * (xn @ target[j])) / nx
                loss += 1.0 - float(xn @ target[j])
                np.add.at(table, ids, -lr * g[None, :] / len(ids) * nx)
            print(f"epoch {epoch}: mean 1-cos {loss / len(order):.4f}", file=sys.stderr)

    os.makedirs(args.out, exist_ok=True)
    save_file({"embeddings": table.astype(np.float16)}, os.path.join(args.out, "static.safetensors"))
    with open(os.path.join(args.out, "vocab.txt"), "w", encoding="utf-8") as f:
        for t in inv:
            f.write(t + "\n")
    print(f"wrote {n} x {args.dim}", file=sys.stderr)


if __name__ == "__main__":
    main()
