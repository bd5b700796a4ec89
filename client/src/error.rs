//! The client's errors: what a caller can act on, without transport types.

use thiserror::Error;

/// Why a client call failed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ClientError {
    /// The request was refused as invalid; `message` names the field.
    #[error("invalid request: {message}")]
    Invalid {
        /// The server's explanation.
        message: String,
    },
    /// No endpoint could be reached.
    #[error("no understudy server reachable: {message}")]
    Unavailable {
        /// The last failure.
        message: String,
    },
    /// The client was shut down.
    #[error("the client is shut down")]
    Closed,
    /// The configuration given to the builder is unusable.
    #[error("invalid client configuration: {message}")]
    Config {
        /// What is wrong.
        message: String,
    },
}
