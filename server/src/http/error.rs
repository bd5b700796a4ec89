//! The one place where errors become HTTP answers: a missing or invalid
//! parameter, a refused command, an overloaded writer. v1 endpoints answer
//! with Nacos' plain-text bodies, v2 endpoints with the `Result` envelope;
//! either way the status is 4xx for anything the caller can fix, and the
//! message names the field.

use std::borrow::Cow;

use axum::extract::rejection::BytesRejection;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use understudy_core::Error as CoreError;
use understudy_proto::nacos::{ErrorCode, NacosResult};
use understudy_proto::DecodeError;

use crate::node::ProposeError;

/// An error answer.
#[derive(Debug, Clone)]
pub(crate) struct ApiError {
    status: StatusCode,
    code: ErrorCode,
    field: Option<Cow<'static, str>>,
    message: String,
    shape: Shape,
}

/// How an error answer is laid out besides its status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    /// v1 plain text, or the v2/v3 envelope with the message as `data`.
    Usual,
    /// Refused by Nacos' parameter check, which answers before any
    /// handler and in a shape of its own.
    ParamCheck,
    /// The v2/v3 envelope with `data` null, as Nacos answers some
    /// refusals; the message is only logged.
    NoData,
}

impl ApiError {
    fn new(
        status: StatusCode,
        code: ErrorCode,
        field: Option<Cow<'static, str>>,
        message: String,
    ) -> Self {
        Self {
            status,
            code,
            field,
            message,
            shape: Shape::Usual,
        }
    }

    /// A field Nacos' parameter check refuses (a port out of range, a
    /// cluster name with other characters), in its words. Nacos' check
    /// runs as a filter before the handler and answers 400 with the bare
    /// message and a CRLF, without a content type, whatever the API
    /// version; so does this.
    pub(crate) fn param_check(field: &'static str, message: impl Into<String>) -> Self {
        Self {
            shape: Shape::ParamCheck,
            ..Self::new(
                StatusCode::BAD_REQUEST,
                ErrorCode::ParameterValidateError,
                Some(Cow::Borrowed(field)),
                message.into(),
            )
        }
    }

    /// A refusal the caller can act on, worded by the adapter.
    pub(crate) fn bad_request(code: ErrorCode, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, code, None, message.into())
    }

    /// A required parameter is absent or blank.
    pub(crate) fn missing(field: &'static str) -> Self {
        Self::new(
            StatusCode::BAD_REQUEST,
            ErrorCode::ParameterMissing,
            Some(Cow::Borrowed(field)),
            format!("Param '{field}' is required."),
        )
    }

    /// A parameter is present but unusable.
    pub(crate) fn invalid(field: &'static str, reason: impl AsRef<str>) -> Self {
        Self::invalid_owned(Cow::Borrowed(field), reason)
    }

    /// Same, for a parameter whose name came from the request.
    pub(crate) fn invalid_owned(
        field: impl Into<Cow<'static, str>>,
        reason: impl AsRef<str>,
    ) -> Self {
        let field = field.into();
        let code = match field.as_ref() {
            "weight" => ErrorCode::WeightError,
            "metadata" => ErrorCode::InstanceMetadataError,
            "serviceName" => ErrorCode::ServiceNameError,
            "namespaceId" => ErrorCode::IllegalNamespace,
            _ => ErrorCode::ParameterValidateError,
        };
        let message = match field.as_ref() {
            // Nacos' words for a weight out of range (core's check).
            "weight" if reason.as_ref().starts_with("The weights range") => {
                format!("instance format invalid: {}", reason.as_ref())
            }
            _ => format!("invalid {field}: {}", reason.as_ref()),
        };
        Self::new(StatusCode::BAD_REQUEST, code, Some(field), message)
    }

    /// The caller lacks the right (a missing or wrong cluster secret).
    pub(crate) fn denied(message: impl Into<String>) -> Self {
        Self::new(
            StatusCode::FORBIDDEN,
            ErrorCode::AccessDenied,
            None,
            message.into(),
        )
    }

    /// The cluster cannot do it now (no leader, not the leader, a change
    /// under way); the message says which and names the leader if known.
    pub(crate) fn unavailable(message: impl Into<String>) -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            ErrorCode::ServerError,
            None,
            message.into(),
        )
    }

    /// The request contradicts what the registry holds (a service that
    /// exists with the other kind); `field` names where in the request.
    pub(crate) fn conflict(
        field: impl Into<Cow<'static, str>>,
        message: impl Into<String>,
    ) -> Self {
        Self::new(
            StatusCode::CONFLICT,
            ErrorCode::ResourceConflict,
            Some(field.into()),
            message.into(),
        )
    }

    /// An endpoint understudy does not serve; `instead` says what it does
    /// instead.
    pub(crate) fn not_implemented(instead: impl Into<String>) -> Self {
        Self::new(
            StatusCode::NOT_IMPLEMENTED,
            ErrorCode::ApiFunctionDisabled,
            None,
            instead.into(),
        )
    }

    /// Something asked for does not exist.
    pub(crate) fn not_found(code: ErrorCode, message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, code, None, message.into())
    }

    /// The body could not be read (too large, or broken).
    pub(crate) fn from_body(rejection: BytesRejection) -> Self {
        let status = rejection.status();
        if status == StatusCode::PAYLOAD_TOO_LARGE {
            Self::new(
                status,
                ErrorCode::ParameterValidateError,
                Some(Cow::Borrowed("body")),
                "request body is larger than the configured max_body_bytes".to_owned(),
            )
        } else {
            Self::new(
                StatusCode::BAD_REQUEST,
                ErrorCode::ParameterValidateError,
                Some(Cow::Borrowed("body")),
                format!("request body cannot be read: {rejection}"),
            )
        }
    }

    /// The same error with `data` null in the v2/v3 envelope.
    pub(crate) fn without_data(mut self) -> Self {
        self.shape = Shape::NoData;
        self
    }

    /// The same error answered with another HTTP status (Nacos answers
    /// some refusals with 200 and the code in the body).
    pub(crate) fn with_status(mut self, status: StatusCode) -> Self {
        self.status = status;
        self
    }

    /// Its Nacos error code.
    pub(crate) fn code(&self) -> ErrorCode {
        self.code
    }

    /// The field it names, if any.
    pub(crate) fn field(&self) -> Option<&str> {
        self.field.as_deref()
    }

    /// The HTTP status it answers with.
    pub(crate) fn status(&self) -> StatusCode {
        self.status
    }

    fn log(&self) {
        tracing::debug!(status = %self.status, field = self.field.as_deref(), message = %self.message, "request refused");
    }

    /// Renders as a v1 plain-text answer.
    pub(crate) fn v1(self) -> Response {
        self.log();
        if self.shape == Shape::ParamCheck {
            return self.param_check_answer();
        }
        (self.status, plain(self.message)).into_response()
    }

    fn param_check_answer(self) -> Response {
        let mut answer = Response::new(axum::body::Body::from(format!("{}\r\n", self.message)));
        *answer.status_mut() = self.status;
        answer
    }

    /// Renders as the `Result` envelope of v2 and v3. A missing parameter
    /// reads as Nacos writes it there.
    pub(crate) fn v2(self) -> Response {
        self.log();
        match self.shape {
            Shape::ParamCheck => return self.param_check_answer(),
            Shape::NoData => {
                let body = NacosResult {
                    code: self.code.code(),
                    message: self.code.message().to_owned(),
                    data: (),
                };
                return (self.status, Json(body)).into_response();
            }
            Shape::Usual => {}
        }
        let data = match (&self.code, &self.field) {
            (ErrorCode::ParameterMissing, Some(field)) => {
                let kind = match field.as_ref() {
                    "port" | "pageNo" | "pageSize" | "checkPort" => "Integer",
                    "healthy" | "useInstancePort4Check" => "Boolean",
                    _ => "String",
                };
                format!("Required parameter '{field}' type {kind} is not present")
            }
            _ => self.message,
        };
        let body = NacosResult {
            code: self.code.code(),
            message: self.code.message().to_owned(),
            data,
        };
        (self.status, Json(body)).into_response()
    }
}

/// Extractor rejections outside a handler's own rendering fall back to
/// the v1 shape.
impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        self.v1()
    }
}

/// v1's bare `true` on success.
pub(crate) fn v1_true(result: Result<(), ApiError>) -> Response {
    result.map_or_else(ApiError::v1, |()| Json(true).into_response())
}

/// v2's envelope around `true` on success.
pub(crate) fn v2_true(result: Result<(), ApiError>) -> Response {
    result.map_or_else(ApiError::v2, |()| {
        Json(NacosResult::success(true)).into_response()
    })
}

/// A `text/plain;charset=UTF-8` body, as Nacos v1 writes them.
pub(crate) fn plain(text: impl Into<String>) -> Response {
    (
        [(axum::http::header::CONTENT_TYPE, "text/plain;charset=UTF-8")],
        text.into(),
    )
        .into_response()
}

impl From<CoreError> for ApiError {
    fn from(error: CoreError) -> Self {
        let message = error.to_string();
        let bad = |code| Self::new(StatusCode::BAD_REQUEST, code, None, message.clone());
        match error {
            CoreError::Invalid { field, reason } => Self::invalid(field, reason),
            CoreError::ServiceNotFound { .. } => bad(ErrorCode::ServiceNotExist),
            CoreError::NotFound { .. } => Self::not_found(ErrorCode::ResourceNotFound, message),
            CoreError::ServiceExists { .. } => bad(ErrorCode::ServiceAlreadyExist),
            CoreError::ServiceNotEmpty { .. } => bad(ErrorCode::ServiceDeleteFailure),
            CoreError::KindMismatch { .. } => bad(ErrorCode::InstanceError),
            CoreError::InstanceNotFound { .. } => {
                Self::not_found(ErrorCode::InstanceNotFound, message)
            }
            CoreError::NamespaceExists { .. } => bad(ErrorCode::NamespaceAlreadyExist),
            CoreError::NamespaceNotFound { .. } => bad(ErrorCode::NamespaceNotExist),
            CoreError::CasMismatch { .. }
            | CoreError::LockHeld { .. }
            | CoreError::LockNotHeld { .. } => Self::new(
                StatusCode::CONFLICT,
                ErrorCode::ResourceConflict,
                None,
                message.clone(),
            ),
            // A quota, as gRPC's RESOURCE_EXHAUSTED maps to HTTP.
            CoreError::OverLimit { setting, .. } => Self::new(
                StatusCode::TOO_MANY_REQUESTS,
                ErrorCode::ParameterValidateError,
                Some(Cow::Borrowed(setting)),
                message.clone(),
            ),
            CoreError::NamespaceNotEmpty { .. } | CoreError::HistoryCompacted { .. } => {
                bad(ErrorCode::ParameterValidateError)
            }
        }
    }
}

impl From<DecodeError> for ApiError {
    fn from(error: DecodeError) -> Self {
        Self::invalid(error.field, error.reason)
    }
}

impl From<ProposeError> for ApiError {
    fn from(error: ProposeError) -> Self {
        match error {
            ProposeError::Rejected(core) => core.into(),
            ProposeError::Busy | ProposeError::ShuttingDown | ProposeError::Unavailable { .. } => {
                Self::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    ErrorCode::ServerError,
                    None,
                    error.to_string(),
                )
            }
        }
    }
}
