"""Captures the tool catalogs of the servers in MANIFEST.tsv: starts each over stdio with the
official MCP Python client, asks `tools/list`, and writes `catalogs/<server>.json` (name,
description, inputSchema of every tool, in the server's order).

Every server runs in a network namespace of its own with no interface but loopback
(`unshare -n`), so nothing it does at start-up leaves the machine; a server that needs the
internet to start fails here and is left out.

    python capture.py NPM_DIR VENVS [SERVER ...]

NPM_DIR holds `node_modules/` with the npm packages of the manifest installed; VENVS holds one
virtualenv per PyPI package, named after it (their pins of `mcp` conflict). This script runs
under any Python with the `mcp` package."""

import asyncio
import csv
import json
import os
import sys

from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client

HERE = os.path.dirname(os.path.abspath(__file__))


def command(row, npm_dir, venv):
    argv = row["argv"].split()
    if row["registry"] == "npm":
        # argv[0] is the package's bin name in node_modules/.bin.
        argv[0] = os.path.join(npm_dir, "node_modules", ".bin", argv[0])
    else:
        # One virtualenv per PyPI server (their `mcp` pins conflict): VENVS/<server>/.
        argv[0] = os.path.join(venv, row["package"], "bin", argv[0])
    return ["unshare", "-n", "--", *argv]


async def capture(row, npm_dir, venv):
    env = {
        "PATH": os.environ["PATH"],
        "HOME": "/tmp/mcpeval/home",
        "NO_PROXY": "*",
    }
    for kv in filter(None, row["env"].split(",")):
        k, v = kv.split("=", 1)
        env[k] = v
    argv = command(row, npm_dir, venv)
    params = StdioServerParameters(command=argv[0], args=argv[1:], env=env, cwd="/tmp/mcpeval/work")
    async with stdio_client(params, errlog=open(os.devnull, "w")) as (r, w):
        async with ClientSession(r, w) as s:
            await asyncio.wait_for(s.initialize(), 60)
            tools = []
            cursor = None
            while True:
                params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
                res = await asyncio.wait_for(s.list_tools(params=params), 60)
                tools += res.tools
                cursor = res.next_cursor
                if not cursor:
                    break
    return [{"name": t.name, "description": t.description or "", "inputSchema": t.input_schema} for t in tools]


def main():
    npm_dir, venv = sys.argv[1], sys.argv[2]
    only = set(sys.argv[3:])
    os.makedirs("/tmp/mcpeval/home", exist_ok=True)
    os.makedirs("/tmp/mcpeval/work", exist_ok=True)
    os.makedirs(os.path.join(HERE, "catalogs"), exist_ok=True)
    rows = list(csv.DictReader(open(os.path.join(HERE, "MANIFEST.tsv")), delimiter="\t"))
    for row in rows:
        if only and row["server"] not in only:
            continue
        try:
            tools = asyncio.run(asyncio.wait_for(capture(row, npm_dir, venv), 90))
        except BaseException as e:  # noqa: BLE001 - a server that fails is reported and skipped
            while isinstance(e, BaseExceptionGroup):
                e = e.exceptions[0]
            print(f"SKIP {row['server']}: {type(e).__name__}: {e}"[:300], flush=True)
            continue
        if not tools:
            print(f"SKIP {row['server']}: no tools", flush=True)
            continue
        with open(os.path.join(HERE, "catalogs", row["server"] + ".json"), "w") as f:
            json.dump(tools, f, indent=1, ensure_ascii=False)
            f.write("\n")
        print(f"OK   {row['server']}: {len(tools)} tools", flush=True)


if __name__ == "__main__":
    main()
