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

use super::intent::{self, Pat, Sentence, Subject};
use super::{Context, Raw, clip};
use crate::text::{Hidden, classify, describe_char, is_emoji_like, is_in, is_rtl_letter, words};
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
    let subject = Subject::of(&tool.name, &tool.description);
    let sensitive_sentences = prose(&value, Some(&subject), out);
    side_channels(tool, &subject, &sensitive_sentences, out);
    shadowing(provider, tool, ctx, out);
    side_effects(tool, out);
    dangerous(tool, out);
}

/// The prose rules alone (hidden Unicode, injection markup, instruction overrides, concealment,
/// secret paths, exfiltration) over every string of `value`: for what an MCP server offers
/// besides tools (a prompt, a resource), which has no schema or side channels to check.
pub(crate) fn check_prose(value: &Value, out: &mut Vec<Raw>) {
    prose(value, None, out);
}

/// Runs the Unicode and text rules over every string of `value`; returns the sentences of its
/// top-level `description` that move sensitive data, for the side-channel rule.
fn prose(value: &Value, subject: Option<&Subject>, out: &mut Vec<Raw>) -> Vec<String> {
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
        let top = t.pointer == "/description";
        let sens = if top { &mut sensitive_sentences } else { &mut sink };
        let arg = t
            .pointer
            .strip_suffix("/description")
            .and_then(|p| p.rsplit_once("/properties/"))
            .map(|(_, name)| crate::text::name_tokens(name).iter().map(|w| crate::text::stem(w)).collect())
            .unwrap_or_default();
        let mut rules =
            TextRules { pointer: &t.pointer, origin: "", subject, top, out: &mut *out, sensitive: sens, arg };
        rules.run(&visible);
        if let Some(hidden) = decoded_tags {
            rules.origin = " (in text hidden in tag characters)";
            rules.run(&hidden);
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
    Pat(
        "omit|suppress|downplay|hide ~4 risk|risks|limitation|limitations|warning|warnings|error|errors|failure|failures|caveat|caveats",
    ),
    Pat(
        "without|never mentioning|disclosing|revealing ~4 risk|risks|error|errors|failure|failures|source|sources|this tool",
    ),
];

const RECIPIENT_WORDS: &[&str] = &["bcc", "cc", "add", "include", "forward", "copy", "cc'd", "bcc'd", "also"];
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

/// The wording rules over one string.
struct TextRules<'a> {
    pointer: &'a str,
    origin: &'static str,
    /// The tool the string belongs to (absent for prompts and resources).
    subject: Option<&'a Subject>,
    /// The string is the tool's own description.
    top: bool,
    out: &'a mut Vec<Raw>,
    sensitive: &'a mut Vec<String>,
    /// The words of the argument whose description this string is, if it is one.
    arg: Vec<String>,
}

impl TextRules<'_> {
    fn push(&mut self, rule: &'static str, s: &Sentence, text: &str, message: String) {
        let start = text[..s.start].chars().count();
        let end = start + text[s.start..s.end].chars().count();
        let raw = Raw::new(rule, self.pointer, format!("{message}{}", self.origin));
        // Text decoded from tag characters is not in the string, so it has no span there.
        self.out.push(if self.origin.is_empty() { raw.at(start, end) } else { raw });
    }

    fn run(&mut self, text: &str) {
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
            let list = markup.iter().map(|m| format!("`{m}`")).collect::<Vec<_>>().join(", ");
            self.out.push(Raw::new("AXP029", self.pointer, format!("prompt-injection markup {list}{}", self.origin)));
        }
        let (mut injected, mut concealed, mut secret, mut exfil) = (false, false, false, false);
        let first_start = intent::sentences(text).first().map(|s| s.start);
        for s in intent::sentences(text) {
            let w = &s.words;
            let quote = |(a, b): (usize, usize)| clip(&w[a..b].join(" "), 80);
            let first = self.top && Some(s.start) == first_start;
            if !injected {
                let why = OVERRIDE
                    .iter()
                    .find_map(|p| p.find(w))
                    .map(|r| format!("instruction override aimed at the agent: \"{}\"", quote(r)))
                    .or_else(|| intent::injection(&s));
                if let Some(why) = why {
                    injected = true;
                    self.push("AXP030", &s, text, why);
                }
            }
            if !concealed && let Some(r) = CONCEAL.iter().find_map(|p| p.find(w)) {
                concealed = true;
                self.push(
                    "AXP031",
                    &s,
                    text,
                    format!("tells the agent to hide something from the user: \"{}\"", quote(r)),
                );
            }
            let moved = intent::exfiltration(&s, self.subject, first, &self.arg);
            let sl = s.text.to_lowercase();
            if !secret
                && let Some(p) = intent::secret_path(&sl)
                && (moved.is_some() || reads_for_agent(w))
                && !self.subject.is_some_and(|sub| intent::relevant(intent::Data::Secrets, sub, !first))
            {
                secret = true;
                self.sensitive.push(sl.clone());
                self.push(
                    "AXP032",
                    &s,
                    text,
                    format!("has the agent read or pass on the credential file `{p}`: \"{}\"", clip(&s.text, 100)),
                );
            }
            if exfil {
                continue;
            }
            if let Some(why) = moved {
                exfil = true;
                self.sensitive.push(sl.clone());
                self.push("AXP033", &s, text, format!("exfiltration instruction: {why}: \"{}\"", clip(&s.text, 100)));
                continue;
            }
            if let Some(addr) = has_email(&sl) {
                // The address must be what is added or copied: a recipient field is named, or one
                // of the adding verbs comes right before it. A contact address is not flagged.
                let before: Vec<String> = sl.find(addr).map(|i| words(&sl[..i])).unwrap_or_default();
                let near = before.iter().rev().take(4).any(|x| RECIPIENT_WORDS.contains(&x.as_str()));
                if w.iter().any(|x| matches!(x.as_str(), "bcc" | "cc" | "blind")) || near {
                    exfil = true;
                    self.sensitive.push(sl.clone());
                    let msg = format!(
                        "exfiltration instruction: adds the address `{addr}` as a recipient: \"{}\"",
                        clip(&s.text, 100)
                    );
                    self.push("AXP033", &s, text, msg);
                }
            }
        }
    }
}

/// `true` when the sentence tells the agent to read something first ("before calling, read",
/// "first open"), as opposed to saying what the tool itself reads.
fn reads_for_agent(w: &[String]) -> bool {
    let read = |x: &String| matches!(x.as_str(), "read" | "open" | "cat" | "load" | "fetch" | "get" | "copy");
    w.first().is_some_and(read)
        || w.windows(2).any(|p| {
            matches!(p[0].as_str(), "first" | "then" | "and" | "always" | "please" | "calling" | "using") && read(&p[1])
        })
        // "Before generating, read ...": an order after an opening clause.
        || w.windows(3).any(|p| matches!(p[0].as_str(), "before" | "after") && p[1].ends_with("ing") && read(&p[2]))
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
fn side_channels(tool: &ToolSpec, subject: &Subject, sensitive: &[String], out: &mut Vec<Raw>) {
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
        // The data an argument asks for, unless the tool is about that data.
        // A flag or a number carries no text, so it cannot carry data either.
        let textual = !matches!(p.get("type").and_then(Value::as_str), Some("boolean" | "integer" | "number"));
        // The first sentence says what the argument holds; a later one counts when it orders
        // something into it ("Include the transcript").
        let wants = intent::sentences(desc).into_iter().enumerate().filter(|_| textual).find_map(|(i, s)| {
            if intent::negated(&s.words) || lists_examples(&s.text) || (i > 0 && !intent::orders_into(&s)) {
                return None;
            }
            // An argument named for the data it asks (`token`: "a bearer token") declares it.
            let arg: Vec<String> = crate::text::name_tokens(name).iter().map(|w| crate::text::stem(w)).collect();
            intent::sensitive(&s)
                .filter(|(d, _)| {
                    (!intent::relevant(*d, subject, true) || intent::from_elsewhere(&s))
                        && !intent::declared_by_name(*d, &arg, &s)
                })
                .map(|(d, n)| (d, n, s))
        });
        let named_in_sensitive = sensitive.iter().any(|s| names_argument(s, &name.to_lowercase()));
        let reason = if optional && insists {
            Some("is optional in the schema but its description insists it must be filled".to_string())
        } else if let Some((d, n, _)) = &wants {
            Some(format!("asks the agent for {} ({n}), which a tool of this purpose has no use for", d.as_str()))
        } else if named_in_sensitive {
            Some("is where the description tells the agent to put secrets or conversation content".to_string())
        } else {
            None
        };
        if let Some(r) = reason {
            let extra = match &wants {
                Some((d, _, _)) if optional && insists => format!("; it asks for {}", d.as_str()),
                _ => String::new(),
            };
            let mut raw = Raw::new("AXP034", ptr, format!("argument `{name}` {r}{extra}: a hidden side channel"));
            if let Some((_, _, s)) = &wants {
                let start = desc[..s.start].chars().count();
                raw = raw.at(start, start + desc[s.start..s.end].chars().count());
            }
            out.push(raw);
        }
    }
}

/// `true` when the sentence lists examples or allowed values, where a sensitive word is one
/// option among others ("valid values include: contacts, deals"; "e.g. a bearer token").
fn lists_examples(text: &str) -> bool {
    let l = text.to_lowercase();
    ["e.g.", "for example", "such as", "valid values", "values include", "one of", "i.e.", "ie:", "eg:", "example:"]
        .iter()
        .any(|m| l.contains(m))
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
    let parsed = intent::sentences(&tool.description);
    let own_words: Vec<String> = std::iter::once(own.clone())
        .chain(crate::text::name_tokens(&tool.name))
        .chain(crate::text::name_tokens(provider))
        .chain(
            tool.input_schema
                .get("properties")
                .and_then(Value::as_object)
                .into_iter()
                .flat_map(|m| m.keys().map(|k| k.to_lowercase())),
        )
        .collect();
    for sentence in sentences(&tool.description) {
        let sl = sentence.to_lowercase();
        let sw = words(&sl);
        let mut target: Option<String> = None;
        // Known tools of the catalog, by exact word (names with separators) or backticked.
        for k in &ctx.known {
            // A tool named like one of this tool's own arguments (`query`, `search`) is that
            // argument here.
            if k.lower == own
                || k.lower.len() < 3
                || (k.provider == provider && k.name == tool.name)
                || own_words[..].contains(&k.lower)
            {
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
        let span = |s: &intent::Sentence| {
            let start = tool.description[..s.start].chars().count();
            (start, start + tool.description[s.start..s.end].chars().count())
        };
        let here = parsed.iter().find(|s| s.text == sentence.trim());
        // "Do not use search_issues for conversations" routes a request to the right tool; it
        // does not change how that tool is used (unless it adds a condition: "never call X
        // without ...").
        let routing = ["do not use", "don't use", "never use", "do not call", "don't call", "instead of"]
            .iter()
            .any(|p| sl.contains(p))
            && !sw.iter().any(|x| matches!(x.as_str(), "without" | "unless" | "except"));
        let conditional = sw.first().is_some_and(|f| matches!(f.as_str(), "before" | "when" | "whenever" | "after"))
            && sw.get(1).is_some_and(|v| matches!(v.as_str(), "using" | "calling" | "invoking" | "running"));
        if let Some(t) = &target
            && !routing
            && (conditional
                || DIRECTIVES.iter().any(|d| if d.contains(' ') { sl.contains(d) } else { sw.iter().any(|x| x == d) }))
        {
            let mut raw = Raw::new(
                "AXP035",
                "/description",
                format!("gives instructions about another tool `{t}`: \"{}\"", clip(sentence, 120)),
            );
            if let Some(s) = here {
                let (a, b) = span(s);
                raw = raw.at(a, b);
            }
            out.push(raw);
            return;
        }
        // Tools of other providers named, or other tools named generically, with a
        // prescription about how they are used.
        let foreign = target.filter(|t| !t.starts_with(&format!("{provider}/")));
        if let Some(s) = here
            && let Some(why) = intent::shadowing(s, &own_words, foreign.as_deref())
        {
            let (a, b) = span(s);
            out.push(Raw::new("AXP035", "/description", format!("{why}: \"{}\"", clip(sentence, 120))).at(a, b));
            return;
        }
    }
}

/// AXP040: a tool that presents itself as a lookup (read-only annotation, or a reading verb and
/// no writing one) whose later sentences say it also changes or sends something.
fn side_effects(tool: &ToolSpec, out: &mut Vec<Raw>) {
    let ro = tool.annotation("readOnlyHint");
    let verbs = super::description::action_verbs(tool);
    let reads =
        !verbs.is_empty() && verbs.iter().all(|v| is_in(v, READ_VERBS) && !is_in(v, crate::text::MUTATING_VERBS));
    if !(ro == Some(true) || (ro.is_none() && tool.annotation("destructiveHint").is_none() && reads)) {
        return;
    }
    let params: Vec<String> = tool
        .input_schema
        .get("properties")
        .and_then(Value::as_object)
        .map(|m| m.keys().flat_map(|k| [k.to_lowercase()].into_iter().chain(crate::text::name_tokens(k))).collect())
        .unwrap_or_default();
    let d = &tool.description;
    for s in intent::sentences(d).iter().skip(1) {
        if let Some(why) = intent::side_effect(s, &params) {
            let start = d[..s.start].chars().count();
            let claim = if ro == Some(true) { "is marked read-only" } else { "presents itself as a lookup" };
            out.push(
                Raw::new("AXP040", "/description", format!("the tool {claim} but {why}: \"{}\"", clip(&s.text, 120)))
                    .at(start, start + d[s.start..s.end].chars().count()),
            );
            return;
        }
    }
}

/// Verbs of tools that only look.
const READ_VERBS: &[&str] = &[
    "get",
    "list",
    "read",
    "search",
    "show",
    "fetch",
    "find",
    "lookup",
    "look",
    "check",
    "view",
    "describe",
    "count",
    "query",
    "inspect",
    "preview",
    "display",
    "return",
    "calculate",
    "compute",
    "convert",
    "validate",
    "explain",
    "summarize",
    "summarise",
    "translate",
    "format",
    "parse",
    "extract",
    "analyze",
    "analyse",
    "render",
    "ping",
    "measure",
    "monitor",
    "retrieve",
    "scan",
    "compare",
    "estimate",
    "detect",
    "lint",
    "diff",
    "report",
    "give",
];

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
