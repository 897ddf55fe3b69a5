//! Attacks on the bucket, receipts and hierarchies.
