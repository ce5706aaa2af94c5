"""Writes tests/fixtures/wordpiece.jsonl: texts and the token ids the reference tokenizer
(tokenizer.json of the distilled model, through the `tokenizers` package) gives them, without
[CLS]/[SEP]. The texts avoid camelCase and underscores, which the crate splits first on purpose.

    python fixtures.py MINILM_DIR
"""

import json
import os
import sys

from tokenizers import Tokenizer

TEXTS = [
    "Read the complete contents of a file from the file system as text.",
    "Get current time in a specific timezone",
    "Search for Github repositories",
    "Convert an address into geographic coordinates",
    "Take a screenshot of the page or element.",
    "Unstages all staged changes",
    "Fetches a URL from the internet and optionally extracts its contents as markdown.",
    "Résumé of the café's naïve coöperation — “quoted” text…",
    "IDs, URLs and APIs: e.g. https://example.com/a?b=1&c=2 (v2.3.4)",
    "Tokenization of unbelievably supercalifragilisticexpialidocious words",
    "Crème brûlée at 3:45pm; 100% sure! #hashtag @mention ~tilde",
    "东京 weather: 晴れ",
    "emoji 🚀 rocket and tabs\tand\nnewlines",
    "a" * 120,
    "Kubernetes pods, deployments, daemonsets & statefulsets",
    "Don't forget: it's the user's choice",
]


def main():
    tok = Tokenizer.from_file(os.path.join(sys.argv[1], "tokenizer.json"))
    tok.no_padding()
    tok.no_truncation()
    here = os.path.dirname(os.path.abspath(__file__))
    out = os.path.join(here, "..", "tests", "fixtures", "wordpiece.jsonl")
    with open(out, "w", encoding="utf-8") as f:
        for t in TEXTS:
            ids = tok.encode(t).ids[1:-1]
            f.write(json.dumps({"text": t, "ids": ids}, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
