//! Times as senders write them: epochs in seconds, milliseconds or nanoseconds (as numbers or
//! strings, with fractions), RFC 3339 with any precision and offset, and a few looser forms.

use chrono::{DateTime, NaiveDateTime, Timelike, Utc};
use serde_json::{Number, Value};

/// The unit a source documents for an epoch field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum EpochUnit {
    Seconds,
    Millis,
}

impl EpochUnit {
    /// What a time field in this unit must be, in error messages.
    pub(super) const fn expected(self) -> &'static str {
        match self {
            Self::Seconds => "an RFC 3339 time or epoch seconds",
            Self::Millis => "an RFC 3339 time or epoch milliseconds",
        }
    }
}

/// A point in time from an epoch number (or numeric string), or from RFC 3339 / ISO 8601 text; `None`
/// for anything else, including times not after 1970 or past the year 9999. [`Obj::time`] tells the unset markers
/// among those from garbage.
pub(super) fn timestamp(value: &Value) -> Option<DateTime<Utc>> {
    let parsed = match value {
        Value::Number(number) => epoch_parts_of_number(number).and_then(|(whole, nanos)| epoch(whole, nanos)),
        Value::String(text) => {
            let text = text.trim();
            match split_decimal(text) {
                Some((whole, nanos)) => epoch(whole, nanos),
                None => parse_datetime_text(text),
            }
        }
        _ => None,
    };
    // The range is checked on the normalized time: chrono keeps `23:59:60` as a leap second of
    // `23:59:59`, which storage turns into the next second (`9999-12-31T23:59:60Z` into year 10000).
    parsed
        .and_then(without_leap_second)
        .filter(|time| time.timestamp() > 0 && is_supported(*time))
}

/// Whether a time is no later than the last one ingestion supports, 9999-12-31T23:59:59Z and its fractions.
pub(super) fn is_supported(time: DateTime<Utc>) -> bool {
    time.timestamp() <= LATEST_EPOCH_SECONDS
}

/// A leap second (`23:59:60.x`) as the second after it (`00:00:00.x`), which is what PostgreSQL and
/// every later comparison make of it.
fn without_leap_second(time: DateTime<Utc>) -> Option<DateTime<Utc>> {
    match time.nanosecond().checked_sub(1_000_000_000) {
        Some(nanos) => DateTime::from_timestamp(time.timestamp().checked_add(1)?, nanos),
        None => Some(time),
    }
}

/// 9999-12-31T23:59:59Z: later epochs are garbage, and times near chrono's own limit (year 262142) would overflow
/// when correlation reaches a window past them.
const LATEST_EPOCH_SECONDS: i64 = 253_402_300_799;

/// An epoch number as whole units plus the fraction of a unit in billionths.
fn epoch_parts_of_number(number: &Number) -> Option<(i64, u32)> {
    if let Some(whole) = number.as_i64() {
        return Some((whole, 0));
    }
    let float = number
        .as_f64()
        .filter(|float| float.is_finite() && *float >= 0.0 && *float < 9e18)?;
    let fraction_nanos = ((float.fract() * 1e9) as u32).min(999_999_999);
    Some((float.trunc() as i64, fraction_nanos))
}

/// `"1795172640.000"` → whole units and the fraction in billionths; `None` unless it is a plain decimal.
fn split_decimal(text: &str) -> Option<(i64, u32)> {
    let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
    let all_digits = |part: &str| part.bytes().all(|byte| byte.is_ascii_digit());
    if whole.is_empty() || !all_digits(whole) || !all_digits(fraction) {
        return None;
    }
    let digits = fraction.get(..9).unwrap_or(fraction);
    let scale = 10u32.pow(9 - digits.len() as u32);
    let fraction_nanos = if digits.is_empty() {
        0
    } else {
        digits.parse::<u32>().ok()? * scale
    };
    Some((whole.parse().ok()?, fraction_nanos))
}

/// An epoch in whichever unit its magnitude says, whatever the field's documented unit: template
/// authors mix seconds and milliseconds up, and some tools send micro- or nanoseconds. Each unit's
/// range starts where the unit below would pass the year 5138 and where it itself reads 1973, so
/// no real alert time is ambiguous.
fn epoch(whole: i64, fraction_nanos: u32) -> Option<DateTime<Utc>> {
    const MILLIS_FROM: i64 = 100_000_000_000;
    const MICROS_FROM: i64 = 1_000 * MILLIS_FROM;
    const NANOS_FROM: i64 = 1_000 * MICROS_FROM;
    let units_per_second: i64 = match whole {
        ..MILLIS_FROM => 1,
        MILLIS_FROM..MICROS_FROM => 1_000,
        MICROS_FROM..NANOS_FROM => 1_000_000,
        _ => 1_000_000_000,
    };
    let nanos_per_unit = 1_000_000_000 / units_per_second;
    let nanos = whole.rem_euclid(units_per_second) * nanos_per_unit + i64::from(fraction_nanos) / units_per_second;
    DateTime::from_timestamp(whole.div_euclid(units_per_second), u32::try_from(nanos).ok()?)
}

/// RFC 3339 (nanoseconds and any offset), also `+0000`- and `+01`-style offsets (ISO 8601 allows
/// both), a space instead of `T`, and no offset at all (read as UTC).
pub(super) fn parse_datetime_text(text: &str) -> Option<DateTime<Utc>> {
    parse_iso_datetime(text).or_else(|| parse_iso_datetime(&text.replacen(' ', "T", 1)))
}

fn parse_iso_datetime(text: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(text)
        .or_else(|_| DateTime::parse_from_str(text, "%Y-%m-%dT%H:%M:%S%.f%z"))
        .or_else(|_| DateTime::parse_from_str(text, "%Y-%m-%dT%H:%M:%S%.f%#z"))
        .map(|time| time.with_timezone(&Utc))
        .ok()
        .or_else(|| {
            NaiveDateTime::parse_from_str(text, "%Y-%m-%dT%H:%M:%S%.f")
                .ok()
                .map(|naive| naive.and_utc())
        })
}
