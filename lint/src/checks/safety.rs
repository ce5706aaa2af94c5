//! Safety checks (AXP026–AXP036): hidden Unicode (decoded and named), injection markup,
//! instruction overrides, concealment, secret paths, exfiltration instructions, hidden
//! side-channel parameters, cross-tool shadowing and dangerously broad capabilities.
//!
//! Every string of the tool is scanned (description, title, annotations, every schema string and
//! property name), so poison hidden in an argument's description or a default is found too.
//! Text rules match word sequences with a tiny pattern language (see [`Pat`]) over the visible
//! text and over text decoded from tag characters. They are tuned for precision on the real
//! well-made servers of the test-suite; the corpus tests pin both directions.

use std::collections::BTreeMap;

use axp_protocol::ToolSpec;
use serde_json::Value;

use super::{Context, Raw, clip};
use crate::text::{Hidden, classify, describe_char, is_emoji_like, is_rtl_letter, words};
use crate::{Fix, PatchOp, pointer_escape};

/// One string of the tool and where it is.
struct Text {
    pointer: String,
    text: String,
    /// A property name (object key), not a value: cannot be fixed by replacement.
    is_key: bool,
    /// Free text (descriptions, titles, defaults); `false` for `pattern`, `$ref`, `format`…
    prose: bool,
}

const NON_PROSE: &[&str] = &[
    "pattern",
    "$ref",
    "$schema",
    "$id",
    "$anchor",
    "format",
    "type",
    "contentEncoding",
    "contentMediaType",
    "$comment",
];

fn collect(v: &Value, ptr: &str, prose: bool, in_props: bool, out: &mut Vec<Text>) {
    match v {
        Value::String(s) => out.push(Text { pointer: ptr.to_string(), text: s.clone(), is_key: false, prose }),
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                collect(x, &format!("{ptr}/{i}"), prose, false, out);
            }
        }
        Value::Object(m) => {
            for (k, x) in m {
                let p = format!("{ptr}/{}", pointer_escape(k));
                if in_props {
                    out.push(Text { pointer: p.clone(), text: k.clone(), is_key: true, prose: false });
                }
                let child_prose = prose && !NON_PROSE.contains(&k.as_str());
                let child_props =
                    !in_props && (k == "properties" || k == "patternProperties" || k == "$defs" || k == "definitions");
                collect(x, &p, child_prose, child_props, out);
            }
        }
        _ => {}
    }
}

pub(crate) fn check(provider: &str, tool: &ToolSpec, ctx: &Context, out: &mut Vec<Raw>) {
    let value = serde_json::to_value(tool).unwrap_or(Value::Null);
    let sensitive_sentences = prose(&value, out);
    side_channels(tool, &sensitive_sentences, out);
    shadowing(provider, tool, ctx, out);
    dangerous(tool, out);
}

/// The prose rules alone (hidden Unicode, injection markup, instruction overrides, concealment,
/// secret paths, exfiltration) over every string of `value`: for what an MCP server offers
/// besides tools (a prompt, a resource), which has no schema or side channels to check.
pub(crate) fn check_prose(value: &Value, out: &mut Vec<Raw>) {
    prose(value, out);
}

/// Runs the Unicode and text rules over every string of `value`; returns the sensitive
/// sentences of its top-level `description`, for the side-channel rule.
fn prose(value: &Value, out: &mut Vec<Raw>) -> Vec<String> {
    let mut texts = Vec::new();
    collect(value, "", true, false, &mut texts);
    let mut sensitive_sentences: Vec<String> = Vec::new();
    for t in &texts {
        let decoded_tags = unicode(t, out);
        if !t.prose {
            continue;
        }
        let visible: String = t.text.chars().filter(|c| classify(*c).is_none()).collect();
        // Only the tool-level description can point the agent at *another* argument; sentences
        // of an argument's own description are judged on that argument alone.
        let mut sink = Vec::new();
        let sens = if t.pointer == "/description" { &mut sensitive_sentences } else { &mut sink };
        text_rules(&t.pointer, &visible, "", out, sens);
        if let Some(hidden) = decoded_tags {
            text_rules(&t.pointer, &hidden, " (in text hidden in tag characters)", out, sens);
        }
    }
    sensitive_sentences
}

/// Reports hidden code points of one string; returns the ASCII decoded from tag characters.
fn unicode(t: &Text, out: &mut Vec<Raw>) -> Option<String> {
    let chars: Vec<char> = t.text.chars().collect();
    let has_rtl = chars.iter().any(|c| is_rtl_letter(*c));
    // rule -> (code point -> count)
    let mut hits: BTreeMap<&'static str, BTreeMap<char, usize>> = BTreeMap::new();
    let mut tags = String::new();
    let mut flagged = vec![false; chars.len()];
    for (i, &c) in chars.iter().enumerate() {
        let Some(kind) = classify(c) else { continue };
        let prev = i.checked_sub(1).map(|j| chars[j]);
        let next = chars.get(i + 1).copied();
        let allowed = match (kind, c as u32) {
            // Zero-width joiner inside an emoji sequence.
            (_, 0x200D) => prev.is_some_and(|p| is_emoji_like(p) || p == '\u{FE0F}') && next.is_some_and(is_emoji_like),
            // Zero-width non-joiner between letters of scripts that need it (Persian, Indic).
            (_, 0x200C) => {
                prev.is_some_and(|p| p.is_alphabetic() && !p.is_ascii())
                    && next.is_some_and(|n| n.is_alphabetic() && !n.is_ascii())
            }
            // Text / emoji presentation selectors after a symbol, or in a keycap.
            (_, 0xFE0E | 0xFE0F) => {
                prev.is_some_and(|p| is_emoji_like(p) || (!p.is_ascii() && !p.is_alphanumeric()))
                    || next == Some('\u{20E3}')
            }
            (Hidden::BidiMark, _) => has_rtl,
            // Emoji tag sequences: subdivision flags (U+1F3F4 + tag letters/digits + CANCEL TAG).
            (Hidden::Tag, _) => in_flag_sequence(&chars, i),
            _ => false,
        };
        if allowed {
            continue;
        }
        flagged[i] = true;
        let rule = match kind {
            Hidden::Invisible => "AXP026",
            Hidden::BidiControl | Hidden::BidiMark => "AXP027",
            Hidden::Tag => {
                if let Some(a) = char::from_u32(c as u32 - 0xE0000).filter(|a| (' '..='~').contains(a)) {
                    tags.push(a);
                }
                "AXP028"
            }
        };
        *hits.entry(rule).or_default().entry(c).or_default() += 1;
    }
    if hits.is_empty() {
        return None;
    }
    let cleaned: String = chars.iter().zip(&flagged).filter(|(_, f)| !**f).map(|(c, _)| *c).collect();
    let what = if t.is_key { "property name" } else { "text" };
    for (rule, counts) in &hits {
        let list: Vec<String> = counts
            .iter()
            .map(|(c, n)| if *n > 1 { format!("{n} × {}", describe_char(*c)) } else { describe_char(*c) })
            .collect();
        let list = if *rule == "AXP028" {
            let n: usize = counts.values().sum();
            let lo = counts.keys().next().map(|c| *c as u32).unwrap_or(0);
            let hi = counts.keys().next_back().map(|c| *c as u32).unwrap_or(0);
            format!("{n} tag characters in U+{lo:04X}..U+{hi:04X}")
        } else if list.len() > 6 {
            format!("{} and {} more kinds", list[..6].join(", "), list.len() - 6)
        } else {
            list.join(", ")
        };
        let mut message = match *rule {
            "AXP028" => format!("{what} hides ASCII in Unicode tag characters: \"{}\" ({list})", clip(&tags, 200)),
            "AXP027" => format!(
                "{what} contains bidirectional controls{}: {list}",
                if has_rtl { "" } else { " in text without right-to-left script" }
            ),
            _ => format!("{what} contains invisible characters: {list}"),
        };
        if t.is_key {
            message.push_str(&format!(" (visible as `{}`)", cleaned));
        }
        let mut raw = Raw::new(rule, t.pointer.clone(), message);
        if !t.is_key {
            raw = raw.with_fix(Fix {
                description: "remove the hidden characters".into(),
                edits: vec![PatchOp::Replace { path: t.pointer.clone(), value: Value::String(cleaned.clone()) }],
                safe: true,
            });
        }
        out.push(raw);
    }
    (!tags.is_empty()).then_some(tags)
}

/// `true` when the tag character at `i` belongs to an emoji flag tag sequence: U+1F3F4 WAVING
/// BLACK FLAG, then tag digits / lower-case letters, then U+E007F CANCEL TAG.
fn in_flag_sequence(chars: &[char], i: usize) -> bool {
    let is_spec = |c: char| matches!(c as u32, 0xE0030..=0xE0039 | 0xE0061..=0xE007A);
    let mut end = i;
    while end < chars.len() && is_spec(chars[end]) {
        end += 1;
    }
    let mut start = end;
    while start > 0 && is_spec(chars[start - 1]) {
        start -= 1;
    }
    chars.get(end) == Some(&'\u{E007F}') && start < end && start > 0 && chars[start - 1] == '\u{1F3F4}'
}

/// A word-sequence pattern: space-separated tokens; a token is `a|b|c` (any of), `x?`
/// (optional), or `~N` (skip up to N words). Matched against [`words`] of the text, so
/// punctuation, case and line breaks do not matter.
struct Pat(&'static str);

impl Pat {
    fn find(&self, w: &[String]) -> Option<(usize, usize)> {
        let toks: Vec<&str> = self.0.split(' ').collect();
        (0..w.len()).find_map(|s| m(&toks, w, s).map(|e| (s, e)))
    }
}

fn m(toks: &[&str], w: &[String], i: usize) -> Option<usize> {
    let Some((t, rest)) = toks.split_first() else {
        return Some(i);
    };
    if let Some(n) = t.strip_prefix('~') {
        let n: usize = n.parse().unwrap_or(0);
        return (0..=n).filter(|k| i + k <= w.len()).find_map(|k| m(rest, w, i + k));
    }
    let (alts, optional) = match t.strip_suffix('?') {
        Some(a) => (a, true),
        None => (*t, false),
    };
    if w.get(i).is_some_and(|x| alts.split('|').any(|a| a == x))
        && let Some(e) = m(rest, w, i + 1)
    {
        return Some(e);
    }
    if optional { m(rest, w, i) } else { None }
}

const MARKUP_TAGS: &[&str] = &[
    "important",
    "system",
    "system_prompt",
    "instructions",
    "instruction",
    "secret",
    "hidden",
    "admin",
    "critical",
    "override",
    "assistant",
    "ai",
    "llm",
    "prompt",
    "context",
    "rules",
    "note_to_ai",
    "sys",
];
const MARKUP_TOKENS: &[&str] = &[
    "[inst]",
    "[/inst]",
    "<<sys>>",
    "<|im_start|>",
    "<|im_end|>",
    "<|system|>",
    "<|endoftext|>",
    "### system",
    "### instruction",
    "<!--",
];

const OVERRIDE: &[Pat] = &[
    Pat(
        "ignore|disregard|forget|override|bypass all|any|the|your|previous|prior|above|earlier|preceding|other|system|existing ~2 instructions|instruction|prompt|prompts|rules|directions|guidelines|guardrails|policy|policies|messages",
    ),
    Pat("disregard|forget|ignore everything|anything ~3 said|told|above|before|previously"),
    Pat("from now on"),
    Pat("you are now|no longer"),
    Pat("you will|must|shall now"),
    Pat("act like|as if|though|you"),
    Pat("act as if|though"),
    Pat("pretend to|you|that"),
    Pat("role play|playing"),
    Pat("roleplay"),
    Pat("assume|take|adopt|play the role|persona|identity|part of"),
    Pat("instead reply|respond|say|answer|tell|output|print|write"),
    Pat("new|updated|real|true|secret|hidden instructions|directive|directives|persona|objective"),
    Pat("your real|true|actual|new goal|purpose|objective|mission|job"),
];

const CONCEAL: &[Pat] = &[
    Pat(
        "do|must|should|shall not tell|inform|mention|reveal|disclose|notify|alert|show|explain|say|report ~4 user|users|user's|human|anyone|them|this|that|it|why",
    ),
    Pat(
        "don't|dont|never tell|inform|mention|reveal|disclose|notify|alert|explain|say ~4 user|users|user's|human|anyone|them|this|that|it|why",
    ),
    Pat("without telling|informing|notifying|alerting|letting|warning ~3 user|users|user's|human|anyone|them"),
    Pat("without the? user|users|user's knowing|noticing|knowledge|consent|awareness"),
    Pat("keep|kept this|it|that ~2 secret|hidden|confidential|private|quiet"),
    Pat("hide|conceal ~6 from the? user|users"),
    Pat("user|users should|must|will|need not|never ~1 know|notice|see|find"),
    Pat("just|simply say|tell|claim ~4 used|called|succeeded|worked"),
];

/// Substrings that name credential files and secret stores.
const SECRET_PATHS: &[&str] = &[
    "~/.ssh",
    ".ssh/",
    "id_rsa",
    "id_ed25519",
    "id_ecdsa",
    "id_dsa",
    "authorized_keys",
    "mcp.json",
    "claude_desktop_config",
    ".cursor/",
    ".aws/credentials",
    "aws_secret_access_key",
    ".netrc",
    ".npmrc",
    ".pypirc",
    ".git-credentials",
    ".kube/config",
    ".docker/config.json",
    "/etc/shadow",
    "/etc/passwd",
    ".gnupg",
    "credentials.json",
    ".config/gcloud",
    "wallet.dat",
    "private_key",
    "secring",
];

/// Phrases naming what an agent must never put into a tool argument.
const EXFIL_TARGETS: &[&str] = &[
    "previous message",
    "prior message",
    "last message",
    "earlier message",
    "conversation history",
    "entire conversation",
    "whole conversation",
    "full conversation",
    "conversation so far",
    "conversation transcript",
    "chat history",
    "message history",
    "system prompt",
    "your instructions",
    "context window",
    "all messages",
    "every message",
    "user's message",
    "user's previous",
    "entire chat",
    "full chat",
    "chat log",
    "tool descriptions",
    "other tools",
];
/// Verbs that, next to one of [`EXFIL_TARGETS`], make a sentence an instruction to move it.
/// Deliberately without "read", "provide", "post", "set": those describe chat tools.
const EXFIL_VERBS: &[&str] = &[
    "pass", "include", "send", "put", "add", "attach", "insert", "append", "copy", "forward", "upload", "contain",
    "fill", "share", "leak", "transmit", "embed", "paste", "dump",
];
const RECIPIENT_WORDS: &[&str] = &["bcc", "cc", "add", "include", "forward", "copy", "cc'd", "bcc'd", "also"];
const URL_EXFIL_VERBS: &[&str] =
    &["send", "post", "upload", "forward", "transmit", "exfiltrate", "report", "submit", "leak", "beacon"];
const DATA_NOUNS: &[&str] = &[
    "conversation",
    "data",
    "contents",
    "content",
    "file",
    "files",
    "secret",
    "secrets",
    "key",
    "keys",
    "token",
    "tokens",
    "credentials",
    "results",
    "output",
    "everything",
    "history",
    "messages",
    "password",
    "passwords",
    "environment",
];

/// Sentences of `s`: split after `.`, `!`, `?` followed by whitespace, and at line breaks.
fn sentences(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    let b = s.as_bytes();
    for i in 0..b.len() {
        let end = b[i] == b'\n'
            || (matches!(b[i], b'.' | b'!' | b'?') && b.get(i + 1).is_none_or(|n| n.is_ascii_whitespace()));
        if end {
            let piece = s[start..=i].trim();
            if !piece.is_empty() {
                out.push(piece);
            }
            start = i + 1;
        }
    }
    let tail = s[start..].trim();
    if !tail.is_empty() {
        out.push(tail);
    }
    out
}

fn has_email(s: &str) -> Option<&str> {
    s.split(|c: char| c.is_whitespace() || "`'\"<>(),;".contains(c)).map(|w| w.trim_end_matches('.')).find(|w| {
        w.split_once('@').is_some_and(|(u, d)| {
            !u.is_empty()
                && d.contains('.')
                && !d.starts_with('.')
                && d.chars().all(|c| c.is_ascii_alphanumeric() || ".-".contains(c))
        })
    })
}

fn secret_path(lower: &str) -> Option<&'static str> {
    if let Some(p) = SECRET_PATHS.iter().find(|p| lower.contains(**p)) {
        return Some(p);
    }
    // `.env` as a file name: not inside a longer word (".environment", "dev.env" counts).
    let b = lower.as_bytes();
    let mut from = 0;
    while let Some(i) = lower[from..].find(".env") {
        let at = from + i;
        let before_ok = at == 0
            || !b[at - 1].is_ascii_alphanumeric()
            || lower[..at].ends_with("dev")
            || lower[..at].ends_with("prod");
        let after = b.get(at + 4);
        let after_ok = after.is_none_or(|c| !c.is_ascii_alphanumeric());
        if before_ok && after_ok {
            return Some(".env");
        }
        from = at + 4;
    }
    None
}

fn text_rules(pointer: &str, text: &str, origin: &str, out: &mut Vec<Raw>, sensitive: &mut Vec<String>) {
    let lower = text.to_lowercase();
    let flat = lower.split_whitespace().collect::<Vec<_>>().join(" ");
    // AXP029: markup.
    let mut markup: Vec<String> = Vec::new();
    for tag in MARKUP_TAGS {
        for form in [format!("<{tag}>"), format!("</{tag}>"), format!("<{tag} ")] {
            if flat.contains(&form)
                && !markup.iter().any(|m| m.trim_start_matches("</").trim_start_matches('<').starts_with(tag))
            {
                markup.push(form.trim().to_string());
            }
        }
    }
    for tok in MARKUP_TOKENS {
        if flat.contains(tok) {
            markup.push((*tok).to_string());
        }
    }
    if !markup.is_empty() {
        out.push(Raw::new(
            "AXP029",
            pointer,
            format!(
                "prompt-injection markup {}{origin}",
                markup.iter().map(|m| format!("`{m}`")).collect::<Vec<_>>().join(", ")
            ),
        ));
    }
    let w = words(text);
    let quote = |s: usize, e: usize| clip(&w[s..e].join(" "), 80);
    if let Some((s, e)) = OVERRIDE.iter().find_map(|p| p.find(&w)) {
        out.push(Raw::new(
            "AXP030",
            pointer,
            format!("instruction override aimed at the agent: \"{}\"{origin}", quote(s, e)),
        ));
    }
    if let Some((s, e)) = CONCEAL.iter().find_map(|p| p.find(&w)) {
        out.push(Raw::new(
            "AXP031",
            pointer,
            format!("tells the agent to hide something from the user: \"{}\"{origin}", quote(s, e)),
        ));
    }
    if let Some(p) = secret_path(&lower) {
        out.push(Raw::new("AXP032", pointer, format!("refers to a credential file or secret store `{p}`{origin}")));
        sensitive.extend(sentences(&lower).into_iter().filter(|s| secret_path(s).is_some()).map(str::to_string));
    }
    let mut exfil: Option<String> = None;
    for sentence in sentences(text) {
        let sl = sentence.to_lowercase();
        let sw = words(&sl);
        let has_verb = |list: &[&str]| sw.iter().any(|x| crate::text::is_in(x, list));
        if let Some(t) = EXFIL_TARGETS.iter().find(|t| sl.contains(**t))
            && has_verb(EXFIL_VERBS)
        {
            exfil.get_or_insert_with(|| format!("asks for {t}: \"{}\"", clip(sentence, 100)));
            sensitive.push(sl.clone());
            continue;
        }
        if let Some(addr) = has_email(&sl) {
            // The address must be what is added or copied: a recipient field is named, or one
            // of the adding verbs comes right before it. A contact address is not flagged.
            let before: Vec<String> = sl.find(addr).map(|i| words(&sl[..i])).unwrap_or_default();
            let near = before.iter().rev().take(4).any(|x| RECIPIENT_WORDS.contains(&x.as_str()));
            if sw.iter().any(|x| matches!(x.as_str(), "bcc" | "cc" | "blind")) || near {
                exfil.get_or_insert_with(|| {
                    format!("adds the address `{addr}` as a recipient: \"{}\"", clip(sentence, 100))
                });
                sensitive.push(sl.clone());
                continue;
            }
        }
        if (sl.contains("http://") || sl.contains("https://"))
            && has_verb(URL_EXFIL_VERBS)
            && sw.iter().any(|x| DATA_NOUNS.contains(&x.as_str()))
        {
            exfil.get_or_insert_with(|| format!("sends data to a URL: \"{}\"", clip(sentence, 100)));
            sensitive.push(sl.clone());
        }
    }
    if let Some(e) = exfil {
        out.push(Raw::new("AXP033", pointer, format!("exfiltration instruction: {e}{origin}")));
    }
}

const INSIST: &[&str] = &[
    "marked as optional",
    "marked optional",
    "listed as optional",
    "although optional",
    "must be provided",
    "must always be provided",
    "never leave",
    "do not leave",
    "always provide",
    "always include",
    "always fill",
    "mandatory",
    "malfunction",
    "is required for the tool to work",
];

/// AXP034: optional arguments that insist on being filled, or that ask for conversation
/// content or secrets.
fn side_channels(tool: &ToolSpec, sensitive: &[String], out: &mut Vec<Raw>) {
    let schema = &tool.input_schema;
    let Some(props) = schema.get("properties").and_then(Value::as_object) else {
        return;
    };
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    for (name, p) in props {
        let desc = p.get("description").and_then(Value::as_str).unwrap_or("");
        let lower = desc.to_lowercase();
        let ptr = format!("/inputSchema/properties/{}", pointer_escape(name));
        let optional = !required.contains(&name.as_str());
        let insists = desc.split(|c: char| !c.is_alphanumeric()).any(|w| w == "REQUIRED")
            || INSIST.iter().any(|i| lower.contains(i));
        let wants_secret = EXFIL_TARGETS.iter().find(|t| lower.contains(**t)).copied();
        let named_in_sensitive = sensitive.iter().any(|s| names_argument(s, &name.to_lowercase()));
        let reason = if optional && insists {
            Some("is optional in the schema but its description insists it must be filled".to_string())
        } else if let Some(t) = wants_secret {
            Some(format!("asks the agent to fill it with {t}"))
        } else if named_in_sensitive {
            Some("is where the description tells the agent to put secrets or conversation content".to_string())
        } else {
            None
        };
        if let Some(r) = reason {
            let extra = if optional && insists && wants_secret.is_some() {
                format!("; it asks for {}", wants_secret.unwrap_or_default())
            } else {
                String::new()
            };
            out.push(Raw::new("AXP034", ptr, format!("argument `{name}` {r}{extra}: a hidden side channel")));
        }
    }
}

/// `true` when `sentence` (lower-case) names the argument `name` as an argument: quoted or
/// backticked, or followed by "field", "parameter", "argument" or "param".
fn names_argument(sentence: &str, name: &str) -> bool {
    if ["`", "'", "\"", "“"].iter().any(|q| sentence.contains(&format!("{q}{name}"))) {
        return true;
    }
    let w = words(sentence);
    w.windows(2).any(|p| p[0] == name && matches!(p[1].as_str(), "field" | "parameter" | "argument" | "param" | "arg"))
}

/// Words that make a sentence mentioning another tool a behavioural instruction about it.
/// Workflow hints ("use read_text_file instead", "call search first") are not directives.
const DIRECTIVES: &[&str] =
    &["always", "never", "must", "ensure", "make sure", "otherwise", "do not", "don't", "whenever", "instead of"];

/// AXP035: the description instructs the agent about a different tool.
fn shadowing(provider: &str, tool: &ToolSpec, ctx: &Context, out: &mut Vec<Raw>) {
    let own = tool.name.to_lowercase();
    for sentence in sentences(&tool.description) {
        let sl = sentence.to_lowercase();
        let sw = words(&sl);
        let mut target: Option<String> = None;
        // Known tools of the catalog, by exact word (names with separators) or backticked.
        for k in &ctx.known {
            if k.lower == own || k.lower.len() < 3 || (k.provider == provider && k.name == tool.name) {
                continue;
            }
            let mentioned = if k.distinctive {
                contains_ident(&sl, &k.lower)
            } else {
                sl.contains(&format!("`{}`", k.lower)) || sl.contains(&format!("{} tool", k.lower))
            };
            if mentioned {
                target = Some(format!("{}/{}", k.provider, k.name));
                break;
            }
        }
        // Unknown tools named in "before/when using [the] X" form; X must look like a tool
        // identifier (has `_` or `-`) or be followed by the word "tool".
        if target.is_none() {
            let idw: Vec<String> = sl
                .split_whitespace()
                .map(|t| t.trim_matches(|c: char| !(c.is_alphanumeric() || c == '_' || c == '-')).to_string())
                .filter(|t| !t.is_empty())
                .collect();
            for (i, x) in idw.iter().enumerate() {
                // "send_message is invoked", "`transfer` tool is called"
                let passive = idw.get(i + 1).is_some_and(|v| v == "is" || v == "gets")
                    && idw.get(i + 2).is_some_and(|v| matches!(v.as_str(), "invoked" | "called" | "used" | "run"));
                if passive && (x.contains('_') || x.contains('-')) && *x != own {
                    target = Some(x.clone());
                    break;
                }
                if matches!(x.as_str(), "before" | "after" | "when" | "whenever")
                    && idw
                        .get(i + 1)
                        .is_some_and(|v| matches!(v.as_str(), "using" | "calling" | "invoking" | "running"))
                {
                    let at = if idw.get(i + 2).is_some_and(|t| t == "the") { i + 3 } else { i + 2 };
                    if let Some(n) = idw.get(at) {
                        let ident = n.contains('_') || n.contains('-');
                        let tool_word = idw.get(at + 1).is_some_and(|t| t == "tool");
                        if (ident || tool_word) && *n != own && !matches!(n.as_str(), "this" | "it") {
                            target = Some(n.clone());
                            break;
                        }
                    }
                }
            }
        }
        let Some(t) = target else { continue };
        let conditional = sw.first().is_some_and(|f| matches!(f.as_str(), "before" | "when" | "whenever" | "after"))
            && sw.get(1).is_some_and(|v| matches!(v.as_str(), "using" | "calling" | "invoking" | "running"));
        if conditional
            || DIRECTIVES.iter().any(|d| if d.contains(' ') { sl.contains(d) } else { sw.iter().any(|x| x == d) })
        {
            out.push(Raw::new(
                "AXP035",
                "/description",
                format!("gives instructions about another tool `{t}`: \"{}\"", clip(sentence, 120)),
            ));
            return;
        }
    }
}

/// `true` when `ident` occurs in `s` not as part of a longer identifier.
fn contains_ident(s: &str, ident: &str) -> bool {
    let is_id = |c: char| c.is_alphanumeric() || c == '_' || c == '-';
    let mut from = 0;
    while let Some(i) = s[from..].find(ident) {
        let at = from + i;
        let before = s[..at].chars().next_back();
        let after = s[at + ident.len()..].chars().next();
        if !before.is_some_and(is_id) && !after.is_some_and(is_id) {
            return true;
        }
        from = at + ident.len();
    }
    false
}

/// AXP036: arbitrary commands, environment dumps, arbitrary URLs.
fn dangerous(tool: &ToolSpec, out: &mut Vec<Raw>) {
    let props: Vec<String> = tool
        .input_schema
        .get("properties")
        .and_then(Value::as_object)
        .map(|m| m.keys().map(|k| k.to_lowercase()).collect())
        .unwrap_or_default();
    let verbs = super::description::action_verbs(tool);
    let lower = tool.description.to_lowercase();
    let has_prop = |names: &[&str]| props.iter().find(|p| names.contains(&p.as_str())).cloned();
    let verb_in = |list: &[&str]| verbs.iter().any(|v| list.contains(&v.as_str()));
    let mut why = None;
    if let Some(p) = has_prop(&["command", "cmd", "shell", "script", "bash", "commandline", "command_line", "code"])
        && verb_in(&["run", "execute", "exec", "eval", "evaluate", "invoke", "launch", "spawn"])
    {
        why = Some(format!("runs arbitrary commands or code (argument `{p}`)"));
    }
    if why.is_none()
        && lower.contains("environment variables")
        && (lower.contains("all ") || verb_in(&["display", "print", "list", "dump", "show"]))
    {
        why = Some("returns the process environment, where API keys and tokens live".to_string());
    }
    if why.is_none()
        && let Some(p) = has_prop(&["url", "uri", "href", "endpoint"])
    {
        {
            let constrained = tool
                .input_schema
                .pointer(&format!("/properties/{p}"))
                .is_some_and(|s| s.get("enum").is_some() || s.get("pattern").is_some() || s.get("const").is_some());
            if !constrained
                && verb_in(&[
                    "fetch", "get", "download", "request", "retrieve", "crawl", "scrape", "browse", "load", "open",
                ])
            {
                why = Some(format!(
                    "fetches any URL the agent gives it (argument `{p}`): server-side request forgery and exfiltration channel"
                ));
            }
        }
    }
    if let Some(w) = why {
        out.push(Raw::new("AXP036", "", format!("broad capability: {w}")));
    }
}
