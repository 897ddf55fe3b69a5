//! HTTP-date (RFC 9110 section 5.6.7) as Unix seconds, for Retry-After.
//!
//! The `httpdate` crate reads the preferred IMF-fixdate and asctime forms
//! correctly, and it is tried first for them. What it does not do, checked
//! against httpdate 1.0 (the unit tests below pin each point, so an upgrade
//! that changes one shows up as a failing test rather than a silent change):
//!
//! - It reads the two-digit year of an RFC 850 date with a fixed pivot
//!   (`00`-`69` as 20xx, `70`-`99` as 19xx). RFC 9110 wants the year chosen
//!   relative to the time of receipt: one that "appears to be more than 50
//!   years in the future" is the most recent past year with those digits.
//!   Received in 2026, `70` means 2070, not 1970.
//! - It rejects second `60`, which the grammar allows for a leap second.
//! - It rejects years before 1970. Such a date is valid and simply in the
//!   past: the wait is zero, not "invalid".
//! - It rejects the asctime day written with a single space (`Sep 8`),
//!   which `asctime` output copied through some tools has. RFC 9110 asks
//!   recipients to be robust when parsing timestamps, so the hand path
//!   accepts it.
//!
//! Those cases take the hand-written path below, which implements the whole
//! grammar. Both paths require the day name to agree with the date, so a
//! value is accepted or rejected the same way whichever path reads it (a
//! unit test checks that the two agree wherever httpdate accepts).

/// Seconds in a day; Unix time has no leap seconds.
const DAY: i64 = 86_400;

/// Short and long day names, Monday first (index = ISO weekday - 1).
const DAY_NAMES: [&[u8]; 7] = [b"Mon", b"Tue", b"Wed", b"Thu", b"Fri", b"Sat", b"Sun"];
const DAY_NAMES_LONG: [&[u8]; 7] = [
    b"Monday",
    b"Tuesday",
    b"Wednesday",
    b"Thursday",
    b"Friday",
    b"Saturday",
    b"Sunday",
];
const MONTHS: [&[u8]; 12] = [
    b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov", b"Dec",
];

/// The Unix time (whole seconds, possibly negative) an HTTP-date names, or
/// `None` if `value` is not one. `value` has its optional whitespace already
/// removed; `received` is the floor of the receive time in Unix seconds,
/// needed only for the RFC 850 year.
pub(super) fn unix_seconds(value: &[u8], received: i64) -> Option<i64> {
    // Dates are printable ASCII. Checking this first also means httpdate's
    // own `trim()` (all Unicode whitespace) cannot widen what we accept:
    // the value no longer starts or ends with a space, and holds no CR, LF,
    // tab or other control.
    if !value.iter().all(|b| (b' '..=b'~').contains(b)) {
        return None;
    }
    // Only the RFC 850 form contains '-'; it must not reach httpdate's fixed
    // century pivot.
    if !value.contains(&b'-')
        && let Ok(text) = std::str::from_utf8(value)
        && let Ok(time) = httpdate::parse_http_date(text)
        && let Ok(since_epoch) = time.duration_since(std::time::UNIX_EPOCH)
        && let Ok(seconds) = i64::try_from(since_epoch.as_secs())
    {
        return Some(seconds);
    }
    Fields::lex(value)?.resolve(received)
}

/// The year as written: four digits, or RFC 850's two.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Year {
    Full(i64),
    TwoDigit(i64),
}

/// An HTTP-date's fields, syntactically valid but not yet checked against
/// the calendar.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Fields {
    /// 0 = Monday.
    weekday: i64,
    year: Year,
    /// 1-12.
    month: i64,
    day: i64,
    hour: i64,
    minute: i64,
    second: i64,
}

impl Fields {
    /// Reads any of the three forms; `None` unless the whole value matches.
    fn lex(value: &[u8]) -> Option<Fields> {
        let mut c = Cursor(value);
        // The long names first: "Mon" is a prefix of "Monday".
        if let Some(weekday) = c.one_of(&DAY_NAMES_LONG) {
            // rfc850-date = day-name-l "," SP 2DIGIT "-" month "-" 2DIGIT SP time SP "GMT"
            c.literal(b", ")?;
            let day = c.digits(2)?;
            c.literal(b"-")?;
            let month = c.month()?;
            c.literal(b"-")?;
            let year = Year::TwoDigit(c.digits(2)?);
            c.literal(b" ")?;
            let (hour, minute, second) = c.time_of_day()?;
            c.literal(b" GMT")?;
            return c.end(Fields {
                weekday,
                year,
                month,
                day,
                hour,
                minute,
                second,
            });
        }
        let weekday = c.one_of(&DAY_NAMES)?;
        if c.literal(b", ").is_some() {
            // IMF-fixdate = day-name "," SP 2DIGIT SP month SP 4DIGIT SP time SP "GMT"
            let day = c.digits(2)?;
            c.literal(b" ")?;
            let month = c.month()?;
            c.literal(b" ")?;
            let year = Year::Full(c.digits(4)?);
            c.literal(b" ")?;
            let (hour, minute, second) = c.time_of_day()?;
            c.literal(b" GMT")?;
            return c.end(Fields {
                weekday,
                year,
                month,
                day,
                hour,
                minute,
                second,
            });
        }
        // asctime-date = day-name SP month SP ( 2DIGIT / ( SP DIGIT ) ) SP time SP 4DIGIT
        c.literal(b" ")?;
        let month = c.month()?;
        c.literal(b" ")?;
        // The grammar's "SP DIGIT" pads a one-digit day; a lone digit
        // (single space) is the lenient reading described in the module
        // comment.
        let _ = c.literal(b" ");
        let day = match c.digits(2) {
            Some(day) => day,
            None => c.digits(1)?,
        };
        c.literal(b" ")?;
        let (hour, minute, second) = c.time_of_day()?;
        c.literal(b" ")?;
        let year = Year::Full(c.digits(4)?);
        c.end(Fields {
            weekday,
            year,
            month,
            day,
            hour,
            minute,
            second,
        })
    }

    /// The Unix time of these fields, if they name a real instant whose day
    /// name agrees.
    fn resolve(self, received: i64) -> Option<i64> {
        let leap_second = self.second == 60;
        // A leap second is only ever inserted as 23:59:60 UTC; 12:30:60
        // names no instant.
        if self.hour > 23
            || self.minute > 59
            || self.second > 60
            || (leap_second && (self.hour, self.minute) != (23, 59))
        {
            return None;
        }
        let year = match self.year {
            Year::Full(year) => year,
            Year::TwoDigit(yy) => self.fifty_year_rule(yy, received),
        };
        if self.day < 1 || self.day > days_in_month(year, self.month) {
            return None;
        }
        let days = days_from_civil(year, self.month, self.day);
        // 1970-01-01 was a Thursday (index 3 counting from Monday).
        if (days + 3).rem_euclid(7) != self.weekday {
            return None;
        }
        // Unix time counts no leap seconds, so 23:59:60 lands on the next
        // day's 00:00:00: the first instant after 23:59:59, which is what
        // the sender meant by "after the leap second".
        Some(days * DAY + self.hour * 3600 + self.minute * 60 + self.second)
    }

    /// RFC 9110: a two-digit year that "appears to be more than 50 years in
    /// the future" is "the most recent year in the past that had the same
    /// last two digits". So the year is the latest one ending in `yy` whose
    /// date is at most 50 years after receipt.
    fn fifty_year_rule(&self, yy: i64, received: i64) -> i64 {
        let now = Civil::from_unix(received);
        // Compared field by field, as the calendar reads "50 years from
        // now"; this needs no 29 February in the limit's year.
        let limit = (
            now.year + 50,
            now.month,
            now.day,
            now.hour,
            now.minute,
            now.second,
        );
        let date = |year| {
            (
                year,
                self.month,
                self.day,
                self.hour,
                self.minute,
                self.second,
            )
        };
        // Start a century above and step down: at most three steps.
        let mut year = now.year - now.year.rem_euclid(100) + 100 + yy;
        while date(year) > limit {
            year -= 100;
        }
        year
    }
}

/// A forward-only reader over the value's bytes.
struct Cursor<'a>(&'a [u8]);

impl Cursor<'_> {
    fn literal(&mut self, expected: &[u8]) -> Option<()> {
        self.0 = self.0.strip_prefix(expected)?;
        Some(())
    }

    /// Exactly `n` ASCII digits.
    fn digits(&mut self, n: usize) -> Option<i64> {
        let (head, rest) = self.0.split_at_checked(n)?;
        if !head.iter().all(u8::is_ascii_digit) {
            return None;
        }
        self.0 = rest;
        Some(head.iter().fold(0, |acc, d| acc * 10 + i64::from(d - b'0')))
    }

    /// The index of the name the input starts with (names are
    /// case-sensitive in HTTP-date).
    fn one_of(&mut self, names: &[&[u8]]) -> Option<i64> {
        let (index, rest) = names
            .iter()
            .enumerate()
            .find_map(|(i, name)| Some((i, self.0.strip_prefix(*name)?)))?;
        self.0 = rest;
        i64::try_from(index).ok()
    }

    /// 1-12.
    fn month(&mut self) -> Option<i64> {
        Some(self.one_of(&MONTHS)? + 1)
    }

    /// `HH:MM:SS`, unchecked ranges.
    fn time_of_day(&mut self) -> Option<(i64, i64, i64)> {
        let hour = self.digits(2)?;
        self.literal(b":")?;
        let minute = self.digits(2)?;
        self.literal(b":")?;
        Some((hour, minute, self.digits(2)?))
    }

    /// `fields`, if nothing is left over.
    fn end(&self, fields: Fields) -> Option<Fields> {
        self.0.is_empty().then_some(fields)
    }
}

/// A proleptic Gregorian date and time of day, UTC.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Civil {
    year: i64,
    month: i64,
    day: i64,
    hour: i64,
    minute: i64,
    second: i64,
}

impl Civil {
    fn from_unix(seconds: i64) -> Civil {
        let days = seconds.div_euclid(DAY);
        let of_day = seconds.rem_euclid(DAY);
        let (year, month, day) = civil_from_days(days);
        Civil {
            year,
            month,
            day,
            hour: of_day / 3600,
            minute: of_day / 60 % 60,
            second: of_day % 60,
        }
    }
}

fn is_leap_year(year: i64) -> bool {
    year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if is_leap_year(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

// The two conversions below are the well-known era-based algorithms
// (400-year eras of 146 097 days, years starting in March so the leap day
// is last). They are exact for every year the callers pass: four-digit
// years, and receive times clamped to a few million years.

/// Days since 1970-01-01 of a proleptic Gregorian date (`month` 1-12).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year.rem_euclid(400);
    let month_from_march = (month + 9) % 12;
    let day_of_year = (153 * month_from_march + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// The inverse of [`days_from_civil`].
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let days = days + 719_468;
    let era = days.div_euclid(146_097);
    let day_of_era = days.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_from_march + 2) / 5 + 1;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use proptest::prelude::*;

    use super::*;

    /// 2026-09-08 12:00:00 UTC, the seed fixture's reference time.
    const REFERENCE: i64 = 1_788_868_800;

    fn hand(value: &str, received: i64) -> Option<i64> {
        Fields::lex(value.as_bytes())?.resolve(received)
    }

    #[test]
    fn reference_time_is_what_the_fixture_says() {
        let c = Civil::from_unix(REFERENCE);
        assert_eq!(
            (c.year, c.month, c.day, c.hour, c.minute, c.second),
            (2026, 9, 8, 12, 0, 0)
        );
    }

    // What httpdate 1.0 does with each gap. If a future version closes one,
    // these fail and the hand path's comment should be revisited.

    #[test]
    fn httpdate_uses_a_fixed_century_pivot_for_rfc850() {
        let t = httpdate::parse_http_date("Tuesday, 08-Sep-70 12:00:00 GMT").unwrap();
        assert_eq!(httpdate::fmt_http_date(t), "Tue, 08 Sep 1970 12:00:00 GMT");
        // ... so the 2070 date, whose day name is right, is refused.
        assert!(httpdate::parse_http_date("Monday, 08-Sep-70 12:00:00 GMT").is_err());
        assert_eq!(
            unix_seconds(b"Monday, 08-Sep-70 12:00:00 GMT", REFERENCE),
            Some(3_177_403_200)
        );
    }

    #[test]
    fn httpdate_rejects_the_leap_second() {
        assert!(httpdate::parse_http_date("Sat, 31 Dec 2016 23:59:60 GMT").is_err());
        // 2017-01-01T00:00:00Z.
        assert_eq!(
            unix_seconds(b"Sat, 31 Dec 2016 23:59:60 GMT", 0),
            Some(1_483_228_800)
        );
    }

    #[test]
    fn httpdate_rejects_years_before_1970() {
        assert!(httpdate::parse_http_date("Wed, 31 Dec 1969 23:59:59 GMT").is_err());
        assert_eq!(unix_seconds(b"Wed, 31 Dec 1969 23:59:59 GMT", 0), Some(-1));
    }

    #[test]
    fn httpdate_rejects_a_single_space_asctime_day() {
        assert!(httpdate::parse_http_date("Tue Sep 8 12:00:07 2026").is_err());
        assert!(httpdate::parse_http_date("Tue Sep  8 12:00:07 2026").is_ok());
        assert_eq!(
            unix_seconds(b"Tue Sep 8 12:00:07 2026", 0),
            Some(REFERENCE + 7)
        );
    }

    #[test]
    fn httpdate_trims_more_than_optional_whitespace_but_we_do_not_let_it() {
        assert!(httpdate::parse_http_date("\nSun, 06 Nov 1994 08:49:37 GMT\r").is_ok());
        assert_eq!(unix_seconds(b"\nSun, 06 Nov 1994 08:49:37 GMT\r", 0), None);
    }

    #[test]
    fn leap_second_only_at_23_59() {
        assert_eq!(hand("Sat, 31 Dec 2016 12:00:60 GMT", 0), None);
        assert_eq!(hand("Sat, 31 Dec 2016 23:58:60 GMT", 0), None);
        assert_eq!(hand("Sat, 31 Dec 2016 23:59:61 GMT", 0), None);
        // Any month's end (and, leniently, any day): the IERS may announce
        // leap seconds we cannot know about, so no table is consulted.
        assert_eq!(
            hand("Thu, 30 Jun 2016 23:59:60 GMT", 0),
            Some(1_467_331_200)
        );
    }

    #[test]
    fn calendar_and_day_name_are_checked() {
        assert_eq!(hand("Tue, 31 Feb 2026 12:00:00 GMT", 0), None);
        assert_eq!(hand("Sun, 29 Feb 2026 12:00:00 GMT", 0), None);
        assert_eq!(
            hand("Thu, 29 Feb 2024 00:00:00 GMT", 0),
            Some(1_709_164_800)
        );
        assert_eq!(hand("Mon, 08 Sep 2026 12:00:00 GMT", 0), None);
        assert_eq!(hand("Tue, 00 Sep 2026 12:00:00 GMT", 0), None);
        assert_eq!(hand("Tue, 08 Sep 2026 24:00:00 GMT", 0), None);
        assert_eq!(hand("Tue, 08 Sep 2026 12:60:00 GMT", 0), None);
    }

    #[test]
    fn civil_conversions_round_trip_across_eras() {
        for days in (-1_000_000..1_000_000).step_by(997) {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days);
            assert!((1..=12).contains(&m) && d >= 1 && d <= days_in_month(y, m));
        }
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(2000, 3, 1), 11_017);
        assert_eq!(days_from_civil(1600, 2, 29), -135_081);
    }

    proptest! {
        /// Wherever httpdate accepts, the hand path agrees with it, so which
        /// path reads a value never changes the answer.
        #[test]
        fn hand_path_agrees_with_httpdate(seconds in 0i64..253_402_300_800) {
            let time = UNIX_EPOCH + Duration::from_secs(seconds.unsigned_abs());
            let imf = httpdate::fmt_http_date(time);
            prop_assert_eq!(hand(&imf, 0), Some(seconds));
            // The same instant as asctime: "Sun Nov  6 08:49:37 1994".
            let b = imf.as_bytes();
            let day = if b[5] == b'0' { format!(" {}", &imf[6..7]) } else { imf[5..7].to_string() };
            let asctime = format!("{} {} {} {} {}", &imf[..3], &imf[8..11], day, &imf[17..25], &imf[12..16]);
            prop_assert!(httpdate::parse_http_date(&asctime).is_ok());
            prop_assert_eq!(hand(&asctime, 0), Some(seconds));
        }

        /// The RFC 850 year is the latest one ending in those digits that is
        /// at most 50 years after receipt.
        #[test]
        fn fifty_year_rule_picks_the_latest_year_within_fifty(
            received in -5_000_000_000_000i64..5_000_000_000_000,
            yy in 0i64..100,
        ) {
            let fields = Fields { weekday: 0, year: Year::TwoDigit(yy), month: 6, day: 15, hour: 0, minute: 0, second: 0 };
            let year = fields.fifty_year_rule(yy, received);
            let now = Civil::from_unix(received);
            prop_assert_eq!(year.rem_euclid(100), yy);
            let date = |y| (y, 6, 15, 0, 0, 0);
            let limit = (now.year + 50, now.month, now.day, now.hour, now.minute, now.second);
            prop_assert!(date(year) <= limit);
            prop_assert!(date(year + 100) > limit);
        }
    }
}
