//! [`Limits`]: the bounds that keep a hostile or broken peer from growing memory or the stack.

/// Bounds the [`Decoder`](crate::Decoder) enforces on every frame.
///
/// A frame that breaks a limit is an error as soon as the offending header (or line byte) has
/// arrived: the decoder never waits for, buffers, or reserves memory for what a limit forbids.
/// Memory the decoder itself holds for a partial frame grows only with the bytes that have
/// arrived, never with a declared length or count.
///
/// # Examples
/// ```
/// use redlock_resp::{Decoder, Limits};
/// let limits = Limits::new().with_max_depth(4).with_max_bulk_len(1 << 20);
/// assert_eq!(limits.max_depth(), 4);
/// let _decoder = Decoder::new(limits);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    max_bulk_len: usize,
    max_elements: usize,
    max_depth: usize,
    max_line_len: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self::new()
    }
}

impl Limits {
    /// Default [`max_bulk_len`](Self::max_bulk_len): 512 MiB, Redis' own `proto-max-bulk-len`.
    pub const DEFAULT_MAX_BULK_LEN: usize = 512 * 1024 * 1024;
    /// Default [`max_elements`](Self::max_elements): 1,048,576.
    pub const DEFAULT_MAX_ELEMENTS: usize = 1 << 20;
    /// Default [`max_depth`](Self::max_depth): 128 levels.
    pub const DEFAULT_MAX_DEPTH: usize = 128;
    /// Default [`max_line_len`](Self::max_line_len): 64 KiB, Redis' inline-request limit.
    pub const DEFAULT_MAX_LINE_LEN: usize = 64 * 1024;
    /// The largest depth a `Limits` accepts; larger requests are clamped to it. Decoding is
    /// iterative, but dropping, comparing or encoding a [`Frame`](crate::Frame) recurses once
    /// per level, so the depth of what the decoder returns must stay far from the stack's size.
    pub const MAX_DEPTH_CEILING: usize = 1024;

    /// The defaults: 512 MiB bulks, 1,048,576 elements, 128 levels, 64 KiB lines.
    pub const fn new() -> Self {
        Limits {
            max_bulk_len: Self::DEFAULT_MAX_BULK_LEN,
            max_elements: Self::DEFAULT_MAX_ELEMENTS,
            max_depth: Self::DEFAULT_MAX_DEPTH,
            max_line_len: Self::DEFAULT_MAX_LINE_LEN,
        }
    }

    /// The longest bulk string, bulk error, verbatim string or streamed-string chunk, in bytes;
    /// also the longest total of one streamed string's chunks.
    pub const fn max_bulk_len(&self) -> usize {
        self.max_bulk_len
    }

    /// The most elements in one aggregate (a map's or attribute's pair counts as two); also the
    /// most chunks in one streamed string.
    pub const fn max_elements(&self) -> usize {
        self.max_elements
    }

    /// The deepest nesting of aggregates of every kind, attributes and streamed strings
    /// included: a top-level array is at depth 1. Zero forbids aggregates altogether.
    pub const fn max_depth(&self) -> usize {
        self.max_depth
    }

    /// The longest line (a simple string, simple error, big number or double, or any header),
    /// in bytes, without its CRLF.
    pub const fn max_line_len(&self) -> usize {
        self.max_line_len
    }

    /// Sets [`max_bulk_len`](Self::max_bulk_len).
    pub const fn with_max_bulk_len(mut self, n: usize) -> Self {
        self.max_bulk_len = n;
        self
    }

    /// Sets [`max_elements`](Self::max_elements).
    pub const fn with_max_elements(mut self, n: usize) -> Self {
        self.max_elements = n;
        self
    }

    /// Sets [`max_depth`](Self::max_depth), clamped to [`MAX_DEPTH_CEILING`](Self::MAX_DEPTH_CEILING).
    pub const fn with_max_depth(mut self, n: usize) -> Self {
        self.max_depth = if n > Self::MAX_DEPTH_CEILING {
            Self::MAX_DEPTH_CEILING
        } else {
            n
        };
        self
    }

    /// Sets [`max_line_len`](Self::max_line_len).
    pub const fn with_max_line_len(mut self, n: usize) -> Self {
        self.max_line_len = n;
        self
    }
}
