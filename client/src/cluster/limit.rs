//! Consumer-side limits: concurrency and rate per method, and the retry
//! budget. (Skeleton: to be written.)
