//! The crate's one integration test binary: the tokenizer against the reference
//! implementation's output, and the shipped model's behaviour.

mod suite;
