//! S3 errors: every failure a client can see, as S3's XML error with its code and status.

use std::borrow::Cow;

use axum::response::{IntoResponse, Response};
use http::{HeaderValue, StatusCode, header};

use super::xml::XmlWriter;

/// The S3 error codes this gateway answers with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorCode {
    AccessDenied,
    AuthorizationHeaderMalformed,
    AuthorizationQueryParametersError,
    BadDigest,
    BucketAlreadyOwnedByYou,
    BucketNotEmpty,
    EntityTooLarge,
    IncompleteBody,
    InternalError,
    InvalidAccessKeyId,
    InvalidArgument,
    InvalidBucketName,
    InvalidDigest,
    InvalidRange,
    InvalidRequest,
    KeyTooLongError,
    MalformedXML,
    MetadataTooLarge,
    MethodNotAllowed,
    MissingContentLength,
    NoSuchBucket,
    NoSuchKey,
    NoSuchCORSConfiguration,
    NoSuchBucketPolicy,
    NoSuchLifecycleConfiguration,
    NoSuchTagSet,
    ObjectLockConfigurationNotFoundError,
    ServerSideEncryptionConfigurationNotFoundError,
    AccessForbidden,
    NoSuchUpload,
    InvalidPart,
    InvalidPartNumber,
    InvalidPartOrder,
    EntityTooSmall,
    NotImplemented,
    PreconditionFailed,
    RequestTimeTooSkewed,
    ServiceUnavailable,
    SignatureDoesNotMatch,
    SlowDown,
    XAmzContentSHA256Mismatch,
}

impl ErrorCode {
    pub fn as_str(self) -> &'static str {
        use ErrorCode::*;
        match self {
            AccessDenied => "AccessDenied",
            AuthorizationHeaderMalformed => "AuthorizationHeaderMalformed",
            AuthorizationQueryParametersError => "AuthorizationQueryParametersError",
            BadDigest => "BadDigest",
            BucketAlreadyOwnedByYou => "BucketAlreadyOwnedByYou",
            BucketNotEmpty => "BucketNotEmpty",
            EntityTooLarge => "EntityTooLarge",
            IncompleteBody => "IncompleteBody",
            InternalError => "InternalError",
            InvalidAccessKeyId => "InvalidAccessKeyId",
            InvalidArgument => "InvalidArgument",
            InvalidBucketName => "InvalidBucketName",
            InvalidDigest => "InvalidDigest",
            InvalidRange => "InvalidRange",
            InvalidRequest => "InvalidRequest",
            KeyTooLongError => "KeyTooLongError",
            MalformedXML => "MalformedXML",
            MetadataTooLarge => "MetadataTooLarge",
            MethodNotAllowed => "MethodNotAllowed",
            MissingContentLength => "MissingContentLength",
            NoSuchBucket => "NoSuchBucket",
            NoSuchKey => "NoSuchKey",
            NoSuchCORSConfiguration => "NoSuchCORSConfiguration",
            NoSuchBucketPolicy => "NoSuchBucketPolicy",
            NoSuchLifecycleConfiguration => "NoSuchLifecycleConfiguration",
            NoSuchTagSet => "NoSuchTagSet",
            ObjectLockConfigurationNotFoundError => "ObjectLockConfigurationNotFoundError",
            ServerSideEncryptionConfigurationNotFoundError => {
                "ServerSideEncryptionConfigurationNotFoundError"
            }
            AccessForbidden => "AccessForbidden",
            NoSuchUpload => "NoSuchUpload",
            InvalidPart => "InvalidPart",
            InvalidPartNumber => "InvalidPartNumber",
            InvalidPartOrder => "InvalidPartOrder",
            EntityTooSmall => "EntityTooSmall",
            NotImplemented => "NotImplemented",
            PreconditionFailed => "PreconditionFailed",
            RequestTimeTooSkewed => "RequestTimeTooSkewed",
            ServiceUnavailable => "ServiceUnavailable",
            SignatureDoesNotMatch => "SignatureDoesNotMatch",
            SlowDown => "SlowDown",
            XAmzContentSHA256Mismatch => "XAmzContentSHA256Mismatch",
        }
    }

    pub fn status(self) -> StatusCode {
        use ErrorCode::*;
        match self {
            AccessDenied | InvalidAccessKeyId | RequestTimeTooSkewed | SignatureDoesNotMatch => {
                StatusCode::FORBIDDEN
            }
            NoSuchBucket
            | NoSuchKey
            | NoSuchUpload
            | NoSuchCORSConfiguration
            | NoSuchBucketPolicy
            | NoSuchLifecycleConfiguration
            | NoSuchTagSet
            | ObjectLockConfigurationNotFoundError
            | ServerSideEncryptionConfigurationNotFoundError => StatusCode::NOT_FOUND,
            AccessForbidden => StatusCode::FORBIDDEN,
            BucketAlreadyOwnedByYou | BucketNotEmpty => StatusCode::CONFLICT,
            InvalidRange | InvalidPartNumber => StatusCode::RANGE_NOT_SATISFIABLE,
            PreconditionFailed => StatusCode::PRECONDITION_FAILED,
            MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            MissingContentLength => StatusCode::LENGTH_REQUIRED,
            NotImplemented => StatusCode::NOT_IMPLEMENTED,
            InternalError => StatusCode::INTERNAL_SERVER_ERROR,
            ServiceUnavailable | SlowDown => StatusCode::SERVICE_UNAVAILABLE,
            AuthorizationHeaderMalformed
            | AuthorizationQueryParametersError
            | BadDigest
            | EntityTooLarge
            | EntityTooSmall
            | InvalidPart
            | InvalidPartOrder
            | IncompleteBody
            | InvalidArgument
            | InvalidBucketName
            | InvalidDigest
            | InvalidRequest
            | KeyTooLongError
            | MalformedXML
            | MetadataTooLarge
            | XAmzContentSHA256Mismatch => StatusCode::BAD_REQUEST,
        }
    }
}

/// An S3 error response.
#[derive(Clone, Debug, thiserror::Error)]
#[error("{}: {message}", code.as_str())]
pub struct S3Error {
    pub code: ErrorCode,
    pub message: Cow<'static, str>,
    /// The bucket or key the error is about, echoed as `<Resource>`.
    pub resource: Option<String>,
}

impl S3Error {
    pub fn new(code: ErrorCode, message: impl Into<Cow<'static, str>>) -> Self {
        S3Error {
            code,
            message: message.into(),
            resource: None,
        }
    }

    pub fn with_resource(mut self, resource: impl Into<String>) -> Self {
        self.resource = Some(resource.into());
        self
    }

    pub fn internal(what: impl std::fmt::Display) -> Self {
        tracing::error!(error = %what, "internal error");
        S3Error::new(
            ErrorCode::InternalError,
            "We encountered an internal error. Please try again.",
        )
    }

    pub fn no_such_bucket(bucket: &str) -> Self {
        S3Error::new(
            ErrorCode::NoSuchBucket,
            "The specified bucket does not exist",
        )
        .with_resource(bucket)
    }

    pub fn no_such_key(key: &str) -> Self {
        S3Error::new(ErrorCode::NoSuchKey, "The specified key does not exist.").with_resource(key)
    }

    pub fn not_implemented(what: &str) -> Self {
        S3Error::new(
            ErrorCode::NotImplemented,
            format!("{what} is not implemented by this gateway"),
        )
    }

    pub fn to_xml(&self, request_id: &str) -> Vec<u8> {
        let mut w = XmlWriter::new();
        w.open("Error");
        w.leaf("Code", self.code.as_str());
        w.leaf("Message", &self.message);
        if let Some(r) = &self.resource {
            w.leaf("Resource", r);
        }
        w.leaf("RequestId", request_id);
        w.close("Error");
        w.finish()
    }
}

impl IntoResponse for S3Error {
    fn into_response(self) -> Response {
        let request_id = format!("{:016X}", rand::random::<u64>());
        let body = self.to_xml(&request_id);
        let mut resp = (self.code.status(), body).into_response();
        let h = resp.headers_mut();
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/xml"),
        );
        if let Ok(v) = HeaderValue::from_str(&request_id) {
            h.insert("x-amz-request-id", v);
        }
        resp
    }
}
