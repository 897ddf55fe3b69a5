//! Client identity: normalised address keys and forwarded-address resolution.
