//! A minimal TLS ClientHello reader: enough to find the SNI (server_name) and whether the hello
//! carries Encrypted Client Hello.
//!
//! Hand-rolled on purpose: the proxy needs three fields from one message, and the parser must be
//! total over hostile bytes (every length checked, no allocation beyond the reassembled hello,
//! no panics), which a 100-line reader makes easy to audit and fuzz; a general TLS parser crate
//! (`tls-parser`, built on `nom`) would add a large dependency surface for that. It reassembles a
//! ClientHello split across several TLS records. Pure: no I/O; the caller feeds it the bytes it
//! has so far and gets told whether to read more. It must not judge the SNI; the proxy does.

/// The result of looking at the first bytes a client sent through a tunnel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HelloParse {
    /// The bytes so far are a valid prefix; read more.
    NeedMore,
    /// The first byte is not a TLS handshake record.
    NotTls,
    /// It starts like TLS but is not a well-formed ClientHello.
    Malformed(&'static str),
    /// A complete ClientHello.
    Hello(ClientHello),
}

/// The fields of a ClientHello the proxy cares about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientHello {
    /// The `host_name` entry of the server_name extension, as sent (not normalised).
    pub sni: Option<String>,
    /// The hello carries an `encrypted_client_hello` extension (0xfe0d).
    pub ech: bool,
}

/// Largest ClientHello handshake message we accept (real ones are below 2 KiB; post-quantum key
/// shares push them towards 2 KiB; 64 KiB is the u16 extension space plus headers).
pub const MAX_HELLO: usize = 1 << 16;

struct Reader<'a> {
    b: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.b.len() < n {
            return None;
        }
        let (h, t) = self.b.split_at(n);
        self.b = t;
        Some(h)
    }
    fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|s| s[0])
    }
    fn u16(&mut self) -> Option<usize> {
        self.take(2).map(|s| usize::from(u16::from_be_bytes([s[0], s[1]])))
    }
    fn vec8(&mut self) -> Option<&'a [u8]> {
        let n = usize::from(self.u8()?);
        self.take(n)
    }
    fn vec16(&mut self) -> Option<&'a [u8]> {
        let n = self.u16()?;
        self.take(n)
    }
}

/// Parses the TLS records at the start of `buf` as a ClientHello.
pub fn parse_client_hello(buf: &[u8]) -> HelloParse {
    let mut hs = Vec::new();
    let mut pos = 0;
    loop {
        let Some(hdr) = buf.get(pos..pos + 5) else {
            if pos == 0 && !buf.is_empty() && buf[0] != 22 {
                return HelloParse::NotTls;
            }
            return HelloParse::NeedMore;
        };
        if hdr[0] != 22 {
            return if pos == 0 {
                HelloParse::NotTls
            } else {
                HelloParse::Malformed("a non-handshake record interrupts the ClientHello")
            };
        }
        if hdr[1] != 3 {
            return HelloParse::Malformed("unknown record version");
        }
        let len = usize::from(u16::from_be_bytes([hdr[3], hdr[4]]));
        if len == 0 || len > (1 << 14) {
            return HelloParse::Malformed("bad record length");
        }
        let Some(frag) = buf.get(pos + 5..pos + 5 + len) else {
            return HelloParse::NeedMore;
        };
        hs.extend_from_slice(frag);
        pos += 5 + len;
        if hs.len() >= 4 {
            if hs[0] != 1 {
                return HelloParse::Malformed("the first handshake message is not a ClientHello");
            }
            let body_len = (usize::from(hs[1]) << 16) | (usize::from(hs[2]) << 8) | usize::from(hs[3]);
            if body_len > MAX_HELLO {
                return HelloParse::Malformed("ClientHello too large");
            }
            if hs.len() >= 4 + body_len {
                return match parse_body(&hs[4..4 + body_len]) {
                    Some(Ok(h)) => HelloParse::Hello(h),
                    Some(Err(e)) => HelloParse::Malformed(e),
                    None => HelloParse::Malformed("truncated ClientHello"),
                };
            }
        }
    }
}

fn parse_body(body: &[u8]) -> Option<Result<ClientHello, &'static str>> {
    let mut r = Reader { b: body };
    r.take(2)?; // legacy_version
    r.take(32)?; // random
    let sid = r.vec8()?;
    if sid.len() > 32 {
        return Some(Err("session id too long"));
    }
    let suites = r.vec16()?;
    if suites.is_empty() || suites.len() % 2 != 0 {
        return Some(Err("bad cipher suite list"));
    }
    r.vec8()?; // compression methods
    let mut out = ClientHello { sni: None, ech: false };
    if r.b.is_empty() {
        return Some(Ok(out));
    }
    let exts = r.vec16()?;
    if !r.b.is_empty() {
        return Some(Err("trailing bytes after extensions"));
    }
    let mut er = Reader { b: exts };
    let mut seen_sni = false;
    while !er.b.is_empty() {
        let ty = er.u16()?;
        let data = er.vec16()?;
        match ty {
            0 => {
                if seen_sni {
                    return Some(Err("duplicate server_name extension"));
                }
                seen_sni = true;
                let mut sr = Reader { b: data };
                let list = sr.vec16()?;
                if !sr.b.is_empty() {
                    return Some(Err("trailing bytes in server_name"));
                }
                let mut lr = Reader { b: list };
                while !lr.b.is_empty() {
                    let name_type = lr.u8()?;
                    let name = lr.vec16()?;
                    if name_type == 0 {
                        if out.sni.is_some() {
                            return Some(Err("more than one host_name in server_name"));
                        }
                        match std::str::from_utf8(name) {
                            Ok(s) => out.sni = Some(s.to_string()),
                            Err(_) => return Some(Err("server_name is not UTF-8")),
                        }
                    }
                }
            }
            0xfe0d => out.ech = true,
            _ => {}
        }
    }
    Some(Ok(out))
}

/// Builds a minimal ClientHello record carrying `sni` (for tests and the fuzz corpus).
pub fn build_client_hello(sni: Option<&str>) -> Vec<u8> {
    let mut exts = Vec::new();
    if let Some(s) = sni {
        let name = s.as_bytes();
        let mut list = vec![0u8];
        list.extend_from_slice(&(name.len() as u16).to_be_bytes());
        list.extend_from_slice(name);
        let mut data = (list.len() as u16).to_be_bytes().to_vec();
        data.extend_from_slice(&list);
        exts.extend_from_slice(&0u16.to_be_bytes());
        exts.extend_from_slice(&(data.len() as u16).to_be_bytes());
        exts.extend_from_slice(&data);
    }
    let mut body = vec![3, 3];
    body.extend_from_slice(&[7u8; 32]);
    body.push(0);
    body.extend_from_slice(&[0, 2, 0x13, 0x01]);
    body.extend_from_slice(&[1, 0]);
    body.extend_from_slice(&(exts.len() as u16).to_be_bytes());
    body.extend_from_slice(&exts);
    let mut hs = vec![1];
    hs.extend_from_slice(&(body.len() as u32).to_be_bytes()[1..]);
    hs.extend_from_slice(&body);
    let mut rec = vec![22, 3, 1];
    rec.extend_from_slice(&(hs.len() as u16).to_be_bytes());
    rec.extend_from_slice(&hs);
    rec
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn finds_sni_and_waits_for_more() {
        let rec = build_client_hello(Some("allowed.test"));
        let want = HelloParse::Hello(ClientHello { sni: Some("allowed.test".into()), ech: false });
        assert_eq!(parse_client_hello(&rec), want);
        for cut in 0..rec.len() {
            assert_eq!(parse_client_hello(&rec[..cut]), HelloParse::NeedMore, "{cut}");
        }
        assert_eq!(
            parse_client_hello(&build_client_hello(None)),
            HelloParse::Hello(ClientHello { sni: None, ech: false })
        );
    }

    #[test]
    fn reassembles_a_hello_split_over_records() {
        let rec = build_client_hello(Some("split.test"));
        let hs = &rec[5..];
        let (a, b) = hs.split_at(10);
        let mut two = vec![22, 3, 1];
        two.extend_from_slice(&(a.len() as u16).to_be_bytes());
        two.extend_from_slice(a);
        two.extend_from_slice(&[22, 3, 1]);
        two.extend_from_slice(&(b.len() as u16).to_be_bytes());
        two.extend_from_slice(b);
        assert!(matches!(parse_client_hello(&two), HelloParse::Hello(h) if h.sni.as_deref() == Some("split.test")));
    }

    #[test]
    fn garbage_is_not_tls_or_malformed_never_a_panic() {
        assert_eq!(parse_client_hello(b"GET / HTTP/1.1\r\n"), HelloParse::NotTls);
        assert!(matches!(parse_client_hello(&[22, 3, 1, 0, 4, 2, 0, 0, 0]), HelloParse::Malformed(_)));
        // Every truncation and every single-byte corruption of a real hello terminates.
        let rec = build_client_hello(Some("allowed.test"));
        for i in 0..rec.len() {
            for v in [0u8, 1, 0x7f, 0xff] {
                let mut m = rec.clone();
                m[i] = v;
                let _ = parse_client_hello(&m);
            }
        }
    }
}
