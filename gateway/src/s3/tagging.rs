//! Object and bucket tagging as S3 speaks it: the `<Tagging>` document of
//! Put/Get{Object,Bucket}Tagging and of a POST form's `tagging` field, the `x-amz-tagging`
//! header (URL-encoded query parameters) of PutObject, CopyObject and
//! CreateMultipartUpload, `x-amz-tagging-directive`, and `x-amz-tagging-count` on GET and
//! HEAD. S3's rules on a tag set (count, lengths, duplicate and reserved keys) are the
//! metadata's ([`meta::tags::TagSet::check`]); here they get S3's error codes.

use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use http::{HeaderMap, HeaderValue, StatusCode, header};
use meta::tags::{BUCKET_TAGS_MAX, OBJECT_TAGS_MAX, Tag, TagError, TagSet};
use serde::Deserialize;

use super::error::{ErrorCode, S3Error};
use super::request::{Query, header_str};
use super::xml::XmlWriter;
use crate::state::AppState;

/// Bound on a `<Tagging>` body: 50 tags of 128 + 256 characters of up to 4 bytes each
/// are 77 KB, with the markup under 80 KB.
pub const TAGGING_BODY_BYTES_MAX: usize = 128 * 1024;

fn malformed() -> S3Error {
    S3Error::new(
        ErrorCode::MalformedXML,
        "The XML you provided was not well-formed or did not validate against our published schema",
    )
}

fn xml(body: Vec<u8>) -> Response {
    ([(header::CONTENT_TYPE, "application/xml")], body).into_response()
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct TaggingXml {
    tag_set: TagSetXml,
}

#[derive(Deserialize)]
struct TagSetXml {
    #[serde(rename = "Tag", default)]
    tags: Vec<TagXml>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct TagXml {
    key: Option<String>,
    value: Option<String>,
}

/// S3's error for a tag set that breaks its rules: too many tags on an object is
/// BadRequest, everything else InvalidTag.
fn tag_error(e: TagError) -> S3Error {
    let code = match e {
        TagError::TooMany {
            max: OBJECT_TAGS_MAX,
        } => ErrorCode::BadRequest,
        _ => ErrorCode::InvalidTag,
    };
    S3Error::new(code, e.to_string())
}

/// Checks a set against S3's rules for at most `max` tags.
pub fn check(tags: &TagSet, max: usize) -> Result<(), S3Error> {
    tags.check(max).map_err(tag_error)
}

/// A `<Tagging>` document (its rules not yet checked: see [`check`]).
pub fn parse_xml(text: &str) -> Result<TagSet, S3Error> {
    let parsed: TaggingXml = quick_xml::de::from_str(text).map_err(|_| malformed())?;
    let mut out = Vec::with_capacity(parsed.tag_set.tags.len().min(BUCKET_TAGS_MAX));
    for t in parsed.tag_set.tags {
        match (t.key, t.value) {
            (Some(key), value) => out.push(Tag {
                key,
                value: value.unwrap_or_default(),
            }),
            (None, _) => return Err(malformed()),
        }
    }
    Ok(TagSet(out))
}

/// The `<Tagging>` document of a set, as GetObjectTagging answers it.
pub fn render(tags: &TagSet) -> Vec<u8> {
    let mut w = XmlWriter::new();
    w.open_root("Tagging");
    w.open("TagSet");
    for t in &tags.0 {
        w.open("Tag");
        w.leaf("Key", &t.key);
        w.leaf("Value", &t.value);
        w.close("Tag");
    }
    w.close("TagSet");
    w.close("Tagging");
    w.finish()
}

fn bad_header() -> S3Error {
    S3Error::new(
        ErrorCode::InvalidArgument,
        "The header 'x-amz-tagging' shall be encoded as UTF-8 then URLEncoded URL query parameters without tag name duplicates.",
    )
}

/// The `x-amz-tagging` value: `k1=v1&k2=v2`, URL-encoded (a `+` is a space, as in a
/// query string; a key without `=` has an empty value). Duplicate keys are
/// InvalidArgument, as S3 answers them here; the rest of S3's rules are [`check`]'s.
pub fn parse_header(value: &str) -> Result<TagSet, S3Error> {
    let decode = |raw: &str| -> Result<String, S3Error> {
        percent_encoding::percent_decode_str(&raw.replace('+', " "))
            .decode_utf8()
            .map(|s| s.into_owned())
            .map_err(|_| bad_header())
    };
    let mut out: Vec<Tag> = Vec::new();
    for pair in value.split('&').filter(|p| !p.is_empty()) {
        // The header section is bounded; so is this loop, and a set is refused past
        // S3's count anyway.
        if out.len() > BUCKET_TAGS_MAX {
            return Err(tag_error(TagError::TooMany {
                max: OBJECT_TAGS_MAX,
            }));
        }
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let tag = Tag {
            key: decode(k)?,
            value: decode(v)?,
        };
        if out.iter().any(|t| t.key == tag.key) {
            return Err(bad_header());
        }
        out.push(tag);
    }
    Ok(TagSet(out))
}

/// The tags a write asks for in `x-amz-tagging` (none without the header), checked.
pub fn from_headers(headers: &HeaderMap) -> Result<TagSet, S3Error> {
    let tags = match header_str(headers, "x-amz-tagging")? {
        Some(v) => parse_header(v)?,
        None => TagSet::default(),
    };
    check(&tags, OBJECT_TAGS_MAX)?;
    Ok(tags)
}

/// A POST form's `tagging` field: a `<Tagging>` document, checked.
pub fn from_form_field(value: &str) -> Result<TagSet, S3Error> {
    let tags = parse_xml(value)?;
    check(&tags, OBJECT_TAGS_MAX)?;
    Ok(tags)
}

/// `x-amz-tagging-directive` of a CopyObject: whether the copy takes the request's tags
/// (REPLACE) rather than the source's (COPY, the default).
pub fn replaces(headers: &HeaderMap) -> Result<bool, S3Error> {
    match header_str(headers, "x-amz-tagging-directive")? {
        None | Some("COPY") => Ok(false),
        Some("REPLACE") => Ok(true),
        Some(_) => Err(S3Error::new(
            ErrorCode::InvalidArgument,
            "Unknown tagging directive.",
        )),
    }
}

/// `x-amz-tagging-count` on GET and HEAD, when the version has tags.
pub fn count_header(headers: &mut HeaderMap, tags: &TagSet) {
    if !tags.is_empty() {
        headers.insert("x-amz-tagging-count", HeaderValue::from(tags.len()));
    }
}

fn version_header(resp: &mut Response, version_id: Option<&str>) {
    if let Some(v) = version_id.and_then(|id| HeaderValue::from_str(id).ok()) {
        resp.headers_mut().insert("x-amz-version-id", v);
    }
}

/// `GetObjectTagging` (an object without tags: an empty set).
pub async fn get_object(
    app: &AppState,
    bucket: &str,
    key: &str,
    q: &Query,
) -> Result<Response, S3Error> {
    let head = app.store.head_at(bucket, key, q.get("versionId")).await?;
    let mut resp = xml(render(&head.tags));
    version_header(&mut resp, head.version_id.as_deref());
    Ok(resp)
}

/// `PutObjectTagging`: replaces the version's tags.
pub async fn put_object(
    app: &AppState,
    bucket: &str,
    key: &str,
    q: &Query,
    req: Request,
) -> Result<Response, S3Error> {
    let text = super::auth::read_xml_body(req.into_body(), TAGGING_BODY_BYTES_MAX).await?;
    let tags = parse_xml(&text)?;
    check(&tags, OBJECT_TAGS_MAX)?;
    let version_id = app
        .store
        .set_object_tags(bucket, key, q.get("versionId"), tags)
        .await?;
    let mut resp = StatusCode::OK.into_response();
    version_header(&mut resp, version_id.as_deref());
    Ok(resp)
}

/// `DeleteObjectTagging`: 204, the version's tags gone.
pub async fn delete_object(
    app: &AppState,
    bucket: &str,
    key: &str,
    q: &Query,
) -> Result<Response, S3Error> {
    let version_id = app
        .store
        .set_object_tags(bucket, key, q.get("versionId"), TagSet::default())
        .await?;
    let mut resp = StatusCode::NO_CONTENT.into_response();
    version_header(&mut resp, version_id.as_deref());
    Ok(resp)
}

/// `GetBucketTagging`: NoSuchTagSet when the bucket has none.
pub async fn get_bucket(app: &AppState, bucket: &str) -> Result<Response, S3Error> {
    let tags = app.store.bucket_tags(bucket).await?;
    if tags.is_empty() {
        return Err(
            S3Error::new(ErrorCode::NoSuchTagSet, "The TagSet does not exist")
                .with_resource(bucket),
        );
    }
    Ok(xml(render(&tags)))
}

/// `PutBucketTagging`: replaces the bucket's tags (S3 answers 204).
pub async fn put_bucket(app: &AppState, bucket: &str, req: Request) -> Result<Response, S3Error> {
    let text = super::auth::read_xml_body(req.into_body(), TAGGING_BODY_BYTES_MAX).await?;
    let tags = parse_xml(&text)?;
    check(&tags, BUCKET_TAGS_MAX)?;
    app.store.set_bucket_tags(bucket, tags).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// `DeleteBucketTagging`: 204.
pub async fn delete_bucket(app: &AppState, bucket: &str) -> Result<Response, S3Error> {
    app.store.set_bucket_tags(bucket, TagSet::default()).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(pairs: &[(&str, &str)]) -> TagSet {
        TagSet(pairs.iter().map(|(k, v)| Tag::new(*k, *v)).collect())
    }

    #[test]
    fn documents_parse_and_render_as_s3_writes_them() {
        let doc = "<Tagging xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><TagSet>\
                   <Tag><Key>a b</Key><Value>1</Value></Tag>\
                   <Tag><Key>c</Key><Value></Value></Tag></TagSet></Tagging>";
        let tags = parse_xml(doc).unwrap();
        assert_eq!(tags, set(&[("a b", "1"), ("c", "")]));
        let rendered = String::from_utf8(render(&tags)).unwrap();
        assert_eq!(parse_xml(&rendered).unwrap(), tags);
        assert!(rendered.contains("<Tag><Key>a b</Key><Value>1</Value></Tag>"));
        assert_eq!(
            parse_xml("<Tagging><TagSet/></Tagging>").unwrap(),
            TagSet::default()
        );
        for bad in [
            "",
            "<Tagging>",
            "<Tagging></Tagging>",
            "<Tagging><TagSet><Tag><Value>1</Value></Tag></TagSet></Tagging>",
            "not xml",
        ] {
            assert_eq!(
                parse_xml(bad).unwrap_err().code,
                ErrorCode::MalformedXML,
                "{bad}"
            );
        }
    }

    #[test]
    fn the_header_is_url_encoded_query_parameters() {
        assert_eq!(
            parse_header("a=1&b%20c=d%2Fe&f=&g").unwrap(),
            set(&[("a", "1"), ("b c", "d/e"), ("f", ""), ("g", "")])
        );
        assert_eq!(parse_header("x=a+b").unwrap(), set(&[("x", "a b")]));
        assert_eq!(parse_header("").unwrap(), TagSet::default());
        assert_eq!(
            parse_header("a=1&a=2").unwrap_err().code,
            ErrorCode::InvalidArgument
        );
        assert_eq!(
            parse_header("a=%ff").unwrap_err().code,
            ErrorCode::InvalidArgument
        );
        let many: Vec<String> = (0..200).map(|i| format!("k{i}=v")).collect();
        assert_eq!(
            parse_header(&many.join("&")).unwrap_err().code,
            ErrorCode::BadRequest
        );
    }

    #[test]
    fn s3s_rules_answer_s3s_codes() {
        let eleven = TagSet((0..11).map(|i| Tag::new(format!("k{i}"), "")).collect());
        assert_eq!(
            check(&eleven, OBJECT_TAGS_MAX).unwrap_err().code,
            ErrorCode::BadRequest
        );
        assert!(check(&eleven, BUCKET_TAGS_MAX).is_ok());
        for bad in [
            set(&[("aws:k", "v")]),
            set(&[("k", "v"), ("k", "w")]),
            set(&[(&"k".repeat(129), "v")]),
            set(&[("k", &"v".repeat(257))]),
        ] {
            assert_eq!(
                check(&bad, OBJECT_TAGS_MAX).unwrap_err().code,
                ErrorCode::InvalidTag
            );
        }
    }
}
