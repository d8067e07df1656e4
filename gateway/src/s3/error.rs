//! S3 errors: every failure a client can see, as S3's XML error with its code and status.

use std::borrow::Cow;

use axum::response::{IntoResponse, Response};
use http::{HeaderValue, StatusCode, header};

use super::xml::XmlWriter;
use crate::store::{StoreError, UploadError};

/// The S3 error codes this gateway answers with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorCode {
    AccessDenied,
    AuthorizationHeaderMalformed,
    AuthorizationQueryParametersError,
    BadDigest,
    BucketAlreadyExists,
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
    InvalidTag,
    BadRequest,
    MalformedACLError,
    MissingSecurityHeader,
    KeyTooLongError,
    MalformedXML,
    MalformedPOSTRequest,
    MaxPostPreDataLengthExceededError,
    InvalidPolicyDocument,
    MetadataTooLarge,
    MethodNotAllowed,
    MissingContentLength,
    RequestHeaderSectionTooLarge,
    NoSuchBucket,
    NoSuchKey,
    NoSuchVersion,
    IllegalVersioningConfigurationException,
    InvalidBucketState,
    NoSuchObjectLockConfiguration,
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
            BucketAlreadyExists => "BucketAlreadyExists",
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
            InvalidTag => "InvalidTag",
            BadRequest => "BadRequest",
            MalformedACLError => "MalformedACLError",
            MissingSecurityHeader => "MissingSecurityHeader",
            KeyTooLongError => "KeyTooLongError",
            MalformedXML => "MalformedXML",
            MalformedPOSTRequest => "MalformedPOSTRequest",
            MaxPostPreDataLengthExceededError => "MaxPostPreDataLengthExceededError",
            InvalidPolicyDocument => "InvalidPolicyDocument",
            MetadataTooLarge => "MetadataTooLarge",
            MethodNotAllowed => "MethodNotAllowed",
            MissingContentLength => "MissingContentLength",
            RequestHeaderSectionTooLarge => "RequestHeaderSectionTooLarge",
            NoSuchBucket => "NoSuchBucket",
            NoSuchKey => "NoSuchKey",
            NoSuchVersion => "NoSuchVersion",
            InvalidBucketState => "InvalidBucketState",
            NoSuchObjectLockConfiguration => "NoSuchObjectLockConfiguration",
            IllegalVersioningConfigurationException => "IllegalVersioningConfigurationException",
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
            | NoSuchVersion
            | NoSuchObjectLockConfiguration
            | NoSuchUpload
            | NoSuchCORSConfiguration
            | NoSuchBucketPolicy
            | NoSuchLifecycleConfiguration
            | NoSuchTagSet
            | ObjectLockConfigurationNotFoundError
            | ServerSideEncryptionConfigurationNotFoundError => StatusCode::NOT_FOUND,
            AccessForbidden => StatusCode::FORBIDDEN,
            BucketAlreadyExists | BucketAlreadyOwnedByYou | BucketNotEmpty | InvalidBucketState => {
                StatusCode::CONFLICT
            }
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
            | IllegalVersioningConfigurationException
            | InvalidArgument
            | InvalidBucketName
            | InvalidDigest
            | InvalidRequest
            | InvalidTag
            | BadRequest
            | MalformedACLError
            | MissingSecurityHeader
            | KeyTooLongError
            | MalformedXML
            | MalformedPOSTRequest
            | MaxPostPreDataLengthExceededError
            | InvalidPolicyDocument
            | MetadataTooLarge
            | RequestHeaderSectionTooLarge
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
    /// Headers S3 sends with this error (a delete marker's `x-amz-delete-marker` and
    /// `x-amz-version-id`).
    pub headers: Vec<(&'static str, String)>,
}

impl S3Error {
    pub fn new(code: ErrorCode, message: impl Into<Cow<'static, str>>) -> Self {
        S3Error {
            code,
            message: message.into(),
            resource: None,
            headers: Vec::new(),
        }
    }

    pub fn with_resource(mut self, resource: impl Into<String>) -> Self {
        self.resource = Some(resource.into());
        self
    }

    pub fn with_header(mut self, name: &'static str, value: impl Into<String>) -> Self {
        self.headers.push((name, value.into()));
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

    pub fn precondition_failed() -> Self {
        S3Error::new(
            ErrorCode::PreconditionFailed,
            "At least one of the pre-conditions you specified did not hold",
        )
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
        for (name, value) in &self.headers {
            if let Ok(v) = HeaderValue::from_str(value) {
                h.insert(*name, v);
            }
        }
        resp
    }
}

/// The one place where the store's errors become S3's codes, statuses and messages.
impl From<StoreError> for S3Error {
    fn from(e: StoreError) -> Self {
        use ErrorCode as C;
        match e {
            StoreError::NoSuchBucket(bucket) => S3Error::no_such_bucket(&bucket),
            StoreError::BucketExists(bucket) => S3Error::new(
                C::BucketAlreadyOwnedByYou,
                "Your previous request to create the named bucket succeeded and you already own it.",
            )
            .with_resource(bucket),
            StoreError::BucketTaken(bucket) => S3Error::new(
                C::BucketAlreadyExists,
                "The requested bucket name is not available. The bucket namespace is shared by \
                 all users of the system. Please select a different name and try again.",
            )
            .with_resource(bucket),
            StoreError::BucketNotEmpty(bucket) => S3Error::new(
                C::BucketNotEmpty,
                "The bucket you tried to delete is not empty",
            )
            .with_resource(bucket),
            StoreError::NoSuchKey(key) => S3Error::no_such_key(&key),
            StoreError::NoSuchUpload => S3Error::new(
                C::NoSuchUpload,
                "The specified multipart upload does not exist. The upload ID may be invalid, or the upload may have been aborted or completed.",
            ),
            StoreError::NoSuchPair => S3Error::new(C::InvalidArgument, "no such pair"),
            StoreError::PreconditionFailed => S3Error::precondition_failed(),
            StoreError::EmptyKey => {
                S3Error::new(C::InvalidArgument, "Object key must not be empty")
            }
            StoreError::KeyTooLong { .. } => S3Error::new(C::KeyTooLongError, "Your key is too long"),
            StoreError::MetadataTooLarge { .. } => S3Error::new(
                C::MetadataTooLarge,
                "Your metadata headers exceed the maximum allowed metadata size",
            ),
            StoreError::EntityTooLarge { .. } => S3Error::new(
                C::EntityTooLarge,
                "Your proposed upload exceeds the maximum allowed size",
            ),
            StoreError::IncompleteBody => S3Error::new(
                C::IncompleteBody,
                "You did not provide the number of bytes specified by the Content-Length",
            ),
            StoreError::Md5Mismatch => S3Error::new(
                C::BadDigest,
                "The Content-MD5 you specified did not match what we received.",
            ),
            StoreError::InvalidRange(key) => S3Error::new(
                C::InvalidRange,
                "The requested range is not satisfiable",
            )
            .with_resource(key),
            StoreError::PartNumberOutOfRange(_) => S3Error::new(
                C::InvalidArgument,
                "Part number must be an integer between 1 and 10000, inclusive",
            ),
            StoreError::NoPartsNamed => {
                S3Error::new(C::MalformedXML, "You must specify at least one part")
            }
            StoreError::PartsOutOfOrder => S3Error::new(
                C::InvalidPartOrder,
                "The list of parts was not in ascending order. The parts list must be specified in order by part number.",
            ),
            StoreError::InvalidPart(number) => S3Error::new(
                C::InvalidPart,
                format!(
                    "One or more of the specified parts could not be found (part {number}). The part might not have been uploaded, or the specified entity tag might not have matched the part's entity tag."
                ),
            ),
            StoreError::ChecksumInvalid(m) => S3Error::new(C::InvalidRequest, m),
            StoreError::ChecksumMismatch(m) => S3Error::new(C::BadDigest, m),
            StoreError::PartTooSmall(number) => S3Error::new(
                C::EntityTooSmall,
                format!(
                    "Your proposed upload is smaller than the minimum allowed object size (part {number})."
                ),
            ),
            StoreError::NoWritablePair => S3Error::new(
                C::ServiceUnavailable,
                "No disk pair has room for this object",
            ),
            StoreError::SlowDown => S3Error::new(C::SlowDown, "Please reduce your request rate."),
            StoreError::InvalidVersionId(_) => {
                S3Error::new(C::InvalidArgument, "Invalid version id specified")
            }
            StoreError::NoSuchVersion { key, .. } => S3Error::new(
                C::NoSuchVersion,
                "The specified version does not exist.",
            )
            .with_resource(key),
            StoreError::CurrentIsDeleteMarker { key, version_id } => S3Error::no_such_key(&key)
                .with_header("x-amz-delete-marker", "true")
                .with_header("x-amz-version-id", version_id),
            StoreError::VersionIsDeleteMarker {
                version_id,
                created_ms,
            } => S3Error::new(
                C::MethodNotAllowed,
                "The specified method is not allowed against this resource.",
            )
            .with_header("x-amz-delete-marker", "true")
            .with_header("x-amz-version-id", version_id)
            .with_header("last-modified", super::http_date(created_ms))
            .with_header("allow", "DELETE"),
            StoreError::ObjectLocked => S3Error::new(
                C::AccessDenied,
                "Access Denied because object protected by object lock.",
            ),
            StoreError::InvalidBucketState(why) => S3Error::new(C::InvalidBucketState, why),
            StoreError::IllegalVersioning(why) => {
                S3Error::new(C::IllegalVersioningConfigurationException, why)
            }
            // Only after READ_RACE_ATTEMPTS reads each found the key changed again.
            StoreError::Raced(what) => S3Error::new(
                C::SlowDown,
                format!("{what} kept changing while it was read; please retry."),
            ),
            StoreError::Unavailable(why) => {
                tracing::warn!(%why, "metadata unavailable");
                S3Error::new(
                    C::ServiceUnavailable,
                    "The metadata cluster cannot serve this request now (no leader or no quorum). Please try again.",
                )
            }
            e @ (StoreError::Meta(_)
            | StoreError::Write(_)
            | StoreError::Read(_)
            | StoreError::Internal(_)) => S3Error::internal(e),
        }
    }
}

/// A call that read a request body: the body's own S3 error as it was, or the store's.
impl From<UploadError<S3Error>> for S3Error {
    fn from(e: UploadError<S3Error>) -> Self {
        match e {
            UploadError::Store(e) => e.into(),
            UploadError::Body(e) => e,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The S3 answers of store errors are what clients (and their retry logic) key on.
    #[test]
    fn store_errors_become_the_s3_errors_clients_expect() {
        let cases: Vec<(StoreError, ErrorCode, u16, &str, Option<&str>)> = vec![
            (
                StoreError::NoSuchBucket("b".into()),
                ErrorCode::NoSuchBucket,
                404,
                "The specified bucket does not exist",
                Some("b"),
            ),
            (
                StoreError::BucketExists("b".into()),
                ErrorCode::BucketAlreadyOwnedByYou,
                409,
                "Your previous request to create the named bucket succeeded and you already own it.",
                Some("b"),
            ),
            (
                StoreError::NoSuchKey("k".into()),
                ErrorCode::NoSuchKey,
                404,
                "The specified key does not exist.",
                Some("k"),
            ),
            (
                StoreError::KeyTooLong { max_bytes: 1024 },
                ErrorCode::KeyTooLongError,
                400,
                "Your key is too long",
                None,
            ),
            (
                StoreError::IncompleteBody,
                ErrorCode::IncompleteBody,
                400,
                "You did not provide the number of bytes specified by the Content-Length",
                None,
            ),
            (
                StoreError::InvalidRange("k".into()),
                ErrorCode::InvalidRange,
                416,
                "The requested range is not satisfiable",
                Some("k"),
            ),
            (
                StoreError::PartTooSmall(3),
                ErrorCode::EntityTooSmall,
                400,
                "Your proposed upload is smaller than the minimum allowed object size (part 3).",
                None,
            ),
            (
                StoreError::NoWritablePair,
                ErrorCode::ServiceUnavailable,
                503,
                "No disk pair has room for this object",
                None,
            ),
            (
                StoreError::Meta(meta::MetaError::Storage("disk gone".into())),
                ErrorCode::InternalError,
                500,
                "We encountered an internal error. Please try again.",
                None,
            ),
        ];
        for (store, code, status, message, resource) in cases {
            let what = format!("{store:?}");
            let e = S3Error::from(store);
            assert_eq!(e.code, code, "{what}");
            assert_eq!(e.code.status().as_u16(), status, "{what}");
            assert_eq!(e.message, message, "{what}");
            assert_eq!(e.resource.as_deref(), resource, "{what}");
        }
    }

    #[test]
    fn a_body_error_comes_back_as_it_was() {
        let body = S3Error::new(ErrorCode::SignatureDoesNotMatch, "chunk signature");
        let e = S3Error::from(UploadError::Body(body));
        assert_eq!(e.code, ErrorCode::SignatureDoesNotMatch);
        assert_eq!(e.message, "chunk signature");
        let e = S3Error::from(UploadError::<S3Error>::Store(StoreError::Md5Mismatch));
        assert_eq!(e.code, ErrorCode::BadDigest);
    }
}
