//! Instance metadata keys the client writes and reads.

/// A provider's start time, epoch milliseconds (Dubbo's `timestamp`).
/// Registrations through the client carry it; consumers warm an instance
/// up from it.
pub const START_TIMESTAMP: &str = "timestamp";
