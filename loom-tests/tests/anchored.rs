//! Loom models of the default clock's counter held to the OS clock
//! (`Anchored`, `src/clock/anchored.rs`): readers racing a comparison that
//! moves the counter's offset, on the real code, with both clocks moved by
//! the model. No reading may be ahead of the trusted clock once the
//! counter has jumped ahead of it by more than a period: whichever reader
//! compares, one that sees the new period sees its offset.
//!
//! Without `--cfg tollgate_loom` the file is empty.

#![cfg(tollgate_loom)]

use std::sync::Arc;

use loom::sync::atomic::{AtomicU64, Ordering};
use loom::thread;
use loom_tests::model;
use tollgate::{Anchored, Clock};

/// A clock the model sets.
#[derive(Clone, Default)]
struct Set(Arc<AtomicU64>);

impl Clock for Set {
    fn now_nanos(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}

/// A millisecond, the clock's period between comparisons.
const PERIOD: u64 = 1_000_000;

/// The counter runs ahead of the trusted clock by far more than a period
/// (a rate calibrated fast over an idle stretch) while two readers read:
/// every reading that follows the jump is at most the trusted clock, in
/// every interleaving of the jump, the readers' loads and their
/// comparisons.
#[test]
fn no_reading_leads_the_trusted_clock_whichever_reader_compares() {
    model(|| {
        let (counter, trusted) = (Set::default(), Set::default());
        let clock = Arc::new(Anchored::new(counter.clone(), trusted.clone()));
        // The first reading compares: offset 0, the next period at PERIOD.
        assert_eq!(clock.now_nanos(), 0);
        let jump = {
            let (counter, trusted) = (counter.clone(), trusted.clone());
            thread::spawn(move || {
                trusted.0.store(2 * PERIOD, Ordering::SeqCst);
                counter.0.store(2 * PERIOD + 500, Ordering::SeqCst);
            })
        };
        let readers: Vec<_> = (0..2)
            .map(|_| {
                let (clock, trusted) = (Arc::clone(&clock), trusted.clone());
                thread::spawn(move || {
                    let reading = clock.now_nanos();
                    // The trusted clock only moves forward: read after the
                    // reading, it bounds what the reading may say.
                    let bound = trusted.now_nanos();
                    assert!(
                        reading <= bound,
                        "read {reading} with the trusted clock at {bound}"
                    );
                })
            })
            .collect();
        jump.join().unwrap();
        for reader in readers {
            reader.join().unwrap();
        }
        // Once the jump is done, a reading is the trusted clock's.
        assert_eq!(clock.now_nanos(), 2 * PERIOD);
    });
}
