//! HTTP-date (RFC 9110 section 5.6.7) as Unix seconds, for Retry-After.
//!
//! The `httpdate` crate reads the three forms and checks the calendar and
//! the day name; this module is a thin wrapper around it for what it does
//! not do (checked against httpdate 1.0; the unit tests below pin each
//! point, so an upgrade that changes one fails a test rather than changing
//! behaviour silently). The wrapper only rewrites the text into an
//! IMF-fixdate httpdate accepts and corrects the result; every check of the
//! calendar stays httpdate's.
//!
//! - **RFC 850 two-digit years.** httpdate uses a fixed pivot (`00`-`69`
//!   as 20xx, `70`-`99` as 19xx). RFC 9110 wants the year chosen relative
//!   to the time of receipt: one that "appears to be more than 50 years in
//!   the future" is the most recent past year with those digits. Received
//!   in 2026, `70` means 2070, not 1970.
//! - **Second 60** (a leap second, only ever 23:59:60 UTC), which the
//!   grammar allows and httpdate rejects: read as 23:59:59 plus one second,
//!   the first instant after the leap second in Unix time.
//! - **Years outside 1970-9999**, which httpdate rejects: such a date is
//!   valid and simply in the past (or, after the 50-year rule, far ahead).
//!   The year is moved by whole 400-year Gregorian cycles, which repeat
//!   weekdays and leap days exactly, into httpdate's range, and the result
//!   moved back by the same number of cycles.
//! - **The asctime day with a single space** (`Sep 8`), which `asctime`
//!   output copied through some tools has. RFC 9110 asks recipients to be
//!   robust when parsing timestamps, so the missing pad is inserted.

/// Seconds in a day; Unix time has no leap seconds.
const DAY: i64 = 86_400;

/// A Gregorian cycle: after 400 years (146 097 days, a whole number of
/// weeks) dates fall on the same weekdays and leap days recur.
const CYCLE_YEARS: i64 = 400;
const CYCLE_SECS: i64 = 146_097 * DAY;

/// The first year httpdate reads.
const FIRST_YEAR: i64 = 1970;

/// Day names as RFC 850 writes them, Monday first; the first three letters
/// are IMF-fixdate's.
const DAY_NAMES_LONG: [&str; 7] = [
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
];

const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
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
    let text = std::str::from_utf8(value).ok()?;
    let fields = Fields::imf_fixdate(text)
        .or_else(|| Fields::asctime(text))
        .or_else(|| Fields::rfc850(text, received))?;
    fields.resolve()
}

/// An HTTP-date's fields as text, the year as a number. Only the year and
/// the time of day are looked at here; httpdate checks the rest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Fields<'a> {
    /// Three letters, as IMF-fixdate writes it.
    day_name: &'a str,
    day: Day<'a>,
    month: &'a str,
    year: i64,
    /// `HH:MM:SS`.
    time: &'a str,
}

impl<'a> Fields<'a> {
    /// `Sun, 06 Nov 1994 08:49:37 GMT`.
    fn imf_fixdate(text: &'a str) -> Option<Self> {
        let (day_name, rest) = text.split_once(", ")?;
        let rest = rest.strip_suffix(" GMT")?;
        let [day, month, year, time] = words(rest)?;
        Some(Fields {
            day_name,
            day: Day::Written(day),
            month,
            year: four_digits(year)?,
            time,
        })
    }

    /// `Sun Nov  6 08:49:37 1994`, or leniently `Sun Nov 6 08:49:37 1994`.
    fn asctime(text: &'a str) -> Option<Self> {
        let words: Vec<&str> = text.split(' ').collect();
        let (day_name, month, day, time, year) = match words[..] {
            // "Nov  6": the grammar pads a one-digit day with a space.
            [day_name, month, "", day, time, year] if day.len() == 1 => {
                (day_name, month, day, time, year)
            }
            // "Nov 16", or "Nov 6" with the pad left out.
            [day_name, month, day, time, year] => (day_name, month, day, time, year),
            _ => return None,
        };
        Some(Fields {
            day_name,
            day: Day::new(day),
            month,
            year: four_digits(year)?,
            time,
        })
    }

    /// `Sunday, 06-Nov-94 08:49:37 GMT`, its year chosen by the 50-year
    /// rule against the receive time.
    fn rfc850(text: &'a str, received: i64) -> Option<Self> {
        let (long_name, rest) = text.split_once(", ")?;
        let day_name = DAY_NAMES_LONG
            .iter()
            .find(|name| **name == long_name)
            .map(|name| &name[..3])?;
        let (date, rest) = rest.split_once(' ')?;
        let time = rest.strip_suffix(" GMT")?;
        let mut parts = date.split('-');
        let (day, month, yy) = (parts.next()?, parts.next()?, parts.next()?);
        if parts.next().is_some() || yy.len() != 2 || !is_digits(yy) {
            return None;
        }
        let yy = yy.parse::<i64>().ok()?;
        if day.len() != 2 {
            return None;
        }
        let year = fifty_year_rule(yy, (month_index(month)?, day, time), received)?;
        Some(Fields {
            day_name,
            day: Day::Written(day),
            month,
            year,
            time,
        })
    }

    /// The Unix time of these fields, if httpdate finds them a real instant
    /// with the right day name.
    fn resolve(self) -> Option<i64> {
        // A leap second is only ever inserted as 23:59:60 UTC; 12:30:60
        // names no instant and is left for httpdate to refuse.
        let (time, leap) = match self.time {
            "23:59:60" => ("23:59:59", 1),
            time => (time, 0),
        };
        let cycles = (self.year - FIRST_YEAR).div_euclid(CYCLE_YEARS);
        let year = self.year - cycles * CYCLE_YEARS;
        let imf = format!(
            "{}, {} {} {year} {time} GMT",
            self.day_name, self.day, self.month
        );
        let since_epoch = httpdate::parse_http_date(&imf)
            .ok()?
            .duration_since(std::time::UNIX_EPOCH)
            .ok()?;
        let seconds = i64::try_from(since_epoch.as_secs()).ok()?;
        Some(seconds + cycles * CYCLE_SECS + leap)
    }
}

/// The day of the month as written, read as IMF-fixdate's two digits: a
/// lone digit (asctime's, its pad taken off) is one with a leading zero.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Day<'a> {
    Padded(&'a str),
    Written(&'a str),
}

impl<'a> Day<'a> {
    fn new(day: &'a str) -> Self {
        if day.len() == 1 {
            Day::Padded(day)
        } else {
            Day::Written(day)
        }
    }
}

impl std::fmt::Display for Day<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Day::Padded(digit) => write!(f, "0{digit}"),
            Day::Written(day) => f.write_str(day),
        }
    }
}

/// Exactly four space-separated words.
fn words(text: &str) -> Option<[&str; 4]> {
    let mut words = text.split(' ');
    let four = [words.next()?, words.next()?, words.next()?, words.next()?];
    words.next().is_none().then_some(four)
}

fn is_digits(text: &str) -> bool {
    text.bytes().all(|b| b.is_ascii_digit())
}

fn four_digits(text: &str) -> Option<i64> {
    if text.len() == 4 && is_digits(text) {
        text.parse().ok()
    } else {
        None
    }
}

fn month_index(month: &str) -> Option<usize> {
    MONTHS.iter().position(|m| *m == month)
}

/// RFC 9110: a two-digit year that "appears to be more than 50 years in
/// the future" is "the most recent year in the past that had the same last
/// two digits". So the year is the latest one ending in `yy` whose date
/// (month index, two-digit day, `HH:MM:SS`, compared field by field as the
/// calendar reads "50 years from now", which needs no 29 February in the
/// limit's year) is at most 50 years after receipt.
fn fifty_year_rule(yy: i64, date: (usize, &str, &str), received: i64) -> Option<i64> {
    // The receive time's calendar fields, from httpdate's formatting of the
    // same instant moved into its range by whole cycles.
    let cycles = received.div_euclid(CYCLE_SECS);
    let in_range = std::time::UNIX_EPOCH
        + std::time::Duration::from_secs(received.rem_euclid(CYCLE_SECS).unsigned_abs());
    let now = httpdate::fmt_http_date(in_range);
    let [_, now_day, now_month, now_year] = words(now.get(..16)?)?;
    let now_year = now_year.parse::<i64>().ok()? + cycles * CYCLE_YEARS;
    let limit = (
        now_year + 50,
        month_index(now_month)?,
        now_day,
        now.get(17..25)?,
    );
    let (month, day, time) = date;
    // Start a century above and step down: at most three steps.
    let mut year = now_year - now_year.rem_euclid(100) + 100 + yy;
    while (year, month, day, time) > limit {
        year -= 100;
    }
    Some(year)
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use proptest::prelude::*;

    use super::*;

    /// 2026-09-08 12:00:00 UTC, the seed fixture's reference time.
    const REFERENCE: i64 = 1_788_868_800;

    fn read(value: &str, received: i64) -> Option<i64> {
        unix_seconds(value.as_bytes(), received)
    }

    fn imf(seconds: i64) -> String {
        httpdate::fmt_http_date(UNIX_EPOCH + Duration::from_secs(seconds.unsigned_abs()))
    }

    #[test]
    fn reference_time_is_what_the_fixture_says() {
        assert_eq!(imf(REFERENCE), "Tue, 08 Sep 2026 12:00:00 GMT");
    }

    // What httpdate 1.0 does with each gap. If a future version closes one,
    // these fail and the module comment should be revisited.

    #[test]
    fn httpdate_uses_a_fixed_century_pivot_for_rfc850() {
        let t = httpdate::parse_http_date("Tuesday, 08-Sep-70 12:00:00 GMT").unwrap();
        assert_eq!(httpdate::fmt_http_date(t), "Tue, 08 Sep 1970 12:00:00 GMT");
        // ... so the 2070 date, whose day name is right, is refused.
        assert!(httpdate::parse_http_date("Monday, 08-Sep-70 12:00:00 GMT").is_err());
        assert_eq!(
            read("Monday, 08-Sep-70 12:00:00 GMT", REFERENCE),
            Some(3_177_403_200)
        );
        assert_eq!(read("Tuesday, 08-Sep-70 12:00:00 GMT", REFERENCE), None);
    }

    #[test]
    fn httpdate_rejects_the_leap_second() {
        assert!(httpdate::parse_http_date("Sat, 31 Dec 2016 23:59:60 GMT").is_err());
        // 2017-01-01T00:00:00Z.
        assert_eq!(
            read("Sat, 31 Dec 2016 23:59:60 GMT", 0),
            Some(1_483_228_800)
        );
    }

    #[test]
    fn httpdate_rejects_years_before_1970() {
        assert!(httpdate::parse_http_date("Wed, 31 Dec 1969 23:59:59 GMT").is_err());
        assert_eq!(read("Wed, 31 Dec 1969 23:59:59 GMT", 0), Some(-1));
        assert_eq!(
            read("Sat, 01 Jan 0000 00:00:00 GMT", 0),
            Some(-62_167_219_200)
        );
    }

    #[test]
    fn httpdate_rejects_a_single_space_asctime_day() {
        assert!(httpdate::parse_http_date("Tue Sep 8 12:00:07 2026").is_err());
        assert!(httpdate::parse_http_date("Tue Sep  8 12:00:07 2026").is_ok());
        assert_eq!(read("Tue Sep 8 12:00:07 2026", 0), Some(REFERENCE + 7));
        assert_eq!(read("Tue Sep  8 12:00:07 2026", 0), Some(REFERENCE + 7));
        assert_eq!(read("Tue Sep 08 12:00:07 2026", 0), Some(REFERENCE + 7));
    }

    #[test]
    fn httpdate_trims_more_than_optional_whitespace_but_we_do_not_let_it() {
        assert!(httpdate::parse_http_date("\nSun, 06 Nov 1994 08:49:37 GMT\r").is_ok());
        assert_eq!(read("\nSun, 06 Nov 1994 08:49:37 GMT\r", 0), None);
    }

    #[test]
    fn leap_second_only_at_23_59() {
        assert_eq!(read("Sat, 31 Dec 2016 12:00:60 GMT", 0), None);
        assert_eq!(read("Sat, 31 Dec 2016 23:58:60 GMT", 0), None);
        assert_eq!(read("Sat, 31 Dec 2016 23:59:61 GMT", 0), None);
        // Any month's end (and, leniently, any day): the IERS may announce
        // leap seconds we cannot know about, so no table is consulted.
        assert_eq!(
            read("Thu, 30 Jun 2016 23:59:60 GMT", 0),
            Some(1_467_331_200)
        );
    }

    #[test]
    fn calendar_and_day_name_are_checked() {
        for bad in [
            "Tue, 31 Feb 2026 12:00:00 GMT",
            "Sun, 29 Feb 2026 12:00:00 GMT",
            "Mon, 08 Sep 2026 12:00:00 GMT",
            "Tue, 00 Sep 2026 12:00:00 GMT",
            "Tue, 08 Sep 2026 24:00:00 GMT",
            "Tue, 08 Sep 2026 12:60:00 GMT",
            "Tue, 08 Sep 2026 12:00:00 UTC",
            "Tue, 08 Sep 26 12:00:00 GMT",
            "Tue, 08 Sep +026 12:00:00 GMT",
            "Tue,  8 Sep 2026 12:00:00 GMT",
            "Tue, 8 Sep 2026 12:00:00 GMT",
            "Tuesday, 8-Sep-26 12:00:00 GMT",
            "Tue, 08 Sep 2026 12:00:00 GMT ",
            "Mon Sep  8 12:00:07 2026",
            "Tue Sep   8 12:00:07 2026",
            "Tue Sep x 12:00:07 2026",
            "Tuesday, 08-Sep-26 12:00:00 UTC",
            "Tuesday, 08-Sep-2026 12:00:00 GMT",
            "Tuesday, 08-Sep-+6 12:00:00 GMT",
            "Tue, 08-Sep-26 12:00:00 GMT",
            "Tues, 08 Sep 2026 12:00:00 GMT",
        ] {
            assert_eq!(read(bad, REFERENCE), None, "{bad:?}");
        }
        assert_eq!(
            read("Thu, 29 Feb 2024 00:00:00 GMT", 0),
            Some(1_709_164_800)
        );
        // 1600 and 2000 are leap years, 1900 and 2100 are not, on both
        // sides of httpdate's range.
        assert!(read("Tue, 29 Feb 1600 00:00:00 GMT", 0).is_some());
        assert_eq!(read("Thu, 29 Feb 1900 00:00:00 GMT", 0), None);
        assert_eq!(read("Mon, 29 Feb 2100 00:00:00 GMT", 0), None);
    }

    proptest! {
        /// The three forms of one instant read as that instant (the RFC 850
        /// one received at that instant, so its century is the instant's).
        #[test]
        fn every_form_of_an_instant_reads_as_it(seconds in 0i64..253_402_300_800) {
            let imf = imf(seconds);
            prop_assert_eq!(read(&imf, 0), Some(seconds));
            // "Sun Nov  6 08:49:37 1994", and the lenient "Sun Nov 6 ...".
            let b = imf.as_bytes();
            let day = if b[5] == b'0' { format!(" {}", &imf[6..7]) } else { imf[5..7].to_string() };
            let asctime = format!("{} {} {} {} {}", &imf[..3], &imf[8..11], day, &imf[17..25], &imf[12..16]);
            prop_assert!(httpdate::parse_http_date(&asctime).is_ok());
            prop_assert_eq!(read(&asctime, 0), Some(seconds));
            prop_assert_eq!(read(&asctime.replace("  ", " "), 0), Some(seconds));
            let weekday = DAY_NAMES_LONG.iter().find(|d| d.starts_with(&imf[..3])).unwrap();
            let rfc850 = format!("{weekday}, {}-{}-{} {} GMT", &imf[5..7], &imf[8..11], &imf[14..16], &imf[17..25]);
            prop_assert_eq!(read(&rfc850, seconds), Some(seconds));
        }

        /// A date whole 400-year cycles earlier or later is exactly that
        /// many cycles' seconds away, with the same day name: the rule the
        /// wrapper uses to bring years outside 1970-9999 into httpdate's
        /// range.
        #[test]
        fn cycles_keep_day_names_and_shift_by_their_length(
            seconds in 0i64..253_402_300_800,
            cycles in -4i64..20,
        ) {
            let imf = imf(seconds);
            let year: i64 = imf[12..16].parse().unwrap();
            let moved = year + cycles * CYCLE_YEARS;
            prop_assume!((0..=9999).contains(&moved) || cycles > 0);
            let text = format!("{}{moved:04}{}", &imf[..12], &imf[16..]);
            let expected = (moved <= 9999).then_some(seconds + cycles * CYCLE_SECS);
            prop_assert_eq!(read(&text, 0), expected);
        }

        /// The RFC 850 year is the latest one ending in those digits that is
        /// at most 50 years after receipt.
        #[test]
        fn fifty_year_rule_picks_the_latest_year_within_fifty(
            received in -5_000_000_000_000i64..5_000_000_000_000,
            yy in 0i64..100,
        ) {
            let year = fifty_year_rule(yy, (5, "15", "00:00:00"), received).unwrap();
            let now = Received::of(received);
            prop_assert_eq!(year.rem_euclid(100), yy);
            prop_assert!((year, 5, "15", "00:00:00") <= now.plus_fifty());
            prop_assert!((year + 100, 5, "15", "00:00:00") > now.plus_fifty());
        }
    }

    /// The receive time's calendar fields.
    struct Received {
        year: i64,
        month: usize,
        day: String,
        time: String,
    }

    impl Received {
        fn of(received: i64) -> Self {
            let cycles = received.div_euclid(CYCLE_SECS);
            let text = imf(received.rem_euclid(CYCLE_SECS));
            Received {
                year: text[12..16].parse::<i64>().unwrap() + cycles * CYCLE_YEARS,
                month: month_index(&text[8..11]).unwrap(),
                day: text[5..7].to_string(),
                time: text[17..25].to_string(),
            }
        }

        fn plus_fifty(&self) -> (i64, usize, &str, &str) {
            (self.year + 50, self.month, &self.day, &self.time)
        }
    }
}
