//! Limits on work in flight, as opposed to its rate.
