//! Text helpers the checks share: tokenising descriptions and names, a light stemmer, the verb
//! and stop-word lexicons, the token-set similarity used for near-duplicates, and the table of
//! hidden Unicode code points. Pure functions only; no rule decides anything here.
//!
//! The Unicode table is hand-written rather than taken from a crate: the set that matters
//! (Default_Ignorable_Code_Point, the bidi controls, tags, C0/C1 controls) is small and stable,
//! we need a readable name for each code point in the finding, and the crates that carry the
//! property (unicode-security, unicode-properties) carry neither names nor the emoji/RTL context
//! exceptions below.

use std::collections::BTreeSet;

/// Lower-cased alphanumeric words of `s` (apostrophes kept inside words).
pub(crate) fn words(s: &str) -> Vec<String> {
    s.split(|c: char| !(c.is_alphanumeric() || c == '\''))
        .map(|w| w.trim_matches('\'').to_lowercase())
        .filter(|w| !w.is_empty())
        .collect()
}

/// The words of a tool or argument name: `getUserById`, `get-user_by.id` -> get, user, by, id.
pub(crate) fn name_tokens(name: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut prev_lower = false;
    for c in name.chars() {
        if !c.is_alphanumeric() {
            if !cur.is_empty() {
                out.push(std::mem::take(&mut cur));
            }
            prev_lower = false;
            continue;
        }
        if c.is_uppercase() && prev_lower && !cur.is_empty() {
            out.push(std::mem::take(&mut cur));
        }
        prev_lower = c.is_lowercase() || c.is_ascii_digit();
        cur.extend(c.to_lowercase());
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// A deliberately light suffix stripper (plural, 3rd person, -ing, -ed) so that "reads",
/// "reading" and "read" meet. A full Porter stemmer would over-merge short technical words.
pub(crate) fn stem(w: &str) -> String {
    let w = w.trim_end_matches('\'');
    let n = w.chars().count();
    if n <= 3 {
        return w.to_string();
    }
    for (suf, rep) in [
        ("ies", "y"),
        ("sses", "ss"),
        ("ches", "ch"),
        ("shes", "sh"),
        ("xes", "x"),
        ("ing", ""),
        ("ed", ""),
        ("es", "e"),
        ("s", ""),
    ] {
        if let Some(base) = w.strip_suffix(suf)
            && base.chars().count() >= 3
            && !w.ends_with("ss")
        {
            {
                let mut b = base.to_string();
                // "echoes" -> "echo", but "creates" -> "create".
                let keep_bare = suf == "es" && (base.ends_with('o') || base.ends_with('z'));
                if !keep_bare {
                    b.push_str(rep);
                }
                // "writing" -> "writ" -> "write", "creat" -> "create": restore a dropped e.
                if (suf == "ing" || suf == "ed") && !VERBS.contains(&b.as_str()) {
                    let with_e = format!("{b}e");
                    if VERBS.contains(&with_e.as_str()) {
                        return with_e;
                    }
                    // "running" -> "runn" -> "run"
                    let mut chars: Vec<char> = b.chars().collect();
                    if chars.len() >= 2 && chars[chars.len() - 1] == chars[chars.len() - 2] {
                        chars.pop();
                        let undoubled: String = chars.into_iter().collect();
                        if VERBS.contains(&undoubled.as_str()) {
                            return undoubled;
                        }
                    }
                }
                return b;
            }
        }
    }
    w.to_string()
}

/// Function words ignored by similarity, vagueness and restates-name checks. Also words that
/// every tool description shares ("tool", "use") and so carry no distinguishing meaning.
pub(crate) const STOPWORDS: &[&str] = &[
    "a",
    "an",
    "the",
    "and",
    "or",
    "of",
    "to",
    "in",
    "on",
    "for",
    "with",
    "by",
    "from",
    "at",
    "as",
    "is",
    "are",
    "be",
    "been",
    "it",
    "its",
    "this",
    "that",
    "these",
    "those",
    "into",
    "if",
    "then",
    "than",
    "can",
    "will",
    "may",
    "should",
    "must",
    "not",
    "no",
    "you",
    "your",
    "we",
    "our",
    "i",
    "me",
    "my",
    "all",
    "any",
    "each",
    "which",
    "when",
    "what",
    "who",
    "how",
    "use",
    "used",
    "using",
    "tool",
    "tools",
    "function",
    "call",
    "called",
    "given",
    "specified",
    "provided",
    "also",
    "only",
    "just",
    "via",
    "per",
    "so",
    "do",
    "does",
    "there",
    "their",
    "they",
    "them",
    "up",
    "out",
    "about",
    "both",
    "either",
    "one",
    "such",
    "other",
    "more",
    "most",
    "some",
    "has",
    "have",
    "was",
    "were",
    "but",
    "e",
    "g",
    "eg",
    "ie",
    "etc",
];

/// Words that say nothing about what a tool does.
pub(crate) const VAGUE: &[&str] = &[
    "handle",
    "manage",
    "process",
    "various",
    "stuff",
    "thing",
    "data",
    "helper",
    "utility",
    "util",
    "misc",
    "miscellaneous",
    "general",
    "generic",
    "etc",
    "work",
    "operation",
    "perform",
    "info",
    "information",
    "something",
    "anything",
    "everything",
    "whatever",
    "deal",
    "related",
    "certain",
    "several",
    "action",
    "task",
    "item",
    "object",
    "do",
    "does",
    "some",
];

/// Action verbs (base forms) that make a first sentence state a purpose. Matching goes through
/// [`stem`], so "returns", "listing", "created" all match.
pub(crate) const VERBS: &[&str] = &[
    "add",
    "analyze",
    "analyse",
    "append",
    "apply",
    "approve",
    "archive",
    "assign",
    "attach",
    "authenticate",
    "build",
    "calculate",
    "call",
    "cancel",
    "change",
    "check",
    "checkout",
    "clear",
    "clone",
    "close",
    "commit",
    "compare",
    "compile",
    "compress",
    "compute",
    "configure",
    "connect",
    "convert",
    "copy",
    "count",
    "create",
    "decode",
    "decompress",
    "decrypt",
    "delete",
    "demonstrate",
    "deploy",
    "describe",
    "detect",
    "diff",
    "disable",
    "display",
    "download",
    "draft",
    "drop",
    "echo",
    "edit",
    "enable",
    "encode",
    "encrypt",
    "ensure",
    "enumerate",
    "estimate",
    "evaluate",
    "execute",
    "explain",
    "export",
    "extract",
    "fetch",
    "filter",
    "find",
    "fix",
    "format",
    "forward",
    "generate",
    "get",
    "give",
    "greet",
    "group",
    "import",
    "index",
    "insert",
    "inspect",
    "install",
    "invite",
    "kill",
    "launch",
    "list",
    "load",
    "locate",
    "log",
    "look",
    "lookup",
    "make",
    "map",
    "mark",
    "merge",
    "modify",
    "move",
    "navigate",
    "notify",
    "open",
    "optimize",
    "order",
    "overwrite",
    "parse",
    "patch",
    "pause",
    "ping",
    "plan",
    "play",
    "post",
    "predict",
    "prepare",
    "preview",
    "print",
    "produce",
    "provide",
    "publish",
    "pull",
    "purge",
    "push",
    "query",
    "queue",
    "rank",
    "read",
    "rebase",
    "record",
    "redact",
    "refresh",
    "register",
    "reject",
    "reload",
    "remove",
    "rename",
    "render",
    "reply",
    "report",
    "request",
    "reset",
    "resize",
    "resolve",
    "restart",
    "restore",
    "resume",
    "retrieve",
    "return",
    "revert",
    "review",
    "rotate",
    "run",
    "save",
    "scan",
    "schedule",
    "search",
    "select",
    "send",
    "set",
    "share",
    "show",
    "simulate",
    "sort",
    "split",
    "start",
    "stop",
    "store",
    "stream",
    "submit",
    "subscribe",
    "summarize",
    "summarise",
    "switch",
    "sync",
    "tag",
    "take",
    "tell",
    "test",
    "toggle",
    "track",
    "transcribe",
    "transform",
    "translate",
    "trigger",
    "truncate",
    "undo",
    "unstage",
    "unsubscribe",
    "update",
    "upload",
    "upsert",
    "validate",
    "verify",
    "view",
    "watch",
    "write",
    "compose",
    "crawl",
    "scrape",
    "lint",
    "measure",
    "monitor",
    "obtain",
    "recommend",
    "resolve",
    "sum",
    "multiply",
    "divide",
    "subtract",
    "lock",
    "unlock",
    "grant",
    "revoke",
    "invoke",
    "capture",
    "click",
    "type",
    "fill",
    "hover",
    "screenshot",
    "evaluate",
    "ask",
    "answer",
    "respond",
    "book",
    "buy",
    "sell",
    "pay",
    "charge",
    "refund",
    "ship",
    "rate",
];

/// Verbs whose tool changes state outside itself (AXP009 / AXP010).
pub(crate) const MUTATING_VERBS: &[&str] = &[
    "write",
    "delete",
    "remove",
    "send",
    "create",
    "update",
    "drop",
    "kill",
    "reset",
    "push",
    "commit",
    "move",
    "rename",
    "edit",
    "post",
    "upload",
    "insert",
    "execute",
    "exec",
    "run",
    "install",
    "uninstall",
    "publish",
    "deploy",
    "purge",
    "truncate",
    "destroy",
    "modify",
    "overwrite",
    "set",
    "patch",
    "upsert",
    "email",
    "mail",
    "transfer",
    "pay",
    "charge",
    "refund",
    "merge",
    "rebase",
    "revert",
    "approve",
    "reject",
    "cancel",
    "archive",
    "shutdown",
    "restart",
];

/// Verbs whose tool destroys or overwrites data (AXP010 with destructiveHint=false).
pub(crate) const DESTRUCTIVE_VERBS: &[&str] =
    &["delete", "remove", "drop", "purge", "truncate", "destroy", "overwrite", "wipe", "erase", "reset", "kill"];

/// `true` when `word` (any inflection) is one of `list`.
pub(crate) fn is_in(word: &str, list: &[&str]) -> bool {
    let w = word.to_lowercase();
    list.contains(&w.as_str()) || list.contains(&stem(&w).as_str())
}

/// The first sentence of a description: up to the first `.`, `!` or `?` followed by
/// whitespace (or a blank line), trimmed. Abbreviations like "e.g." are not split on.
pub(crate) fn first_sentence(desc: &str) -> &str {
    let s = desc.trim_start();
    let bytes = s.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if b == b'\n' && bytes.get(i + 1) == Some(&b'\n') {
            return s[..i].trim_end();
        }
        if matches!(b, b'.' | b'!' | b'?') && bytes.get(i + 1).is_none_or(|n| n.is_ascii_whitespace()) {
            let before = &s[..i];
            let last_word = before.rsplit(|c: char| c.is_whitespace()).next().unwrap_or("");
            let abbrev =
                ["e.g", "i.e", "etc", "vs", "approx", "incl"].iter().any(|a| last_word.eq_ignore_ascii_case(a));
            if !abbrev {
                return s[..=i].trim_end();
            }
        }
        i += 1;
    }
    s.trim_end()
}

/// The content words of `s`: stemmed, without stop words.
pub(crate) fn content_set(s: &str) -> BTreeSet<String> {
    words(s)
        .into_iter()
        .filter(|w| !STOPWORDS.contains(&w.as_str()))
        .map(|w| stem(&w))
        .filter(|w| !STOPWORDS.contains(&w.as_str()))
        .collect()
}

/// Token-set Jaccard similarity |A∩B| / |A∪B| (0 for two empty sets).
pub(crate) fn jaccard(a: &BTreeSet<String>, b: &BTreeSet<String>) -> f64 {
    // One pass: the union's size follows from the intersection's.
    let inter = a.intersection(b).count();
    let union = a.len() + b.len() - inter;
    if union == 0 {
        return 0.0;
    }
    inter as f64 / union as f64
}

/// What a hidden code point is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Hidden {
    /// Default-ignorable / zero-width / variation selector / control code.
    Invisible,
    /// A bidi override or isolate: always suspicious.
    BidiControl,
    /// A bidi mark (LRM, RLM, ALM): fine inside right-to-left text.
    BidiMark,
    /// U+E0000..U+E007F.
    Tag,
}

/// Classifies one code point, or `None` for ordinary text (including `\n`, `\r`, `\t`).
pub(crate) fn classify(c: char) -> Option<Hidden> {
    let u = c as u32;
    Some(match u {
        0x09 | 0x0A | 0x0D => return None,
        0x00..=0x1F | 0x7F..=0x9F => Hidden::Invisible,
        0x200E | 0x200F | 0x061C => Hidden::BidiMark,
        0x202A..=0x202E | 0x2066..=0x2069 => Hidden::BidiControl,
        0xE0000..=0xE007F => Hidden::Tag,
        0x00AD
        | 0x034F
        | 0x115F
        | 0x1160
        | 0x17B4
        | 0x17B5
        | 0x180B..=0x180F
        | 0x200B..=0x200D
        | 0x2060..=0x2065
        | 0x206A..=0x206F
        | 0x3164
        | 0xFE00..=0xFE0F
        | 0xFEFF
        | 0xFFA0
        | 0xFFF0..=0xFFF8
        | 0x1BCA0..=0x1BCA3
        | 0x1D173..=0x1D17A
        | 0xE0080..=0xE0FFF => Hidden::Invisible,
        _ => return None,
    })
}

/// `U+200B ZERO WIDTH SPACE`: a readable name for a hidden code point.
pub(crate) fn describe_char(c: char) -> String {
    let u = c as u32;
    let name = match u {
        0x00..=0x1F | 0x7F..=0x9F => match u {
            0x1B => "ESCAPE (ANSI escape sequence)".to_string(),
            0x00 => "NULL".to_string(),
            0x08 => "BACKSPACE".to_string(),
            0x0B => "LINE TABULATION".to_string(),
            0x0C => "FORM FEED".to_string(),
            0x85 => "NEXT LINE".to_string(),
            0x9B => "CONTROL SEQUENCE INTRODUCER".to_string(),
            _ => "CONTROL CHARACTER".to_string(),
        },
        0x00AD => "SOFT HYPHEN".into(),
        0x034F => "COMBINING GRAPHEME JOINER".into(),
        0x061C => "ARABIC LETTER MARK".into(),
        0x115F => "HANGUL CHOSEONG FILLER".into(),
        0x1160 => "HANGUL JUNGSEONG FILLER".into(),
        0x17B4 => "KHMER VOWEL INHERENT AQ".into(),
        0x17B5 => "KHMER VOWEL INHERENT AA".into(),
        0x180B..=0x180D | 0x180F => "MONGOLIAN FREE VARIATION SELECTOR".into(),
        0x180E => "MONGOLIAN VOWEL SEPARATOR".into(),
        0x200B => "ZERO WIDTH SPACE".into(),
        0x200C => "ZERO WIDTH NON-JOINER".into(),
        0x200D => "ZERO WIDTH JOINER".into(),
        0x200E => "LEFT-TO-RIGHT MARK".into(),
        0x200F => "RIGHT-TO-LEFT MARK".into(),
        0x202A => "LEFT-TO-RIGHT EMBEDDING".into(),
        0x202B => "RIGHT-TO-LEFT EMBEDDING".into(),
        0x202C => "POP DIRECTIONAL FORMATTING".into(),
        0x202D => "LEFT-TO-RIGHT OVERRIDE".into(),
        0x202E => "RIGHT-TO-LEFT OVERRIDE".into(),
        0x2060 => "WORD JOINER".into(),
        0x2061 => "FUNCTION APPLICATION".into(),
        0x2062 => "INVISIBLE TIMES".into(),
        0x2063 => "INVISIBLE SEPARATOR".into(),
        0x2064 => "INVISIBLE PLUS".into(),
        0x2066 => "LEFT-TO-RIGHT ISOLATE".into(),
        0x2067 => "RIGHT-TO-LEFT ISOLATE".into(),
        0x2068 => "FIRST STRONG ISOLATE".into(),
        0x2069 => "POP DIRECTIONAL ISOLATE".into(),
        0x3164 => "HANGUL FILLER".into(),
        0xFE00..=0xFE0F => format!("VARIATION SELECTOR-{}", u - 0xFE00 + 1),
        0xFEFF => "ZERO WIDTH NO-BREAK SPACE (BOM)".into(),
        0xFFA0 => "HALFWIDTH HANGUL FILLER".into(),
        0xE0001 => "LANGUAGE TAG".into(),
        0xE0020..=0xE007E => {
            format!("TAG {}", char::from_u32(u - 0xE0000).map(|a| format!("'{a}'")).unwrap_or_default())
        }
        0xE007F => "CANCEL TAG".into(),
        0xE0100..=0xE01EF => format!("VARIATION SELECTOR-{}", u - 0xE0100 + 17),
        _ => "INVISIBLE FORMAT CHARACTER".into(),
    };
    format!("U+{u:04X} {name}")
}

/// `true` for letters of right-to-left scripts (Hebrew, Arabic, Syriac, Thaana, NKo, ...).
pub(crate) fn is_rtl_letter(c: char) -> bool {
    matches!(c as u32, 0x0590..=0x08FF | 0xFB1D..=0xFDFF | 0xFE70..=0xFEFF | 0x10800..=0x10FFF | 0x1E800..=0x1EFFF)
        && c.is_alphabetic()
}

/// `true` for pictographs and symbols that take emoji variation selectors and joiners.
pub(crate) fn is_emoji_like(c: char) -> bool {
    let u = c as u32;
    matches!(u, 0x2190..=0x2BFF | 0x1F000..=0x1FAFF | 0x3030 | 0x303D | 0x3297 | 0x3299 | 0x00A9 | 0x00AE | 0x2122 | 0x20E3)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn tokenises_names_and_stems() {
        assert_eq!(name_tokens("getUserById"), ["get", "user", "by", "id"]);
        assert_eq!(name_tokens("git_diff-staged"), ["git", "diff", "staged"]);
        assert_eq!(stem("returns"), "return");
        assert_eq!(stem("writing"), "write");
        assert_eq!(stem("running"), "run");
        assert_eq!(stem("lists"), "list");
        assert_eq!(stem("queries"), "query");
        assert_eq!(stem("process"), "process");
        assert!(is_in("Creates", VERBS));
    }

    #[test]
    fn first_sentence_skips_abbreviations() {
        assert_eq!(first_sentence("Reads a file, e.g. a log. More."), "Reads a file, e.g. a log.");
        assert_eq!(first_sentence("No stop here"), "No stop here");
        assert_eq!(first_sentence("v1.2 is fine. Next"), "v1.2 is fine.");
    }

    #[test]
    fn jaccard_is_a_measure() {
        let a = content_set("Echoes back the input string");
        let b = content_set("Use this tool to echo back a string.");
        assert!((jaccard(&a, &b) - 0.75).abs() < 1e-9, "{a:?} {b:?}");
        assert_eq!(jaccard(&a, &a), 1.0);
    }
}
