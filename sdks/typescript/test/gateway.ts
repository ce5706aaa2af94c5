/**
 * What the SDK tests run against: a real `axp serve` (the binary at $AXP_BIN, default the
 * workspace's target/debug/axp) on a free loopback port with a throw-away state directory and
 * workspace, and `CutProxy`, a loopback TCP relay in front of it that breaks connections in the
 * middle of an event stream, as a flaky network or a restarting proxy would.
 * @module
 */

import { spawn, type ChildProcess } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, openSync, closeSync, existsSync } from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

// dist/test/gateway.js -> the repository root is four levels up (sdks/typescript/dist/test).
const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../../..");

export interface Gateway {
  url: string;
  workspace: string;
  stop(): Promise<void>;
}

export async function startGateway(): Promise<Gateway> {
  let bin = process.env.AXP_BIN ?? path.join(REPO, "target/debug/axp");
  if (!path.isAbsolute(bin)) bin = path.join(REPO, bin);
  if (!existsSync(bin)) throw new Error(`no gateway binary at ${bin} (build it or set AXP_BIN)`);
  const tmp = mkdtempSync(path.join(os.tmpdir(), "axp-sdk-ts."));
  const state = path.join(tmp, "state");
  const workspace = path.join(tmp, "ws");
  mkdirSync(state);
  mkdirSync(workspace);
  const log = path.join(tmp, "axp.err");
  const err = openSync(log, "w");
  // detached: the gateway leads its own process group, so stop() reaches whatever it started.
  // Through `setpriv --pdeathsig` where there is one: the kernel then sends the gateway SIGTERM
  // when this process dies, so a run killed before its `after` hook leaves no gateway behind.
  const args = ["serve", "--listen", "127.0.0.1:0", "--state-dir", state, "--workspace", workspace];
  const setpriv = ["/usr/bin/setpriv", "/bin/setpriv"].find((p) => existsSync(p));
  const child: ChildProcess = setpriv
    ? spawn(setpriv, ["--pdeathsig", "SIGTERM", "--", bin, ...args], { stdio: ["ignore", "ignore", err], detached: true })
    : spawn(bin, args, { stdio: ["ignore", "ignore", err], detached: true });
  closeSync(err);
  let exited = false;
  child.on("exit", () => {
    exited = true;
  });
  const stop = async () => {
    if (!exited && child.pid) {
      try {
        process.kill(-child.pid, "SIGTERM");
      } catch {
        /* already gone */
      }
      const deadline = Date.now() + 5000;
      while (!exited && Date.now() < deadline) await sleep(50);
      if (!exited) {
        try {
          process.kill(-child.pid, "SIGKILL");
        } catch {
          /* already gone */
        }
        while (!exited) await sleep(50);
      }
    }
    rmSync(tmp, { recursive: true, force: true });
  };
  const deadline = Date.now() + 60_000;
  for (;;) {
    const text = readFileSync(log, "utf8");
    const m = / on (http:\/\/127\.0\.0\.1:\d+\/axp)/.exec(text);
    if (m) return { url: m[1]!, workspace, stop };
    if (exited || Date.now() > deadline) {
      await stop();
      throw new Error(`the gateway did not start: ${text}`);
    }
    await sleep(50);
  }
}

export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/**
 * A loopback TCP relay to the gateway that can break its connections. `cut()` destroys every
 * connection open at that moment, both ways. With `cutAfterBytes`, each connection is destroyed
 * once it has carried that many bytes from the gateway to the client, wherever that falls
 * (inside a header, inside an SSE message). `accepted` counts the connections clients opened.
 */
export class CutProxy {
  accepted = 0;
  private readonly server: net.Server;
  private readonly open = new Set<net.Socket>();
  private readonly path: string;

  private constructor(
    target: URL,
    private readonly cutAfterBytes: number | undefined,
  ) {
    this.path = target.pathname;
    this.server = net.createServer((down) => {
      this.accepted += 1;
      const up = net.connect(Number(target.port), "127.0.0.1");
      this.open.add(down);
      this.open.add(up);
      const kill = () => {
        down.destroy();
        up.destroy();
        this.open.delete(down);
        this.open.delete(up);
      };
      down.on("error", kill).on("close", kill);
      up.on("error", kill).on("close", kill);
      down.on("data", (d: Buffer) => up.write(d));
      let budget = this.cutAfterBytes;
      up.on("data", (d: Buffer) => {
        if (budget !== undefined && budget <= 0) return;
        if (budget === undefined) {
          down.write(d);
          return;
        }
        const part = d.subarray(0, budget);
        budget -= part.length;
        if (budget > 0) {
          down.write(part);
        } else {
          down.write(part, kill);
        }
      });
    });
  }

  static async start(targetUrl: string, cutAfterBytes?: number): Promise<CutProxy> {
    const p = new CutProxy(new URL(targetUrl), cutAfterBytes);
    await new Promise<void>((resolve) => p.server.listen(0, "127.0.0.1", resolve));
    return p;
  }

  get url(): string {
    const port = (this.server.address() as net.AddressInfo).port;
    return `http://127.0.0.1:${port}${this.path}`;
  }

  /** Destroys every open connection; returns how many sockets it destroyed. */
  cut(): number {
    const n = this.open.size;
    for (const s of [...this.open]) s.destroy();
    this.open.clear();
    return n;
  }

  async close(): Promise<void> {
    this.cut();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}
