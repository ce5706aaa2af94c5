//! The WordPiece tokenizer gives the token ids the reference tokenizer gave the same texts
//! (`tests/fixtures/wordpiece.jsonl`, written by `distill/fixtures.py` with the `tokenizers`
//! package and the model's own tokenizer.json).

use axp_embed::WordPiece;
use serde_json::Value;

#[test]
fn matches_the_reference_tokenizer() {
    let vocab = WordPiece::from_lines(include_str!("../../model/vocab.txt"));
    let fixtures = include_str!("../fixtures/wordpiece.jsonl");
    let mut checked = 0;
    for line in fixtures.lines() {
        let v: Value = serde_json::from_str(line).unwrap();
        let text = v["text"].as_str().unwrap();
        let want: Vec<u32> = v["ids"].as_array().unwrap().iter().map(|i| i.as_u64().unwrap() as u32).collect();
        let mut got = Vec::new();
        vocab.encode(text, &mut got);
        assert_eq!(got, want, "{text:?}");
        checked += 1;
    }
    assert!(checked >= 15, "the fixture holds {checked} texts");
}
