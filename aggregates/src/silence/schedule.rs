//! When a silence applies: a fixed window, or a weekly maintenance window in a time zone.

use std::str::FromStr;

use chrono::{DateTime, Datelike, NaiveTime, Utc, Weekday};
use chrono_tz::Tz;
use serde::{Deserialize, Serialize};

/// When a silence applies. A fixed window, or a weekly recurring window in an IANA time zone (a
/// maintenance window): every listed weekday from `start` to `end` local wall-clock time; `end`
/// <= `start` means it runs past midnight into the next day (Saturday 22:00 to 02:00 covers
/// Sunday 00:00-02:00 too). The recurring one applies from `starts_at` until `ends_at` when
/// given (else until the silence is expired).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Schedule {
    Window {
        starts_at: DateTime<Utc>,
        ends_at: DateTime<Utc>,
    },
    Weekly {
        starts_at: DateTime<Utc>,
        ends_at: Option<DateTime<Utc>>,
        time_zone: String,
        days: Vec<Weekday>,
        start: NaiveTime,
        end: NaiveTime,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ScheduleState {
    Pending,
    Active,
    Expired,
}

impl Schedule {
    /// Pending before `starts_at`, Expired from `ends_at` on, else Active. A weekly schedule is
    /// Active only inside one of its slots and Pending between them; one whose time zone is
    /// unknown is never Active (a silence that cannot be evaluated must not hide alerts).
    pub fn state(&self, at: DateTime<Utc>) -> ScheduleState {
        match CompiledSchedule::new(self) {
            Ok(compiled) => compiled.state(at),
            Err(UnknownTimeZone) => match self.bounds(at) {
                ScheduleState::Active => ScheduleState::Pending,
                outside => outside,
            },
        }
    }

    pub fn is_active(&self, at: DateTime<Utc>) -> bool {
        self.state(at) == ScheduleState::Active
    }

    /// When it starts, and when it ends (never, for a weekly window without an end).
    pub fn span(&self) -> (DateTime<Utc>, Option<DateTime<Utc>>) {
        match self {
            Self::Window { starts_at, ends_at } => (*starts_at, Some(*ends_at)),
            Self::Weekly { starts_at, ends_at, .. } => (*starts_at, *ends_at),
        }
    }

    /// Where `at` falls relative to `starts_at` and `ends_at` alone (Active = between them).
    fn bounds(&self, at: DateTime<Utc>) -> ScheduleState {
        let (starts_at, ends_at) = self.span();
        if at < starts_at {
            ScheduleState::Pending
        } else if ends_at.is_some_and(|ends_at| at >= ends_at) {
            ScheduleState::Expired
        } else {
            ScheduleState::Active
        }
    }
}

/// The schedule's time zone is not in the IANA database chrono-tz carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct UnknownTimeZone;

/// A schedule ready to evaluate per alert: its time zone parsed and its days as a set, once.
#[derive(Clone, Debug)]
pub(super) struct CompiledSchedule {
    schedule: Schedule,
    weekly: Option<WeeklySlots>,
}

impl CompiledSchedule {
    pub(super) fn new(schedule: &Schedule) -> Result<Self, UnknownTimeZone> {
        let weekly = match schedule {
            Schedule::Window { .. } => None,
            Schedule::Weekly {
                time_zone,
                days,
                start,
                end,
                ..
            } => Some(WeeklySlots {
                time_zone: Tz::from_str(time_zone).map_err(|_| UnknownTimeZone)?,
                days: DaySet::of(days),
                start: *start,
                end: *end,
            }),
        };
        Ok(Self {
            schedule: schedule.clone(),
            weekly,
        })
    }

    pub(super) fn state(&self, at: DateTime<Utc>) -> ScheduleState {
        match (self.schedule.bounds(at), &self.weekly) {
            (ScheduleState::Active, Some(weekly)) if !weekly.contains(at) => ScheduleState::Pending,
            (state, _) => state,
        }
    }
}

#[derive(Clone, Debug)]
struct WeeklySlots {
    time_zone: Tz,
    days: DaySet,
    start: NaiveTime,
    end: NaiveTime,
}

impl WeeklySlots {
    /// Judged on local wall-clock time, so a slot keeps its local hours across DST changes. A
    /// local time the change skips never occurs (a 02:00-03:00 slot is empty that day); one it
    /// repeats occurs twice (the slot is active both times).
    fn contains(&self, at: DateTime<Utc>) -> bool {
        let local = at.with_timezone(&self.time_zone);
        let (day, time) = (local.weekday(), local.time());
        if self.start < self.end {
            self.days.contains(day) && self.start <= time && time < self.end
        } else {
            // Crosses midnight: the evening part on a listed day, the morning part on the day
            // after one. (`start == end` would be a whole day; validation refuses it.)
            (self.days.contains(day) && time >= self.start) || (self.days.contains(day.pred()) && time < self.end)
        }
    }
}

/// A set of weekdays as bits, Monday first.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct DaySet(u8);

impl DaySet {
    pub(super) fn of(days: &[Weekday]) -> Self {
        days.iter().fold(Self::default(), |set, day| set.with(*day))
    }

    pub(super) fn contains(self, day: Weekday) -> bool {
        self.0 & Self::bit(day) != 0
    }

    pub(super) fn with(self, day: Weekday) -> Self {
        Self(self.0 | Self::bit(day))
    }

    fn bit(day: Weekday) -> u8 {
        1 << day.num_days_from_monday()
    }
}
