//! The BERT uncased tokenizer the model was distilled with, reimplemented: clean-up, identifier
//! splitting, lower-casing and accent stripping, splitting on whitespace and punctuation, then
//! WordPiece (greedy longest match, `##` continuations). Its output is checked against the
//! reference implementation's on a fixed set of texts (`tests/suite/wordpiece.rs`).

use std::collections::HashMap;

use unicode_normalization::UnicodeNormalization;
use unicode_normalization::char::is_combining_mark;

/// Words longer than this (in characters) become the unknown token, as in BERT.
const MAX_WORD_CHARS: usize = 100;

/// A WordPiece vocabulary: token text to row.
#[derive(Debug, Clone)]
pub struct WordPiece {
    ids: HashMap<String, u32>,
    unk: Option<u32>,
}

impl WordPiece {
    /// One token a line, the line number being its row (BERT's `vocab.txt`).
    pub fn from_lines(text: &str) -> Self {
        let ids: HashMap<String, u32> =
            text.lines().enumerate().map(|(i, t)| (t.to_string(), u32::try_from(i).unwrap_or(u32::MAX))).collect();
        let unk = ids.get("[UNK]").copied();
        Self { ids, unk }
    }

    pub fn len(&self) -> usize {
        self.ids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// The rows of `text`'s tokens, in order, with the unknown token where BERT puts it and
    /// without `[CLS]`/`[SEP]`.
    pub fn encode(&self, text: &str, out: &mut Vec<u32>) {
        let mut word = String::new();
        let mut piece = String::new();
        for w in pre_tokenize(text) {
            word.clear();
            word.push_str(&w);
            self.word_pieces(&word, &mut piece, out);
        }
    }

    fn word_pieces(&self, word: &str, piece: &mut String, out: &mut Vec<u32>) {
        let chars: Vec<(usize, char)> = word.char_indices().collect();
        if chars.len() > MAX_WORD_CHARS {
            out.extend(self.unk);
            return;
        }
        let mark = out.len();
        let mut start = 0;
        while start < chars.len() {
            let mut end = chars.len();
            let mut found = None;
            while start < end {
                piece.clear();
                if start > 0 {
                    piece.push_str("##");
                }
                let from = chars[start].0;
                let to = chars.get(end).map_or(word.len(), |c| c.0);
                piece.push_str(&word[from..to]);
                if let Some(&id) = self.ids.get(piece.as_str()) {
                    found = Some(id);
                    break;
                }
                end -= 1;
            }
            match found {
                Some(id) => out.push(id),
                None => {
                    // A word that cannot be covered is one unknown token, whatever was matched.
                    out.truncate(mark);
                    out.extend(self.unk);
                    return;
                }
            }
            start = end;
        }
    }
}

/// Breaks identifiers apart before BERT's own splitting, so that tool and parameter names read
/// as words: `getCurrentTime` and `get_current_time` both become `get current time`, and
/// `HTTPServer` becomes `HTTP Server`.
pub fn split_identifiers(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len() + 8);
    for (i, &c) in chars.iter().enumerate() {
        if c == '_' {
            out.push(' ');
            continue;
        }
        if c.is_uppercase() && i > 0 {
            let prev = chars[i - 1];
            // An acronym ends before a capital that starts a word of two or more lower-case
            // letters (`HTTPServer`), not before a plural's `s` (`URLs`, `IDs`).
            let word_follows = chars.get(i + 1).is_some_and(|n| n.is_lowercase())
                && chars.get(i + 2).is_some_and(|n| n.is_lowercase());
            if prev.is_lowercase() || prev.is_ascii_digit() || (prev.is_uppercase() && word_follows) {
                out.push(' ');
            }
        }
        out.push(c);
    }
    out
}

/// BERT's basic tokenizer (uncased): words and single punctuation marks.
fn pre_tokenize(text: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let flush = |cur: &mut String, words: &mut Vec<String>| {
        if !cur.is_empty() {
            words.push(std::mem::take(cur));
        }
    };
    for c in split_identifiers(text).chars() {
        if c == '\0' || c == '\u{fffd}' || (c.is_control() && !c.is_whitespace()) {
            continue;
        }
        if c.is_whitespace() {
            flush(&mut cur, &mut words);
        } else if is_cjk(c) || is_punctuation(c) {
            flush(&mut cur, &mut words);
            words.push(fold(c));
        } else if c.is_ascii() {
            cur.push(c.to_ascii_lowercase());
        } else {
            cur.push_str(&fold(c));
        }
    }
    flush(&mut cur, &mut words);
    words
}

/// Lower-case, then decompose and drop combining marks (`é` → `e`), as the uncased model's
/// tokenizer does.
fn fold(c: char) -> String {
    c.to_lowercase().collect::<String>().nfd().filter(|c| !is_combining_mark(*c)).collect()
}

/// BERT treats every ASCII non-alphanumeric symbol as punctuation, and otherwise the Unicode
/// punctuation classes; the second is approximated by the general punctuation blocks.
fn is_punctuation(c: char) -> bool {
    if c.is_ascii() {
        return c.is_ascii_punctuation();
    }
    matches!(c as u32, 0x2010..=0x2027 | 0x2030..=0x205E | 0x3000..=0x303F | 0xFF01..=0xFF0F | 0xFF1A..=0xFF20 | 0xA1 | 0xA7 | 0xAB | 0xB6 | 0xB7 | 0xBB | 0xBF)
}

fn is_cjk(c: char) -> bool {
    matches!(c as u32, 0x4E00..=0x9FFF | 0x3400..=0x4DBF | 0x20000..=0x2A6DF | 0x2A700..=0x2B73F | 0x2B740..=0x2B81F | 0x2B820..=0x2CEAF | 0xF900..=0xFAFF | 0x2F800..=0x2FA1F)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers_read_as_words() {
        assert_eq!(split_identifiers("getCurrentTime"), "get Current Time");
        assert_eq!(split_identifiers("get_current_time"), "get current time");
        assert_eq!(split_identifiers("HTTPServer"), "HTTP Server");
        assert_eq!(split_identifiers("page2Size"), "page2 Size");
        assert_eq!(split_identifiers("the URLs and IDs of APIKeys"), "the URLs and IDs of API Keys");
    }

    #[test]
    fn word_pieces_take_the_longest_match() {
        let v = WordPiece::from_lines("[UNK]\nplay\n##ing\n##s\nun\n##play\n.\n");
        let mut out = Vec::new();
        v.encode("Playing unplays. zzz", &mut out);
        assert_eq!(out, vec![1, 2, 4, 5, 3, 6, 0]);
    }
}
