//! A fixed-size bitmap of `u64` words with first-set-bit search and run iteration: the building
//! block of the page allocator's two levels.

/// A fixed number of bits, all clear at creation.
#[derive(Debug, Clone)]
pub(crate) struct Bitmap {
    words: Vec<u64>,
    len: usize,
}

impl Bitmap {
    /// `len` clear bits.
    pub(crate) fn new(len: usize) -> Self {
        Bitmap {
            words: vec![0; len.div_ceil(64)],
            len,
        }
    }

    /// A bitmap of `len` bits from its words (as [`word`](Self::word) gives them), or `None`
    /// if `words` is not exactly `len.div_ceil(64)` long or a bit past `len` is set.
    pub(crate) fn from_words(words: Vec<u64>, len: usize) -> Option<Self> {
        if words.len() != len.div_ceil(64) {
            return None;
        }
        let tail = len % 64;
        if tail != 0 && words.last().is_some_and(|&w| w >> tail != 0) {
            return None;
        }
        Some(Bitmap { words, len })
    }

    /// Bit `i` (false when out of range).
    pub(crate) fn get(&self, i: usize) -> bool {
        i < self.len && self.words[i / 64] & (1 << (i % 64)) != 0
    }

    /// Sets bit `i` to `v` (ignored when out of range).
    pub(crate) fn set(&mut self, i: usize, v: bool) {
        if i >= self.len {
            return;
        }
        let m = 1u64 << (i % 64);
        if v {
            self.words[i / 64] |= m;
        } else {
            self.words[i / 64] &= !m;
        }
    }

    /// Sets bits `from..to` (clamped to the bitmap).
    pub(crate) fn set_range(&mut self, from: usize, to: usize) {
        for i in from..to.min(self.len) {
            self.set(i, true);
        }
    }

    /// The word holding bits `64 * w .. 64 * w + 64` (0 past the end).
    pub(crate) fn word(&self, w: usize) -> u64 {
        self.words.get(w).copied().unwrap_or(0)
    }

    /// Lowest set bit in `from..to`, if any.
    pub(crate) fn first_set(&self, from: usize, to: usize) -> Option<usize> {
        self.first_where(from, to, |w| self.word(w))
    }

    /// Lowest `i` in `from..to` whose bit is set in `word(i / 64)`; `word` may combine several
    /// bitmaps (for example "free and not known-zero").
    pub(crate) fn first_where(
        &self,
        from: usize,
        to: usize,
        word: impl Fn(usize) -> u64,
    ) -> Option<usize> {
        let to = to.min(self.len);
        let mut i = from;
        while i < to {
            let w = i / 64;
            let bits = word(w) & (!0u64 << (i % 64));
            if bits != 0 {
                let found = w * 64 + bits.trailing_zeros() as usize;
                return (found < to).then_some(found);
            }
            i = (w + 1) * 64;
        }
        None
    }
}

/// Iterator over maximal runs `(first, count)` of bits set in a word function over `0..len`.
pub(crate) struct Runs<F: Fn(usize) -> u64> {
    word: F,
    len: usize,
    pos: usize,
}

impl<F: Fn(usize) -> u64> Runs<F> {
    /// Runs of set bits in `0..len`, where `word(w)` gives bits `64 * w ..`.
    pub(crate) fn new(len: usize, word: F) -> Self {
        Runs { word, len, pos: 0 }
    }

    fn next_matching(&self, from: usize, set: bool) -> usize {
        let mut i = from;
        while i < self.len {
            let w = i / 64;
            let raw = (self.word)(w);
            let bits = if set { raw } else { !raw } & (!0u64 << (i % 64));
            if bits != 0 {
                return (w * 64 + bits.trailing_zeros() as usize).min(self.len);
            }
            i = (w + 1) * 64;
        }
        self.len
    }
}

impl<F: Fn(usize) -> u64> Iterator for Runs<F> {
    type Item = (usize, usize);

    fn next(&mut self) -> Option<(usize, usize)> {
        let start = self.next_matching(self.pos, true);
        if start >= self.len {
            self.pos = self.len;
            return None;
        }
        let end = self.next_matching(start, false);
        self.pos = end;
        Some((start, end - start))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_get_search() {
        let mut b = Bitmap::new(200);
        assert_eq!(b.first_set(0, 200), None);
        b.set(130, true);
        b.set(7, true);
        assert!(b.get(130) && b.get(7) && !b.get(8));
        assert_eq!(b.first_set(0, 200), Some(7));
        assert_eq!(b.first_set(8, 200), Some(130));
        assert_eq!(b.first_set(8, 130), None);
        b.set(7, false);
        assert_eq!(b.first_set(0, 200), Some(130));
        b.set(500, true); // out of range: ignored
        assert!(!b.get(500));
    }

    #[test]
    fn runs_cover_word_boundaries() {
        let mut b = Bitmap::new(300);
        b.set_range(60, 70);
        b.set_range(128, 192);
        b.set(299, true);
        let runs: Vec<_> = Runs::new(300, |w| b.word(w)).collect();
        assert_eq!(runs, vec![(60, 10), (128, 64), (299, 1)]);
    }
}
