//! The shipped model: it loads, its vectors are unit length, texts that mean the same are
//! closer than texts that do not, identifiers read as their words, and unknown text is zero.

use axp_embed::{Model, dot};

fn model() -> &'static Model {
    Model::builtin().expect("the shipped model loads")
}

fn cos(a: &str, b: &str) -> f32 {
    let m = model();
    dot(&m.embed(a), &m.embed(b))
}

#[test]
fn vectors_are_unit_length() {
    let m = model();
    assert!(m.dim() >= 64);
    let v = m.embed("Read the complete contents of a file");
    assert_eq!(v.len(), m.dim());
    assert!((dot(&v, &v) - 1.0).abs() < 1e-4);
}

#[test]
fn paraphrases_are_closer_than_unrelated_text() {
    for (a, b, other) in [
        (
            "show me what's inside notes.md",
            "Read the complete contents of a file as text",
            "Scale a Kubernetes deployment",
        ),
        (
            "how high above sea level is Denver",
            "Get elevation data for locations on the earth",
            "Records changes to the repository",
        ),
        ("kill the hung process", "Terminate a running process by PID", "Generate a pie chart"),
        ("send a note to the team channel", "Post a new message to a Slack channel", "Convert time between timezones"),
    ] {
        let (near, far) = (cos(a, b), cos(a, other));
        assert!(near > far + 0.05, "{a:?}: {near} to {b:?}, {far} to {other:?}");
    }
}

#[test]
fn identifiers_read_as_words() {
    let m = model();
    assert_eq!(m.tokens("get_current_time"), m.tokens("get current time"));
    assert_eq!(m.tokens("getCurrentTime"), m.tokens("get current time"));
    assert!(cos("listDirectoryWithSizes", "list directory with sizes") > 0.999);
}

#[test]
fn text_without_known_tokens_is_zero() {
    let m = model();
    let mut v = vec![1.0; m.dim()];
    assert!(!m.embed_into("", &mut v));
    assert!(v.iter().all(|x| *x == 0.0));
    assert!(m.tokens("   ").is_empty());
}

#[test]
fn a_bad_model_file_is_an_error() {
    assert!(matches!(Model::from_parts(b"not safetensors", "a\nb\n"), Err(axp_embed::Error::Format(_))));
}
