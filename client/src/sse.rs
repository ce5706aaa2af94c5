//! The part of the server-sent-events format a JSON-RPC answer uses: `data:` lines gathered into
//! one event per blank line. Event ids, names, retry hints and `:` comments (the gateway's
//! keep-alives) carry nothing a client of one call needs, and are skipped.

/// Bytes of an event stream as they arrive, and the events they complete.
#[derive(Debug, Default)]
pub(crate) struct Events {
    /// Bytes after the last complete line.
    partial: Vec<u8>,
    /// The `data` of the event being read, line by line.
    data: Vec<String>,
    /// Events completed and not yet taken.
    done: Vec<String>,
}

impl Events {
    /// Adds bytes read from the stream (a chunk may end anywhere, even inside a character).
    pub(crate) fn push(&mut self, chunk: &[u8]) {
        self.partial.extend_from_slice(chunk);
        while let Some(end) = self.partial.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.partial.drain(..=end).collect();
            let line = String::from_utf8_lossy(&line);
            self.line(line.trim_end_matches(['\n', '\r']));
        }
    }

    /// The data of each event completed since the last call, in order.
    pub(crate) fn drain(&mut self) -> Vec<String> {
        std::mem::take(&mut self.done)
    }

    fn line(&mut self, line: &str) {
        if line.is_empty() {
            if !self.data.is_empty() {
                self.done.push(std::mem::take(&mut self.data).join("\n"));
            }
            return;
        }
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line, ""),
        };
        if field == "data" {
            self.data.push(value.to_string());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_split_on_blank_lines_wherever_the_chunks_end() {
        let stream = b": keep-alive\n\nid: j:1\ndata: {\"a\":1}\n\r\ndata:{\"b\":\ndata: 2}\n\nevent: x\n";
        for cut in 0..stream.len() {
            let mut ev = Events::default();
            ev.push(&stream[..cut]);
            let mut got = ev.drain();
            ev.push(&stream[cut..]);
            got.extend(ev.drain());
            assert_eq!(got, vec!["{\"a\":1}".to_string(), "{\"b\":\n2}".to_string()], "cut at {cut}");
        }
    }
}
