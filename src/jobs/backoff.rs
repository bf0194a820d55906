use std::time::Duration;

use rand::Rng;

/// Delay before a failed job runs again: `base × 2^attempt`, capped at `max`, then spread by up
/// to ± `jitter` (a fraction) so that jobs which failed together do not retry together. The
/// jittered delay never exceeds `max`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Backoff {
    pub base: Duration,
    pub max: Duration,
    pub jitter: f64,
}

impl Default for Backoff {
    fn default() -> Self {
        Self {
            base: Duration::from_secs(1),
            max: Duration::from_secs(300),
            jitter: 0.2,
        }
    }
}

impl Backoff {
    /// The delay after attempt number `attempt` (1-based) failed.
    pub fn delay(&self, attempt: i32) -> Duration {
        let exponent = u32::try_from(attempt).unwrap_or(0);
        let factor = 2u32.saturating_pow(exponent);
        let capped = self.base.saturating_mul(factor).min(self.max);
        let spread = rand::rng().random_range(-self.jitter..=self.jitter);
        Duration::try_from_secs_f64(capped.as_secs_f64() * (1.0 + spread))
            .unwrap_or(capped)
            .min(self.max)
    }

    pub(super) fn validate(&self) -> Result<(), String> {
        if !(0.0..1.0).contains(&self.jitter) {
            return Err(format!("backoff jitter is {}, must be in [0, 1)", self.jitter));
        }
        if self.base > self.max {
            return Err("backoff base exceeds its max".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn without_jitter(base_ms: u64, max_ms: u64) -> Backoff {
        Backoff {
            base: Duration::from_millis(base_ms),
            max: Duration::from_millis(max_ms),
            jitter: 0.0,
        }
    }

    #[test]
    fn doubles_with_each_attempt() {
        let backoff = without_jitter(1_000, 300_000);
        let delays: Vec<u64> = (1..=5).map(|attempt| backoff.delay(attempt).as_secs()).collect();
        assert_eq!(delays, vec![2, 4, 8, 16, 32]);
    }

    #[test]
    fn is_capped_at_max_even_for_huge_attempts() {
        let backoff = without_jitter(1_000, 300_000);
        assert_eq!(backoff.delay(9), Duration::from_secs(300));
        assert_eq!(backoff.delay(i32::MAX), Duration::from_secs(300));
    }

    #[test]
    fn jitter_stays_within_its_fraction_and_below_max() {
        let backoff = Backoff {
            base: Duration::from_millis(100),
            max: Duration::from_secs(10),
            jitter: 0.2,
        };
        for _ in 0..1_000 {
            let delay = backoff.delay(2).as_secs_f64();
            assert!((0.32..=0.48).contains(&delay), "delay {delay}");
            assert!(backoff.delay(20) <= backoff.max);
        }
    }

    #[test]
    fn rejects_jitter_outside_unit_interval() {
        let backoff = Backoff {
            jitter: 1.5,
            ..Backoff::default()
        };
        assert!(backoff.validate().is_err());
        assert!(Backoff::default().validate().is_ok());
    }
}
