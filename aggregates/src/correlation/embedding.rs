//! Title embeddings for the semantic sub-score: feature hashing, no model.

/// Length of the vectors of [`HashedNgramEmbedder::default`].
pub const DEFAULT_EMBEDDING_DIMENSIONS: usize = 256;

/// Turns text into a fixed-length vector; similar texts give vectors with a high [`cosine`].
pub trait Embedder {
    fn embed(&self, text: &str) -> Vec<f32>;
    fn dimensions(&self) -> usize;
}

/// Feature-hashing embedder for alert titles: no model, no state, the same vector for the same
/// text on every run and machine.
///
/// The text is cut at whitespace and non-alphanumeric characters and at camelCase boundaries
/// ("CheckoutAPIHighLatency" gives checkout, api, high, latency), lowercased, and rid of numbers
/// and ids (pure digits, hex ids of 8 or more characters, UUID-like chunks), so "deploy #1842"
/// and "deploy #1843" embed the same. Each word gives itself and the character trigrams of
/// `<word>` as features; each feature is hashed (FNV-1a 64 with a final mix) to a bucket and a
/// sign, weighted `1 + ln(tf)`, with the words of [`STOPWORDS`] counting only
/// [`STOPWORD_WEIGHT`]; the vector is L2-normalized (all zeros when no word is left).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct HashedNgramEmbedder {
    dimensions: usize,
}

/// Words that say little about *what* broke, so they count [`STOPWORD_WEIGHT`] instead of 1.
///
/// Two groups: English function words, which carry no topic; and alert-template boilerplate
/// (alert, firing, triggered, critical, warning, high, low, above, below, over, threshold), which
/// templates put into titles whatever broke and which speaks of severity, state or comparison.
/// Without it "HighMemory" and "HighErrorRate" on different services would look alike. They are
/// down-weighted, not dropped, so a title made of them still has a vector. Symptom words
/// (error, latency, disk, memory, failed...) are deliberately NOT here: they are what the
/// semantic score is meant to compare.
#[rustfmt::skip]
pub const STOPWORDS: &[&str] = &[
    // English function words.
    "a", "an", "and", "are", "as", "at", "be", "been", "by", "for", "from", "has", "in", "is", "it", "of", "on", "or",
    "the", "to", "was", "with",
    // Alert-template boilerplate: severity, state, comparison.
    "alert", "alerts", "alarm", "firing", "triggered", "critical", "warning", "high", "low", "above", "below", "over",
    "threshold",
];

/// What one occurrence of a stopword (and each of its trigrams) counts for.
pub const STOPWORD_WEIGHT: f64 = 0.25;

impl HashedNgramEmbedder {
    /// # Panics
    /// When `dimensions` is 0.
    pub const fn new(dimensions: usize) -> Self {
        assert!(dimensions > 0, "an embedding needs at least one dimension");
        Self { dimensions }
    }
}

impl Default for HashedNgramEmbedder {
    fn default() -> Self {
        Self::new(DEFAULT_EMBEDDING_DIMENSIONS)
    }
}

impl Embedder for HashedNgramEmbedder {
    fn embed(&self, text: &str) -> Vec<f32> {
        // (feature hash, weight of one occurrence); sorted by hash below so that buckets are
        // summed in an order that depends on the text only. Entries with equal hashes may be
        // permuted by the unstable sort, but their weights (1 and 0.25) add up exactly in f64
        // in any order.
        let mut features: Vec<(u64, f64)> = Vec::with_capacity(text.len() * 2);
        let mut padded: Vec<char> = Vec::with_capacity(32);
        for_each_word(text, |word| {
            let weight = if STOPWORDS.contains(&word) {
                STOPWORD_WEIGHT
            } else {
                1.0
            };
            features.push((hash_word(word), weight));
            padded.clear();
            padded.push('<');
            padded.extend(word.chars());
            padded.push('>');
            for trigram in padded.windows(3) {
                features.push((hash_trigram(trigram), weight));
            }
        });
        features.sort_unstable_by_key(|f| f.0);

        let mut vector = vec![0.0f64; self.dimensions];
        let mut i = 0;
        while i < features.len() {
            let hash = features[i].0;
            let mut tf = 0.0;
            while i < features.len() && features[i].0 == hash {
                tf += features[i].1;
                i += 1;
            }
            // Sublinear tf, continuous at 1: a lone stopword keeps its reduced weight.
            let weight = if tf >= 1.0 { 1.0 + ln(tf) } else { tf };
            let bucket = (hash % self.dimensions as u64) as usize;
            vector[bucket] += if hash >> 63 == 1 { -weight } else { weight };
        }
        let norm = vector.iter().map(|v| v * v).sum::<f64>().sqrt();
        if norm > 0.0 {
            vector.iter_mut().for_each(|v| *v /= norm);
        }
        vector.into_iter().map(|v| v as f32).collect()
    }

    fn dimensions(&self) -> usize {
        self.dimensions
    }
}

/// Cosine similarity in `-1..=1`; 0 when the lengths differ or either vector is empty, zero or
/// not finite. Sums in f64, in index order, so it is deterministic.
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    if a.len() != b.len() || a.is_empty() {
        return 0.0;
    }
    let (mut dot, mut norm_a, mut norm_b) = (0.0f64, 0.0f64, 0.0f64);
    for (&x, &y) in a.iter().zip(b) {
        let (x, y) = (f64::from(x), f64::from(y));
        dot += x * y;
        norm_a += x * x;
        norm_b += y * y;
    }
    let cos = dot / (norm_a.sqrt() * norm_b.sqrt());
    if cos.is_finite() {
        cos.clamp(-1.0, 1.0) as f32
    } else {
        0.0
    }
}

/// Calls `f` with each lowercase word of `text` that survives the number and id filter.
fn for_each_word(text: &str, mut f: impl FnMut(&str)) {
    let mut parts: Vec<&str> = Vec::new();
    let mut lower = String::new();
    for chunk in text.split_whitespace() {
        if is_id_chunk(chunk) {
            continue;
        }
        for token in chunk.split(|c: char| !c.is_alphanumeric()).filter(|t| !t.is_empty()) {
            if is_number_or_id(token) {
                continue;
            }
            parts.clear();
            split_camel_case(token, &mut parts);
            for part in &parts {
                lower.clear();
                lower.extend(part.chars().flat_map(char::to_lowercase));
                if !is_number_or_id(&lower) {
                    f(&lower);
                }
            }
        }
    }
}

/// A whitespace chunk that is an id as a whole, e.g. a UUID: only hex digits and dashes (after
/// trimming punctuation), at least 8 hex digits, at least one decimal digit.
fn is_id_chunk(chunk: &str) -> bool {
    let chunk = chunk.trim_matches(|c: char| !c.is_alphanumeric());
    chunk.contains('-')
        && chunk.chars().all(|c| c.is_ascii_hexdigit() || c == '-')
        && chunk.chars().filter(char::is_ascii_hexdigit).count() >= 8
        && chunk.chars().any(|c| c.is_ascii_digit())
}

/// Pure digits, or a hex id: 8 or more hex digits with at least one decimal digit (the digit
/// rule keeps words such as "deadbeef" or "acceded", which are rare anyway).
fn is_number_or_id(token: &str) -> bool {
    let all_digits = token.chars().all(|c| c.is_ascii_digit());
    let hex_id =
        token.len() >= 8 && token.chars().all(|c| c.is_ascii_hexdigit()) && token.chars().any(|c| c.is_ascii_digit());
    all_digits || hex_id
}

/// Splits "CheckoutAPIHighLatency" into "Checkout", "API", "High", "Latency": a word starts at
/// an upper-case letter after a lower-case one, and at the last upper-case letter of a run of
/// capitals or after a digit when a lower-case letter follows ("HTTPServer", "5XXRate").
/// Letter-digit boundaries alone do not split, so "p99", "5xx" and "http2" stay whole.
fn split_camel_case<'a>(token: &'a str, out: &mut Vec<&'a str>) {
    let mut start = 0;
    let mut chars = token.char_indices().peekable();
    let mut prev: Option<char> = None;
    while let Some((index, c)) = chars.next() {
        if let Some(p) = prev {
            let next_is_lower = chars.peek().is_some_and(|&(_, n)| n.is_lowercase());
            let boundary =
                c.is_uppercase() && (p.is_lowercase() || ((p.is_uppercase() || p.is_numeric()) && next_is_lower));
            if boundary {
                out.push(&token[start..index]);
                start = index;
            }
        }
        prev = Some(c);
    }
    out.push(&token[start..]);
}

const FNV_OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;
/// Namespaces so that the word "api" and the trigram "api" are different features.
const WORD_FEATURE: u8 = b'w';
const TRIGRAM_FEATURE: u8 = b't';

fn fnv1a(mut hash: u64, bytes: &[u8]) -> u64 {
    for &byte in bytes {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(FNV_PRIME);
    }
    hash
}

/// MurmurHash3's 64-bit finalizer: FNV-1a's low bits (the bucket) and top bit (the sign) are
/// poorly mixed for short inputs; this spreads every input bit over all output bits.
fn mix64(mut h: u64) -> u64 {
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

fn hash_word(word: &str) -> u64 {
    mix64(fnv1a(fnv1a(FNV_OFFSET_BASIS, &[WORD_FEATURE]), word.as_bytes()))
}

fn hash_trigram(chars: &[char]) -> u64 {
    let mut hash = fnv1a(FNV_OFFSET_BASIS, &[TRIGRAM_FEATURE]);
    let mut buf = [0u8; 4];
    for c in chars {
        hash = fnv1a(hash, c.encode_utf8(&mut buf).as_bytes());
    }
    mix64(hash)
}

/// Natural logarithm from IEEE-754 basic operations only (which are exactly rounded everywhere),
/// unlike `f64::ln`, whose last bit depends on the platform's libm. For finite `x >= 1`; error
/// below 1e-15 relative.
fn ln(x: f64) -> f64 {
    debug_assert!(x.is_finite() && x >= 1.0);
    let bits = x.to_bits();
    let mut exponent = ((bits >> 52) & 0x7ff) as i64 - 1023;
    // x = m * 2^exponent with m in [1, 2), moved to [sqrt(1/2), sqrt(2)).
    let mut m = f64::from_bits((bits & 0x000f_ffff_ffff_ffff) | 0x3ff0_0000_0000_0000);
    if m > std::f64::consts::SQRT_2 {
        m /= 2.0;
        exponent += 1;
    }
    // ln(m) = 2 atanh(s) = 2 (s + s^3/3 + s^5/5 + ...), |s| <= 0.172, so s^2 <= 0.0295.
    let s = (m - 1.0) / (m + 1.0);
    let s2 = s * s;
    let mut power = s;
    let mut series = 0.0;
    for k in 0..12 {
        series += power / f64::from(2 * k + 1);
        power *= s2;
    }
    exponent as f64 * std::f64::consts::LN_2 + 2.0 * series
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::correlation::semantic_score;

    fn embed(text: &str) -> Vec<f32> {
        HashedNgramEmbedder::default().embed(text)
    }

    fn sim(a: &str, b: &str) -> f32 {
        cosine(&embed(a), &embed(b))
    }

    #[test]
    fn words_are_split_lowercased_and_rid_of_numbers_and_ids() {
        let words = |text: &str| {
            let mut out = Vec::new();
            for_each_word(text, |w| out.push(w.to_owned()));
            out
        };
        assert_eq!(words("CheckoutApiHighLatency"), ["checkout", "api", "high", "latency"]);
        assert_eq!(words("CheckoutAPIHighLatency"), ["checkout", "api", "high", "latency"]);
        assert_eq!(
            words("HTTPServer 5XXRate p99 http2"),
            ["http", "server", "5xx", "rate", "p99", "http2"]
        );
        assert_eq!(
            words("inventory-service deploy (deploy-production #1842)"),
            ["inventory", "service", "deploy", "deploy", "production"]
        );
        assert_eq!(
            words("pod 550e8400-e29b-41d4-a716-446655440000 crashed, sha 3f2a9c1d7e"),
            ["pod", "crashed", "sha"]
        );
        assert_eq!(
            words("deadbeef cafe01 Ünïcode_Straße"),
            ["deadbeef", "cafe01", "ünïcode", "straße"]
        );
        assert!(words("  #1842 ... 2026-11-20 ").is_empty());
    }

    #[test]
    fn embedding_is_pinned() {
        // Computed once; a change here changes every stored embedding: re-embed before shipping.
        let v = embed("checkout-api p99 latency above 2s");
        assert_eq!(v.len(), 256);
        let nonzero: Vec<(usize, f32)> = v.iter().copied().enumerate().filter(|x| x.1 != 0.0).take(4).collect();
        assert_eq!(nonzero, PINNED_FIRST_NONZERO);
        assert_eq!(sim("CheckoutApiHighLatency", "CheckoutApiHighErrorRate"), PINNED_COSINE);
        let norm: f64 = v.iter().map(|x| f64::from(*x).powi(2)).sum();
        assert!((norm - 1.0).abs() < 1e-6);
    }

    const PINNED_FIRST_NONZERO: [(usize, f32); 4] = [
        (15, -0.045360923),
        (38, 0.18144369),
        (58, -0.18144369),
        (72, -0.18144369),
    ];
    const PINNED_COSINE: f32 = 0.6552823;

    #[test]
    fn embedding_similarities() {
        assert!((sim("checkout-api p99 latency above 2s", "checkout-api p99 latency above 2s") - 1.0).abs() < 1e-6);
        assert_eq!(embed("deploy #1842"), embed("deploy #1843"));
        assert_eq!(embed("CheckoutApiHighLatency"), embed("checkout api high latency"));
        assert!(sim("CheckoutAPIHighLatency", "checkout-api high latency") > 0.8);
        assert!(sim("PaymentsApiElevated5xxRate", "payments api elevated 5xx rate") > 0.8);

        let unrelated = [
            (
                "checkout-api p99 latency above 2s",
                "Disk /var/lib/postgresql space running out on payments-db-01",
            ),
            ("CheckoutApiHighLatency", "notifications queue backlog high"),
            (
                "auth-service - login error spike",
                "inventory-service deploy to production failed",
            ),
            ("Response time degradation", "notifications consumer lag high"),
        ];
        for (a, b) in unrelated {
            assert!(sim(a, b) < 0.3, "{a} / {b}: {}", sim(a, b));
        }
        let related = [
            ("notifications queue backlog high", "notifications consumer lag high"),
            (
                "payments-api: elevated HTTP 5xx rate on POST /v1/charges",
                "payments-api: elevated HTTP 5xx rate on POST /v1/refunds",
            ),
            (
                "auth-service - HTTP 5xx error spike",
                "auth-service - login error spike",
            ),
        ];
        for (a, b) in related {
            assert!(sim(a, b) > 0.4, "{a} / {b}: {}", sim(a, b));
        }
    }

    #[test]
    fn embedding_edge_cases() {
        let zero = embed("#1842 -- 2026-11-20");
        assert!(zero.iter().all(|x| *x == 0.0));
        assert_eq!(cosine(&zero, &zero), 0.0);
        assert_eq!(semantic_score(&zero, &embed("deploy")), 0.0);
        let small = HashedNgramEmbedder::new(16);
        assert_eq!(small.dimensions(), 16);
        assert_eq!(small.embed("checkout latency").len(), 16);
        assert_eq!(
            cosine(&small.embed("checkout"), &embed("checkout")),
            0.0,
            "length mismatch"
        );
        assert_eq!(cosine(&[], &[]), 0.0);
        assert_eq!(cosine(&[1.0, 0.0], &[-1.0, 0.0]), -1.0);
        assert_eq!(semantic_score(&[1.0, 0.0], &[-1.0, 0.0]), 0.0);
        assert_eq!(cosine(&[f32::NAN, 1.0], &[1.0, 1.0]), 0.0);
        // Only stopwords: still a vector.
        assert!(embed("high alert").iter().any(|x| *x != 0.0));
    }

    #[test]
    #[should_panic(expected = "at least one dimension")]
    fn zero_dimensions_panic() {
        let _ = HashedNgramEmbedder::new(0);
    }

    #[test]
    fn portable_ln_matches_std() {
        for x in [
            1.0,
            1.25,
            1.5,
            std::f64::consts::SQRT_2,
            2.0,
            2.75,
            3.0,
            10.0,
            1234.5,
            1e300,
        ] {
            assert!(
                (ln(x) - x.ln()).abs() <= 1e-15 * x.ln().max(1.0),
                "{x}: {} vs {}",
                ln(x),
                x.ln()
            );
        }
        assert_eq!(ln(1.0), 0.0);
    }

    #[test]
    fn feature_hash_is_fnv1a_64() {
        // Published FNV-1a 64 test vectors.
        assert_eq!(fnv1a(FNV_OFFSET_BASIS, b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(FNV_OFFSET_BASIS, b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a(FNV_OFFSET_BASIS, b"foobar"), 0x8594_4171_f739_67e8);
        assert_ne!(hash_word("api"), hash_trigram(&['a', 'p', 'i']));
    }
}
