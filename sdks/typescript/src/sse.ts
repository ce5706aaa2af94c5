/**
 * The server-sent-events framing a streamed JSON-RPC answer uses: `data:` lines gathered into
 * one message per blank line. Ids, event names, retry hints and `:` comments (the gateway's
 * keep-alives) are skipped: a stream is resumed from the seq inside each event, which is what
 * `job.attach` takes.
 * @module
 */

export class SseParser {
  private partial: Uint8Array = new Uint8Array(0);
  private data: string[] = [];
  private readonly decoder = new TextDecoder();

  /**
   * Adds bytes as they arrive (a chunk may end anywhere, even inside a character) and returns
   * the data of each message they complete.
   */
  feed(chunk: Uint8Array): string[] {
    const buf = new Uint8Array(this.partial.length + chunk.length);
    buf.set(this.partial);
    buf.set(chunk, this.partial.length);
    const out: string[] = [];
    let start = 0;
    for (let i = 0; i < buf.length; i++) {
      if (buf[i] !== 0x0a) continue;
      let line = this.decoder.decode(buf.subarray(start, i));
      start = i + 1;
      if (line.endsWith("\r")) line = line.slice(0, -1);
      if (line === "") {
        if (this.data.length > 0) {
          out.push(this.data.join("\n"));
          this.data = [];
        }
        continue;
      }
      const colon = line.indexOf(":");
      const field = colon < 0 ? line : line.slice(0, colon);
      let value = colon < 0 ? "" : line.slice(colon + 1);
      if (value.startsWith(" ")) value = value.slice(1);
      if (field === "data") this.data.push(value);
    }
    this.partial = buf.slice(start);
    return out;
  }
}
