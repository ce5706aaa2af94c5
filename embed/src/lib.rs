//! Text to a normalised vector, with a static embedding model: a WordPiece tokenizer, one
//! row of a table per token, the mean of the rows, L2-normalised. The table was distilled from
//! a sentence transformer (all-MiniLM-L6-v2) and ships inside the crate (`model/`), so
//! embedding needs no download, no runtime and no thread: a few microseconds a sentence. The
//! crate knows nothing about what the text is; similarity of two texts is the dot product of
//! their vectors ([`dot`]).

mod wordpiece;

use std::sync::OnceLock;

use half::f16;
use safetensors::{Dtype, SafeTensors};

pub use wordpiece::{WordPiece, split_identifiers};

/// The model in `model/`: `static.safetensors` holds `embeddings`, f16 `[vocabulary, dim]`,
/// and `vocab.txt` its tokens, one a line in row order.
const BUILTIN_TABLE: &[u8] = include_bytes!("../model/static.safetensors");
const BUILTIN_VOCAB: &str = include_str!("../model/vocab.txt");

/// Why a model could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("the model file is not valid safetensors: {0}")]
    Format(#[from] safetensors::SafeTensorError),
    #[error("the model file has no `embeddings` tensor")]
    NoTable,
    #[error("`embeddings` must be f16 with two dimensions; it is {dtype:?} {shape:?}")]
    Shape { dtype: Dtype, shape: Vec<usize> },
    #[error("the vocabulary has {vocab} tokens but the table has {rows} rows")]
    VocabMismatch { vocab: usize, rows: usize },
}

/// A static embedding model: a vocabulary and a table with one row per token.
#[derive(Debug)]
pub struct Model {
    vocab: WordPiece,
    /// `rows × dim` little-endian f16 values, row-major, as the safetensors file holds them.
    /// The built-in model borrows them from the binary, so only the rows a catalog's words use
    /// are ever paged in; a copy would add the whole table (23 MB) to every gateway's memory.
    table: Table,
    dim: usize,
    /// Rows never pooled: the special tokens (`[UNK]`, `[CLS]`, …), whose rows say nothing
    /// about the text.
    special: Vec<bool>,
}

impl Model {
    /// A model from its safetensors table and its vocabulary (one token a line).
    pub fn from_parts(table: &[u8], vocab: &str) -> Result<Self, Error> {
        let (model, rows) = Self::read(table, vocab)?;
        Ok(Self { table: Table::Owned(rows.to_vec()), ..model })
    }

    /// The model shipped in this crate, loaded once (about 20 ms) on first use. Its table stays
    /// in the binary's read-only data (see [`Model::table`]).
    pub fn builtin() -> Result<&'static Model, &'static Error> {
        static MODEL: OnceLock<Result<Model, Error>> = OnceLock::new();
        MODEL
            .get_or_init(|| {
                let (model, rows) = Self::read(BUILTIN_TABLE, BUILTIN_VOCAB)?;
                Ok(Self { table: Table::Static(rows), ..model })
            })
            .as_ref()
    }

    /// Checks a table and a vocabulary and returns the model (with an empty table) and the
    /// table's rows as bytes.
    fn read<'a>(table: &'a [u8], vocab: &str) -> Result<(Self, &'a [u8]), Error> {
        let st = SafeTensors::deserialize(table)?;
        let t = st.tensor("embeddings").map_err(|_| Error::NoTable)?;
        let shape = t.shape().to_vec();
        if t.dtype() != Dtype::F16 || shape.len() != 2 {
            return Err(Error::Shape { dtype: t.dtype(), shape });
        }
        let (rows, dim) = (shape[0], shape[1]);
        let words = WordPiece::from_lines(vocab);
        if words.len() != rows {
            return Err(Error::VocabMismatch { vocab: words.len(), rows });
        }
        let special = vocab.lines().map(|l| l.starts_with('[') && l.ends_with(']')).collect();
        Ok((Self { vocab: words, table: Table::Owned(Vec::new()), dim, special }, t.data()))
    }

    /// Length of every vector this model returns.
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// The token rows of `text` (special tokens left out), in order.
    pub fn tokens(&self, text: &str) -> Vec<u32> {
        let mut ids = Vec::new();
        self.vocab.encode(text, &mut ids);
        ids.retain(|&i| !self.special.get(i as usize).copied().unwrap_or(true));
        ids
    }

    /// The L2-normalised mean of the rows of `text`'s tokens; all zeros when no token of the
    /// text is known (so its similarity to anything is 0).
    pub fn embed(&self, text: &str) -> Vec<f32> {
        let mut out = vec![0.0; self.dim];
        self.embed_into(text, &mut out);
        out
    }

    /// [`Model::embed`] into a buffer of [`Model::dim`] values; false when no token is known.
    pub fn embed_into(&self, text: &str, out: &mut [f32]) -> bool {
        out.fill(0.0);
        let ids = self.tokens(text);
        let bytes = self.table.bytes();
        for &id in &ids {
            let start = id as usize * self.dim * 2;
            let row = &bytes[start..start + self.dim * 2];
            for (o, b) in out.iter_mut().zip(row.chunks_exact(2)) {
                *o += f16::from_le_bytes([b[0], b[1]]).to_f32();
            }
        }
        normalize(out)
    }
}

/// A model's rows: borrowed from the binary, or owned.
#[derive(Debug)]
enum Table {
    Static(&'static [u8]),
    Owned(Vec<u8>),
}

impl Table {
    fn bytes(&self) -> &[u8] {
        match self {
            Table::Static(b) => b,
            Table::Owned(b) => b,
        }
    }
}

/// Scales `v` to unit length; false (and `v` left as zeros) when it is zero.
pub fn normalize(v: &mut [f32]) -> bool {
    let norm = dot(v, v).sqrt();
    if norm <= f32::EPSILON {
        v.fill(0.0);
        return false;
    }
    for x in v.iter_mut() {
        *x /= norm;
    }
    true
}

/// The dot product of two vectors of one length (their cosine when both are normalised).
/// Eight independent sums, so the compiler can keep them in vector registers.
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0.0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ca.remainder().iter().zip(cb.remainder()).map(|(x, y)| x * y).sum();
    for (x, y) in ca.zip(cb) {
        for i in 0..8 {
            acc[i] += x[i] * y[i];
        }
    }
    acc.iter().sum::<f32>() + tail
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dot_matches_the_plain_sum() {
        let a: Vec<f32> = (0..19).map(|i| i as f32 * 0.5).collect();
        let b: Vec<f32> = (0..19).map(|i| 1.0 - i as f32 * 0.1).collect();
        let plain: f32 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
        assert!((dot(&a, &b) - plain).abs() < 1e-4);
    }

    #[test]
    fn zero_vectors_stay_zero() {
        let mut v = vec![0.0; 4];
        assert!(!normalize(&mut v));
        assert_eq!(v, vec![0.0; 4]);
        let mut v = vec![3.0, 4.0];
        assert!(normalize(&mut v));
        assert_eq!(v, vec![0.6, 0.8]);
    }
}
