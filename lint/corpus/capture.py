#!/usr/bin/env python3
"""Captures the `tools/list` of real MCP servers into lint/corpus/servers/, for the lint corpus.

Each server is installed from its registry package at a pinned version (npm into a prefix,
PyPI into a venv of its own; see the SERVERS table), started over stdio with dummy credentials, asked for
`initialize` and `tools/list` (all pages), and stopped. Nothing is called: listing tools needs
no network, and the dummy values below are never valid anywhere. Output: one JSON file per
server, `{"server", "package", "version", "tools": [...]}`, pretty-printed with sorted keys so
a re-capture diffs cleanly.

Usage:
    mkdir -p /tmp/mcpcap && cd /tmp/mcpcap && npm install --ignore-scripts PKG@VER ...
    for each PyPI server (their pins conflict): python3 -m venv /tmp/mcpcap/v-PKG && /tmp/mcpcap/v-PKG/bin/pip install PKG==VER
    python3 lint/corpus/capture.py --prefix /tmp/mcpcap [--only NAME]
    (the FRESH servers were installed into a second prefix, /tmp/mcpcap2, and captured with
    `--prefix /tmp/mcpcap2 --only NAME`)

The packages and versions are the SERVERS table; servers/ holds what they listed.
"""

import argparse
import hashlib
import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent

# name, package, version, argv (relative to the prefix: node_modules/..., v-PKG/bin/...), env.
DUMMY = "dummy-not-a-real-credential"
SERVERS = [
    ("chrome-devtools", "chrome-devtools-mcp", "1.11.0",
     ["node", "node_modules/chrome-devtools-mcp/build/src/bin/chrome-devtools-mcp.js"], {}),
    ("circleci", "@circleci/mcp-server-circleci", "0.20.0",
     ["node", "node_modules/@circleci/mcp-server-circleci/dist/index.js"],
     {"CIRCLECI_TOKEN": DUMMY}),
    ("desktop-commander", "@wonderwhy-er/desktop-commander", "0.2.52",
     ["node", "node_modules/@wonderwhy-er/desktop-commander/dist/index.js"], {}),
    ("github", "@modelcontextprotocol/server-github", "2025.4.8",
     ["node", "node_modules/@modelcontextprotocol/server-github/dist/index.js"],
     {"GITHUB_PERSONAL_ACCESS_TOKEN": DUMMY}),
    ("gitlab", "@modelcontextprotocol/server-gitlab", "2025.4.25",
     ["node", "node_modules/@modelcontextprotocol/server-gitlab/dist/index.js"],
     {"GITLAB_PERSONAL_ACCESS_TOKEN": DUMMY, "GITLAB_API_URL": "http://127.0.0.1:9/api/v4"}),
    ("memory", "@modelcontextprotocol/server-memory", "2026.8.31",
     ["node", "node_modules/@modelcontextprotocol/server-memory/dist/index.js"], {}),
    ("sequential-thinking", "@modelcontextprotocol/server-sequential-thinking", "2026.8.31",
     ["node", "node_modules/@modelcontextprotocol/server-sequential-thinking/dist/index.js"], {}),
    ("puppeteer", "@modelcontextprotocol/server-puppeteer", "2025.5.12",
     ["node", "node_modules/@modelcontextprotocol/server-puppeteer/dist/index.js"], {}),
    ("brave-search", "@modelcontextprotocol/server-brave-search", "0.6.2",
     ["node", "node_modules/@modelcontextprotocol/server-brave-search/dist/index.js"],
     {"BRAVE_API_KEY": DUMMY}),
    ("slack", "@modelcontextprotocol/server-slack", "2025.4.25",
     ["node", "node_modules/@modelcontextprotocol/server-slack/dist/index.js"],
     {"SLACK_BOT_TOKEN": DUMMY, "SLACK_TEAM_ID": "T000"}),
    ("postgres", "@modelcontextprotocol/server-postgres", "0.6.2",
     ["node", "node_modules/@modelcontextprotocol/server-postgres/dist/index.js",
      "postgresql://127.0.0.1:9/none"], {}),
    ("google-maps", "@modelcontextprotocol/server-google-maps", "0.6.2",
     ["node", "node_modules/@modelcontextprotocol/server-google-maps/dist/index.js"],
     {"GOOGLE_MAPS_API_KEY": DUMMY}),
    ("playwright", "@playwright/mcp", "0.0.83",
     ["node", "node_modules/@playwright/mcp/cli.js"], {}),
    ("notion", "@notionhq/notion-mcp-server", "2.5.2",
     ["node", "node_modules/@notionhq/notion-mcp-server/bin/cli.mjs"], {"NOTION_TOKEN": DUMMY}),
    ("firecrawl", "firecrawl-mcp", "3.26.0",
     ["node", "node_modules/firecrawl-mcp/dist/index.js"], {"FIRECRAWL_API_KEY": DUMMY}),
    ("context7", "@upstash/context7-mcp", "4.1.1",
     ["node", "node_modules/@upstash/context7-mcp/dist/index.js"], {}),
    ("tavily", "tavily-mcp", "0.2.22",
     ["node", "node_modules/tavily-mcp/build/index.js"], {"TAVILY_API_KEY": DUMMY}),
    ("exa", "exa-mcp-server", "3.4.1",
     ["node", "node_modules/exa-mcp-server/dist/stdio.cjs"], {"EXA_API_KEY": DUMMY}),
    ("kubernetes", "mcp-server-kubernetes", "4.1.7",
     ["node", "node_modules/mcp-server-kubernetes/dist/index.js"], {}),
    ("ea-playwright", "@executeautomation/playwright-mcp-server", "1.0.12",
     ["node", "node_modules/@executeautomation/playwright-mcp-server/dist/index.js"], {}),
    ("hubspot", "@hubspot/mcp-server", "0.4.0",
     ["node", "node_modules/@hubspot/mcp-server/dist/index.js"], {"PRIVATE_APP_ACCESS_TOKEN": DUMMY}),
    ("sentry", "@sentry/mcp-server", "0.39.0",
     ["node", "node_modules/@sentry/mcp-server/dist/index.js", "--access-token", DUMMY], {}),
    ("fetch", "mcp-server-fetch", "2026.10.24", ["v-mcp-server-fetch/bin/mcp-server-fetch"], {}),
    ("duckduckgo", "duckduckgo-mcp-server", "0.7.0", ["v-duckduckgo-mcp-server/bin/duckduckgo-mcp-server"], {}),
    ("clickhouse", "mcp-clickhouse", "0.7.0", ["v-mcp-clickhouse/bin/mcp-clickhouse"],
     {"CLICKHOUSE_HOST": "127.0.0.1", "CLICKHOUSE_USER": "x", "CLICKHOUSE_PASSWORD": DUMMY}),
    ("aws-documentation", "awslabs-aws-documentation-mcp-server", "1.2.3",
     ["v-awslabs-aws-documentation-mcp-server/bin/awslabs.aws-documentation-mcp-server"], {}),
    ("obsidian", "mcp-obsidian", "0.2.3", ["v-mcp-obsidian/bin/mcp-obsidian"], {"OBSIDIAN_API_KEY": DUMMY}),
    ("neo4j", "mcp-neo4j-cypher", "0.6.0", ["v-mcp-neo4j-cypher/bin/mcp-neo4j-cypher"],
     {"NEO4J_URI": "bolt://127.0.0.1:9", "NEO4J_PASSWORD": DUMMY}),
    ("arxiv", "arxiv-mcp-server", "0.8.2", ["v-arxiv-mcp-server/bin/arxiv-mcp-server", "--storage-path", "@TMP@"], {}),
    # Captured after the rules were tuned (a second npm prefix), all held out: no rule was
    # changed after seeing them.
    ("everart", "@modelcontextprotocol/server-everart", "0.6.2",
     ["node", "node_modules/@modelcontextprotocol/server-everart/dist/index.js"], {"EVERART_API_KEY": DUMMY}),
    ("gdrive", "@modelcontextprotocol/server-gdrive", "2025.1.14",
     ["node", "node_modules/@modelcontextprotocol/server-gdrive/dist/index.js"], {}),
    ("aws-kb-retrieval", "@modelcontextprotocol/server-aws-kb-retrieval", "0.6.2",
     ["node", "node_modules/@modelcontextprotocol/server-aws-kb-retrieval/dist/index.js"],
     {"AWS_ACCESS_KEY_ID": DUMMY, "AWS_SECRET_ACCESS_KEY": DUMMY, "AWS_REGION": "us-east-1"}),
    ("mongodb", "@mongodb-js/mongodb-mcp-server", "0.0.3",
     ["node", "node_modules/@mongodb-js/mongodb-mcp-server/dist/index.js"], {}),
    ("elasticsearch", "@elastic/mcp-server-elasticsearch", "0.3.1",
     ["node", "node_modules/@elastic/mcp-server-elasticsearch/dist/index.js"],
     {"ES_URL": "http://127.0.0.1:9", "ES_API_KEY": DUMMY}),
    ("browserbase", "@browserbasehq/mcp-server-browserbase", "2.4.3",
     ["node", "node_modules/@browserbasehq/mcp-server-browserbase/cli.js"],
     {"BROWSERBASE_API_KEY": DUMMY, "BROWSERBASE_PROJECT_ID": DUMMY}),
    ("browser-tools", "@agentdeskai/browser-tools-mcp", "2.0.2",
     ["node", "node_modules/@agentdeskai/browser-tools-mcp/dist/index.js"], {}),
    ("youtube-transcript", "@kimtaeyoon83/mcp-server-youtube-transcript", "0.1.1",
     ["node", "node_modules/@kimtaeyoon83/mcp-server-youtube-transcript/dist/index.js"], {}),
    ("cloudflare", "@cloudflare/mcp-server-cloudflare", "0.2.0",
     ["node", "node_modules/@cloudflare/mcp-server-cloudflare/dist/index.js", "run", "0000"],
     {"CLOUDFLARE_API_TOKEN": DUMMY}),
    # Already pinned by the repository's own test fixtures.
    ("everything", "@modelcontextprotocol/server-everything", "2026.8.31",
     ["node", "@REPO@/tests/fixtures/node_modules/@modelcontextprotocol/server-everything/dist/index.js"], {}),
    ("filesystem", "@modelcontextprotocol/server-filesystem", "2026.8.31",
     ["node", "@REPO@/tests/fixtures/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js",
      "@TMP@"], {}),
    ("git", "mcp-server-git", "2026.10.19", ["@REPO@/.venv/bin/mcp-server-git"], {}),
    ("time", "mcp-server-time", "2026.10.19", ["@REPO@/.venv/bin/mcp-server-time"], {}),
]


FRESH = {"everart", "gdrive", "aws-kb-retrieval", "mongodb", "elasticsearch", "browserbase", "browser-tools",
         "youtube-transcript", "cloudflare"}


def split_of(name):
    """A third of the servers, chosen by hash rather than by hand, is held out of tuning; the
    FRESH ones, captured after tuning, are held out whole."""
    if name in FRESH:
        return "heldout"
    return "heldout" if hashlib.sha256(name.encode()).digest()[0] % 3 == 0 else "tune"


class Client:
    """Newline-delimited JSON-RPC over a child's stdio."""

    def __init__(self, argv, env, cwd):
        self.p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.DEVNULL, env=env, cwd=cwd)
        self.q = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.next = 1

    def _read(self):
        for line in self.p.stdout:
            try:
                self.q.put(json.loads(line))
            except ValueError:
                pass
        self.q.put(None)

    def request(self, method, params, timeout=60):
        i = self.next
        self.next += 1
        self.send({"jsonrpc": "2.0", "id": i, "method": method, "params": params})
        while True:
            m = self.q.get(timeout=timeout)
            if m is None:
                raise RuntimeError("server exited")
            if m.get("id") == i and "method" not in m:
                if "error" in m:
                    raise RuntimeError(m["error"])
                return m["result"]

    def send(self, m):
        self.p.stdin.write((json.dumps(m) + "\n").encode())
        self.p.stdin.flush()

    def close(self):
        try:
            self.p.stdin.close()
            self.p.wait(timeout=5)
        except Exception:
            self.p.kill()


def capture(name, package, version, argv, extra, prefix):
    tmp = tempfile.mkdtemp(prefix=f"cap-{name}-")
    argv = [a.replace("@TMP@", tmp).replace("@REPO@", str(REPO)) for a in argv]
    if argv[0] != "node" and not argv[0].startswith("/"):
        argv[0] = str(prefix / argv[0])
    argv = [str(prefix / a) if a.startswith("node_modules/") else a for a in argv]
    env = {"PATH": os.environ["PATH"], "HOME": tmp, "NO_PROXY": "*", "HTTP_PROXY": "http://127.0.0.1:9",
           "HTTPS_PROXY": "http://127.0.0.1:9", "DO_NOT_TRACK": "1", **extra}
    c = Client(argv, env, tmp)
    try:
        c.request("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                 "clientInfo": {"name": "axp-lint-corpus", "version": "0"}})
        c.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        tools, cursor = [], None
        while True:
            r = c.request("tools/list", {"cursor": cursor} if cursor else {})
            tools += r.get("tools", [])
            cursor = r.get("nextCursor")
            if not cursor:
                break
    finally:
        c.close()
    out = {"server": name, "package": package, "version": version, "split": split_of(name), "tools": tools}
    (HERE / "servers").mkdir(exist_ok=True)
    (HERE / "servers" / f"{name}.json").write_text(json.dumps(out, indent=1, sort_keys=True, ensure_ascii=False) + "\n")
    return len(tools)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--prefix", default="/tmp/mcpcap", type=Path)
    ap.add_argument("--only")
    a = ap.parse_args()
    failed = 0
    for s in SERVERS:
        if a.only and s[0] != a.only:
            continue
        try:
            n = capture(*s, a.prefix)
            print(f"{s[0]}: {n} tools")
        except Exception as e:  # noqa: BLE001 - report and go on with the next server
            failed += 1
            print(f"{s[0]}: FAILED {e}", file=sys.stderr)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
