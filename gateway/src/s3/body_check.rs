//! Checks that can only be decided when a request body has been read to its end (a
//! payload SHA-256, a flexible checksum), applied while the body streams through.

use bytes::Bytes;
use futures_util::{Stream, StreamExt as _};

/// A check over a whole body.
pub trait EndCheck: Send + 'static {
    type Error;
    fn update(&mut self, chunk: &[u8]);
    /// Called once, after the last chunk of a body that ended without error.
    fn finish(self) -> Result<(), Self::Error>;
}

/// Passes `body` through, feeding every chunk to `check`; when the body ends cleanly the
/// check decides, and its error (if any) becomes the last item of the stream. A body that
/// ends in an error keeps that error and the check is dropped.
pub fn check_at_end<S, C>(
    body: S,
    check: C,
) -> impl Stream<Item = Result<Bytes, C::Error>> + Send + Unpin
where
    S: Stream<Item = Result<Bytes, C::Error>> + Send + Unpin + 'static,
    C: EndCheck,
    C::Error: Send + 'static,
{
    let mut check = Some(check);
    body.map(Some)
        .chain(futures_util::stream::iter([None]))
        .filter_map(move |item| {
            let out = match item {
                Some(Ok(chunk)) => {
                    if let Some(c) = check.as_mut() {
                        c.update(&chunk);
                    }
                    Some(Ok(chunk))
                }
                Some(Err(e)) => {
                    check = None;
                    Some(Err(e))
                }
                None => check.take().and_then(|c| c.finish().err()).map(Err),
            };
            std::future::ready(out)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Length(usize, usize);

    impl EndCheck for Length {
        type Error = String;
        fn update(&mut self, chunk: &[u8]) {
            self.0 += chunk.len();
        }
        fn finish(self) -> Result<(), String> {
            if self.0 == self.1 {
                Ok(())
            } else {
                Err(format!("{} != {}", self.0, self.1))
            }
        }
    }

    #[tokio::test]
    async fn the_check_decides_at_the_end_only() {
        let body = || {
            futures_util::stream::iter(vec![
                Ok(Bytes::from_static(b"ab")),
                Ok(Bytes::from_static(b"c")),
            ])
        };
        let ok: Vec<_> = check_at_end(body(), Length(0, 3)).collect().await;
        assert_eq!(ok.len(), 2);
        let bad: Vec<_> = check_at_end(body(), Length(0, 4)).collect().await;
        assert_eq!(bad.len(), 3);
        assert_eq!(bad[2], Err("3 != 4".to_string()));
        let failing =
            futures_util::stream::iter(vec![Ok(Bytes::from_static(b"a")), Err("cut".to_string())]);
        let cut: Vec<_> = check_at_end(failing, Length(0, 4)).collect().await;
        assert_eq!(cut.last(), Some(&Err("cut".to_string())));
        assert_eq!(cut.len(), 2);
    }
}
