//! Scoring rules of the scenario format: pairwise grouping precision/recall/F1 and the RCA
//! substring rule.

use std::collections::BTreeMap;

use super::scenario::Scenario;

/// Phrases that say a cause is not established (the inconclusive scenarios' rule).
pub const NOT_ESTABLISHED: [&str; 5] = [
    "not established",
    "undetermined",
    "insufficient evidence",
    "inconclusive",
    "could not be determined",
];

/// Pair counts of one grouping; they add up over scenarios (the pooled, micro value).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PairCounts {
    pub true_positive: u64,
    pub false_positive: u64,
    pub false_negative: u64,
}

impl PairCounts {
    /// Over every unordered pair of `events` (true label, incident it ended in; `None` when the
    /// event was not placed, which never pairs).
    pub fn of<L: PartialEq, I: PartialEq>(events: &[(L, Option<I>)]) -> Self {
        let mut counts = Self::default();
        for (i, (label_a, incident_a)) in events.iter().enumerate() {
            for (label_b, incident_b) in &events[i + 1..] {
                let same_incident = incident_a.is_some() && incident_a == incident_b;
                match (label_a == label_b, same_incident) {
                    (true, true) => counts.true_positive += 1,
                    (false, true) => counts.false_positive += 1,
                    (true, false) => counts.false_negative += 1,
                    (false, false) => {}
                }
            }
        }
        counts
    }

    pub fn add(&mut self, other: Self) {
        self.true_positive += other.true_positive;
        self.false_positive += other.false_positive;
        self.false_negative += other.false_negative;
    }

    pub fn quality(&self) -> Quality {
        let ratio = |hits: u64, misses: u64| {
            if hits + misses == 0 {
                1.0
            } else {
                hits as f64 / (hits + misses) as f64
            }
        };
        Quality::new(
            ratio(self.true_positive, self.false_positive),
            ratio(self.true_positive, self.false_negative),
        )
    }
}

/// Precision, recall and their harmonic mean.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Quality {
    pub precision: f64,
    pub recall: f64,
    pub f1: f64,
}

impl Quality {
    pub fn new(precision: f64, recall: f64) -> Self {
        let f1 = if precision + recall > 0.0 {
            2.0 * precision * recall / (precision + recall)
        } else {
            0.0
        };
        Self { precision, recall, f1 }
    }

    /// The macro average: each of precision, recall and F1 averaged on its own.
    pub fn mean(values: &[Quality]) -> Self {
        let n = values.len().max(1) as f64;
        Self {
            precision: values.iter().map(|q| q.precision).sum::<f64>() / n,
            recall: values.iter().map(|q| q.recall).sum::<f64>() / n,
            f1: values.iter().map(|q| q.f1).sum::<f64>() / n,
        }
    }
}

/// Whether the analysis text (summary and conclusions) names the scenario's cause: for an
/// ordinary scenario the component at fault and one keyword; for an inconclusive one a phrase
/// saying the cause is not established.
pub fn names_cause(scenario: &Scenario, text: &str) -> bool {
    let text = text.to_lowercase();
    let mentions = |phrase: &str| text.contains(&phrase.to_lowercase());
    let keywords = &scenario.root_cause.keywords;
    if scenario.is_inconclusive() {
        return keywords.iter().any(|k| mentions(k)) || NOT_ESTABLISHED.iter().any(|p| mentions(p));
    }
    mentions(&scenario.root_cause.service) && keywords.iter().any(|k| mentions(k))
}

/// The mean RCA score per category (and `all`), from (category, hit) pairs.
pub fn by_category<'a>(results: impl IntoIterator<Item = (&'a str, bool)>) -> BTreeMap<String, (usize, usize)> {
    let mut table: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    for (category, hit) in results {
        for key in [category, "all"] {
            let entry = table.entry(key.to_owned()).or_default();
            entry.0 += usize::from(hit);
            entry.1 += 1;
        }
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_follow_the_readme_rule() {
        // a a b | incidents 1 1 1: one true pair, two false pairs.
        let merged = PairCounts::of(&[("a", Some(1)), ("a", Some(1)), ("b", Some(1))]);
        assert_eq!(
            (merged.true_positive, merged.false_positive, merged.false_negative),
            (1, 2, 0)
        );
        let q = merged.quality();
        assert!((q.precision - 1.0 / 3.0).abs() < 1e-9 && (q.recall - 1.0).abs() < 1e-9);

        // a a | incidents 1 2: a split pair.
        let split = PairCounts::of(&[("a", Some(1)), ("a", Some(2))]);
        assert_eq!(split.quality().recall, 0.0);
        assert_eq!(
            split.quality().precision,
            1.0,
            "no predicted pair: nothing to get wrong"
        );
        assert_eq!(split.quality().f1, 0.0);
    }

    #[test]
    fn an_unplaced_event_pairs_with_nothing() {
        let counts = PairCounts::of(&[("a", None::<u8>), ("a", None)]);
        assert_eq!(counts.false_negative, 1);
        assert_eq!(counts.true_positive, 0);
    }

    #[test]
    fn a_single_event_scores_one() {
        let q = PairCounts::of(&[("a", Some(1))]).quality();
        assert_eq!((q.precision, q.recall, q.f1), (1.0, 1.0, 1.0));
    }

    fn scenario(service: &str, keywords: &[&str]) -> Scenario {
        serde_json::from_value(serde_json::json!({
            "id": "x", "root_cause": {"category": "c", "service": service, "keywords": keywords}, "events": []
        }))
        .unwrap()
    }

    #[test]
    fn a_cause_is_named_by_its_component_and_a_keyword() {
        let s = scenario("Cache-7", &["memory", "evicted"]);
        assert!(names_cause(&s, "cache-7 ran out of MEMORY"));
        assert!(!names_cause(&s, "cache-7 is slow"), "no keyword");
        assert!(!names_cause(&s, "memory is low"), "no component");
    }

    #[test]
    fn an_inconclusive_truth_wants_a_phrase_that_says_so() {
        let s = scenario("", &["not established"]);
        assert!(names_cause(&s, "The cause could not be determined."));
        assert!(!names_cause(&s, "The cause is the database."));
    }

    #[test]
    fn categories_are_counted_with_a_total() {
        let table = by_category([("a", true), ("a", false), ("b", true)]);
        assert_eq!(table["a"], (1, 2));
        assert_eq!(table["all"], (2, 3));
    }
}
