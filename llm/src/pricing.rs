//! What model calls cost, in USD, from a per-model price table.

use std::{collections::BTreeMap, str::FromStr};

use crate::types::Usage;

/// USD per million tokens.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ModelPrice {
    pub input_per_million: f64,
    pub output_per_million: f64,
}

impl ModelPrice {
    pub const fn new(input_per_million: f64, output_per_million: f64) -> Self {
        Self {
            input_per_million,
            output_per_million,
        }
    }

    pub fn cost(&self, usage: Usage) -> f64 {
        (f64::from(usage.input_tokens) * self.input_per_million
            + f64::from(usage.output_tokens) * self.output_per_million)
            / 1_000_000.0
    }
}

/// List prices of common OpenAI models when this table was written; check them against the
/// provider's page and override what changed.
const BUILT_IN: &[(&str, ModelPrice)] = &[
    ("gpt-4o", ModelPrice::new(2.5, 10.0)),
    ("gpt-4o-mini", ModelPrice::new(0.15, 0.6)),
    ("gpt-4.1", ModelPrice::new(2.0, 8.0)),
    ("gpt-4.1-mini", ModelPrice::new(0.4, 1.6)),
    ("gpt-4.1-nano", ModelPrice::new(0.1, 0.4)),
    ("gpt-5", ModelPrice::new(1.25, 10.0)),
    ("gpt-5-mini", ModelPrice::new(0.25, 2.0)),
    ("gpt-5-nano", ModelPrice::new(0.05, 0.4)),
    ("o3", ModelPrice::new(2.0, 8.0)),
    ("o4-mini", ModelPrice::new(1.1, 4.4)),
    ("text-embedding-3-small", ModelPrice::new(0.02, 0.0)),
    ("text-embedding-3-large", ModelPrice::new(0.13, 0.0)),
];

/// For a model the table does not know: a mid-range list price, so that an unknown model's spend
/// shows rather than reading as free. Self-hosted setups set it to `*=0/0`.
const FALLBACK: ModelPrice = ModelPrice::new(2.5, 10.0);

/// A price table: per model, with a fallback for models it does not list.
///
/// A model matches its own entry, or else the longest entry it extends with `-`, `:` or `@`
/// (`gpt-4o-2024-08-06` is priced as `gpt-4o`, `gpt-4o-mini-2024-07-18` as `gpt-4o-mini`); a
/// `provider/` prefix (`openai/gpt-4o`) is tried without it too.
#[derive(Clone, Debug, PartialEq)]
pub struct Pricing {
    models: BTreeMap<String, ModelPrice>,
    fallback: ModelPrice,
}

/// The built-in table.
impl Default for Pricing {
    fn default() -> Self {
        Self {
            models: BUILT_IN
                .iter()
                .map(|(model, price)| ((*model).to_owned(), *price))
                .collect(),
            fallback: FALLBACK,
        }
    }
}

#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid price entry {entry:?}: expected MODEL=INPUT/OUTPUT in USD per million tokens")]
pub struct PricingError {
    pub entry: String,
}

impl Pricing {
    /// The built-in table with the entries of `spec` added or replaced, as in
    /// `gpt-4o=2.5/10,gpt-4o-mini=0.15/0.6`: comma-separated `MODEL=INPUT/OUTPUT`, in USD per
    /// million input and output tokens. The model `*` sets the fallback price.
    pub fn parse(spec: &str) -> Result<Self, PricingError> {
        let mut pricing = Self::default();
        for entry in spec.split(',').map(str::trim).filter(|entry| !entry.is_empty()) {
            let invalid = || PricingError {
                entry: entry.to_owned(),
            };
            let (model, prices) = entry.rsplit_once('=').ok_or_else(invalid)?;
            let (input, output) = prices.split_once('/').ok_or_else(invalid)?;
            let parse = |amount: &str| {
                amount
                    .trim()
                    .parse::<f64>()
                    .ok()
                    .filter(|amount| amount.is_finite() && *amount >= 0.0)
                    .ok_or_else(invalid)
            };
            let price = ModelPrice::new(parse(input)?, parse(output)?);
            match model.trim() {
                "" => return Err(invalid()),
                "*" => pricing.fallback = price,
                model => {
                    pricing.models.insert(model.to_owned(), price);
                }
            }
        }
        Ok(pricing)
    }

    pub fn price(&self, model: &str) -> ModelPrice {
        let unprefixed = model.rsplit_once('/').map(|(_, name)| name);
        std::iter::once(model)
            .chain(unprefixed)
            .find_map(|name| self.lookup(name))
            .unwrap_or(self.fallback)
    }

    fn lookup(&self, model: &str) -> Option<ModelPrice> {
        if let Some(price) = self.models.get(model) {
            return Some(*price);
        }
        self.models
            .iter()
            .filter(|(known, _)| {
                model
                    .strip_prefix(known.as_str())
                    .is_some_and(|rest| rest.starts_with(['-', ':', '@']))
            })
            .max_by_key(|(known, _)| known.len())
            .map(|(_, price)| *price)
    }

    /// The cost of a call in USD.
    pub fn cost(&self, model: &str, usage: Usage) -> f64 {
        self.price(model).cost(usage)
    }

    /// The cost as a decimal with 6 fractional digits, as a `decimal(10,6)` column takes it.
    pub fn cost_decimal(&self, model: &str, usage: Usage) -> String {
        format!("{:.6}", self.cost(model, usage))
    }
}

impl FromStr for Pricing {
    type Err = PricingError;

    fn from_str(spec: &str) -> Result<Self, Self::Err> {
        Self::parse(spec)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(input_tokens: u32, output_tokens: u32) -> Usage {
        Usage {
            input_tokens,
            output_tokens,
        }
    }

    #[test]
    fn parses_the_environment_format() {
        let pricing = Pricing::parse(" my-model = 1/2 , gpt-4o=3/12,*=0.5/1.5,").unwrap();
        assert_eq!(pricing.price("my-model"), ModelPrice::new(1.0, 2.0));
        assert_eq!(
            pricing.price("gpt-4o"),
            ModelPrice::new(3.0, 12.0),
            "overrides the built-in price"
        );
        assert_eq!(
            pricing.price("gpt-4o-mini"),
            ModelPrice::new(0.15, 0.6),
            "keeps the others"
        );
        assert_eq!(pricing.price("unknown"), ModelPrice::new(0.5, 1.5));
        assert_eq!(
            "a=1/2".parse::<Pricing>().unwrap().price("a"),
            ModelPrice::new(1.0, 2.0)
        );
        assert_eq!(Pricing::parse("").unwrap(), Pricing::default());
    }

    #[test]
    fn rejects_malformed_entries() {
        for spec in [
            "gpt-4o", "gpt-4o=1", "=1/2", "x=a/b", "x=-1/2", "x=1/2/3", "x=NaN/1", "x=1/inf",
        ] {
            let error = Pricing::parse(spec).unwrap_err();
            assert_eq!(error.entry, spec, "{error}");
        }
    }

    #[test]
    fn dated_and_prefixed_names_find_their_model() {
        let pricing = Pricing::default();
        assert_eq!(pricing.price("gpt-4o-2024-08-06"), ModelPrice::new(2.5, 10.0));
        assert_eq!(pricing.price("gpt-4o-mini-2024-07-18"), ModelPrice::new(0.15, 0.6));
        assert_eq!(pricing.price("openai/gpt-4.1-mini"), ModelPrice::new(0.4, 1.6));
        assert_eq!(pricing.price("gpt-4oops"), FALLBACK);
        assert_eq!(pricing.price("llama3:8b"), FALLBACK);
    }

    #[test]
    fn costs_and_their_decimal_form() {
        let pricing = Pricing::default();
        assert!((pricing.cost("gpt-4o", usage(1_000, 500)) - 0.0075).abs() < 1e-12);
        assert_eq!(pricing.cost_decimal("gpt-4o", usage(1_000, 500)), "0.007500");
        assert_eq!(pricing.cost_decimal("gpt-4o-mini", usage(1, 1)), "0.000001");
        assert_eq!(pricing.cost_decimal("gpt-4o", usage(0, 0)), "0.000000");
        assert_eq!(pricing.cost_decimal("gpt-4o", usage(1_000_000, 1_000_000)), "12.500000");
    }
}
