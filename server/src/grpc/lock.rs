//! Nacos 3's `LockOperationRequest` (module `lock`): take or release a
//! lock through raft, so one holder at a time across every node. A lock
//! refused because it is held, or a release of one not held, answers
//! `result: false`, as Nacos does; a malformed request (an `EXPIRE`, which
//! Nacos does not handle either) is an `ErrorResponse` naming the field.

use understudy_core::{Error as CoreError, Op};
use understudy_proto::grpc::Payload;
use understudy_proto::nacos3_rpc::{LockOperation, LockOperationBody, LockOperationRequest};
use understudy_proto::nacos_rpc::{seal, Envelope, Response};

use super::kind::Failure;
use crate::node::{Node, ProposeError};

/// Answers a `LockOperationRequest`.
pub(crate) async fn operate(node: &Node, envelope: &Envelope) -> Result<Payload, Failure> {
    let request: LockOperationRequest = envelope.decode()?;
    let op = match request.operation()? {
        LockOperation::Acquire { kind, key, ttl } => Op::AcquireLock { kind, key, ttl },
        LockOperation::Release { kind, key } => Op::ReleaseLock { kind, key },
    };
    let result = match node.propose(op).await {
        Ok(_) => true,
        Err(ProposeError::Rejected(CoreError::LockHeld { .. } | CoreError::LockNotHeld { .. })) => {
            false
        }
        Err(e) => return Err(e.into()),
    };
    Ok(seal(
        "LockOperationResponse",
        &Response::ok(LockOperationBody { result }),
    ))
}
