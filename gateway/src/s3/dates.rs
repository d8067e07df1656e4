//! The two date forms of S3 answers.

/// The ISO 8601 form S3 uses in XML (`2026-11-21T09:28:15.000Z`).
pub fn iso8601(ms: u64) -> String {
    let t = time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    let fmt = time::macros::format_description!(
        "[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]Z"
    );
    t.format(&fmt).unwrap_or_default()
}

/// The RFC 1123 form of HTTP headers (`Last-Modified`).
pub fn http_date(ms: u64) -> String {
    httpdate::fmt_http_date(std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms))
}

#[cfg(test)]
mod tests {
    #[test]
    fn dates_format_like_s3() {
        assert_eq!(
            super::iso8601(1_700_000_000_123),
            "2023-11-14T22:13:20.123Z"
        );
        assert_eq!(
            super::http_date(1_700_000_000_123),
            "Tue, 14 Nov 2023 22:13:20 GMT"
        );
    }
}
