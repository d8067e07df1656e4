//! Streaming decoder for `Content-Encoding: aws-chunked` request bodies.
//!
//! S3 clients send uploads as `aws-chunked` when they sign every chunk
//! (`STREAMING-AWS4-HMAC-SHA256-PAYLOAD[-TRAILER]`) or append a checksum after the data
//! (`STREAMING-UNSIGNED-PAYLOAD-TRAILER`, the default of current SDKs over HTTPS). Objects can be
//! arbitrarily large, so the decoder holds at most one header or trailer line (capped at
//! [`MAX_LINE_LEN`]) besides the piece of body the transport just delivered, and passes chunk
//! data on as soon as it arrives instead of waiting for a whole chunk. A chunk's signature can
//! only be checked once all of its data has gone by, so a bad signature surfaces as an error
//! *after* that data was yielded: the caller must discard the upload whenever the stream ends
//! with an error, and may trust the data (and the [`TrailerSlot`]) only once it ends cleanly.

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use bytes::{Buf, Bytes};
use futures_util::Stream;
use sha2::{Digest, Sha256};

use super::sigv4::{EMPTY_SHA256_HEX, Payload, SigningContext};
use crate::bearer::constant_time_eq;

/// Longest chunk-header or trailer line accepted, CR included; a real header line is under 100
/// bytes, so anything longer is garbage or an attempt to make the server buffer.
pub const MAX_LINE_LEN: usize = 4096;
/// Largest single chunk accepted: S3's limit for a single PUT (5 GiB).
pub const MAX_CHUNK_SIZE: u64 = 5 * 1024 * 1024 * 1024;
/// Most trailer headers accepted after the final chunk.
pub const MAX_TRAILERS: usize = 64;

const TRAILER_SIGNATURE: &str = "x-amz-trailer-signature";

/// Why an `aws-chunked` body was refused. Any of these means the upload must be discarded.
#[derive(Debug, thiserror::Error)]
pub enum ChunkError {
    /// Not valid `aws-chunked` framing, or the body ended early (`IncompleteBody` /
    /// `InvalidRequest`); the text says what is wrong.
    #[error("{0}")]
    Malformed(String),
    /// A chunk or trailer signature does not match (`SignatureDoesNotMatch`).
    #[error("the chunk signature we calculated does not match the signature you provided")]
    SignatureMismatch,
    /// A chunk larger than [`MAX_CHUNK_SIZE`] or more than [`MAX_TRAILERS`] trailers
    /// (`EntityTooLarge`).
    #[error("the aws-chunked body exceeds the maximum allowed size")]
    TooLarge,
    /// Reading the underlying body failed.
    #[error("reading the request body failed: {0}")]
    Io(#[from] io::Error),
    /// The decoded data is not `x-amz-decoded-content-length` bytes long.
    #[error("the decoded body length does not match x-amz-decoded-content-length")]
    DecodedLengthMismatch,
}

fn malformed(why: impl Into<String>) -> ChunkError {
    ChunkError::Malformed(why.into())
}

fn incomplete() -> ChunkError {
    malformed("you did not provide the number of bytes specified by the aws-chunked encoding")
}

/// Trailer headers sent after the final chunk, names lowercased, in the order received (the
/// `x-amz-trailer-signature` line is checked and left out).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Trailers(pub Vec<(String, String)>);

impl Trailers {
    /// The first value of trailer `name` (case-insensitive), e.g. `x-amz-checksum-crc32`.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Where the decoder leaves the trailers, filled only when the stream ends without error so that
/// a checksum from a rejected body can never be mistaken for a valid one. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct TrailerSlot(Arc<Mutex<Option<Trailers>>>);

impl TrailerSlot {
    /// A copy of the trailers, if the stream has ended successfully.
    pub fn get(&self) -> Option<Trailers> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Takes the trailers out of the slot, if the stream has ended successfully.
    pub fn take(&self) -> Option<Trailers> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).take()
    }

    fn set(&self, trailers: Trailers) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = Some(trailers);
    }
}

/// Which `aws-chunked` variant the request declared in `x-amz-content-sha256`.
#[derive(Debug, Clone)]
pub enum ChunkMode {
    /// `STREAMING-AWS4-HMAC-SHA256-PAYLOAD`: every chunk signed, no trailers.
    Signed(SigningContext),
    /// `STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER`: every chunk signed, then trailers signed
    /// by `x-amz-trailer-signature`.
    SignedTrailer(SigningContext),
    /// `STREAMING-UNSIGNED-PAYLOAD-TRAILER`: no signatures at all; trailers (a checksum) follow.
    UnsignedTrailer,
}

impl ChunkMode {
    /// The mode for a verified request's payload, or `None` if its body is not `aws-chunked`.
    pub fn for_payload(payload: Payload, context: &SigningContext) -> Option<ChunkMode> {
        match payload {
            Payload::StreamingSigned => Some(ChunkMode::Signed(context.clone())),
            Payload::StreamingSignedTrailer => Some(ChunkMode::SignedTrailer(context.clone())),
            Payload::StreamingUnsignedTrailer => Some(ChunkMode::UnsignedTrailer),
            Payload::Unsigned | Payload::Sha256(_) => None,
        }
    }
}

/// Decodes an `aws-chunked` body into its data, checking chunk signatures (signed modes),
/// the trailer signature (signed-trailer mode) and, when given, that the data is
/// `decoded_length` bytes long (`x-amz-decoded-content-length`).
///
/// Data is yielded as it arrives; the stream ends with `None` only when the whole body was
/// valid, and then the trailers are in the returned [`TrailerSlot`]. After an error the stream
/// ends. The decoder does not know which trailers the request announced: the caller checks
/// that the one named in `x-amz-trailer` arrived (an unsigned body may legitimately end right
/// after its final chunk) and verifies the checksum it carries.
pub fn decode<S>(
    body: S,
    mode: ChunkMode,
    decoded_length: Option<u64>,
) -> (
    impl Stream<Item = Result<Bytes, ChunkError>> + Send + Unpin + 'static,
    TrailerSlot,
)
where
    S: Stream<Item = Result<Bytes, io::Error>> + Send + Unpin + 'static,
{
    let slot = TrailerSlot::default();
    let (signer, trailer_signed) = match mode {
        ChunkMode::Signed(context) => (Some(context), false),
        ChunkMode::SignedTrailer(context) => (Some(context), true),
        ChunkMode::UnsignedTrailer => (None, false),
    };
    let previous_signature = signer
        .as_ref()
        .map(|c| c.seed_signature().to_owned())
        .unwrap_or_default();
    let decoder = Decoder {
        body,
        body_done: false,
        pending: Bytes::new(),
        line: Vec::new(),
        state: State::ChunkHeader,
        signer,
        trailer_signed,
        previous_signature,
        chunk_signature: String::new(),
        hasher: Sha256::new(),
        total: 0,
        decoded_length,
        trailers: Vec::new(),
        trailer_signature: None,
        blank_line_seen: false,
        slot: slot.clone(),
    };
    (decoder, slot)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Reading `hex-size[;chunk-signature=...]\r\n`.
    ChunkHeader,
    /// Passing on chunk data.
    Data { remaining: u64 },
    /// Expecting the `\r\n` after chunk data.
    DataEnd { seen_cr: bool },
    /// After the final (empty) chunk: trailer lines until an empty line or the end of the body.
    Trailers,
    /// After the terminating empty line: only the end of the body may follow.
    Drain,
    /// Finished, successfully or not.
    Done,
}

struct Decoder<S> {
    body: S,
    body_done: bool,
    /// Unconsumed bytes of the last piece the body delivered.
    pending: Bytes,
    /// A header or trailer line being assembled across pieces (at most [`MAX_LINE_LEN`]).
    line: Vec<u8>,
    state: State,
    /// Present in the signed modes.
    signer: Option<SigningContext>,
    trailer_signed: bool,
    /// The signature the next chunk's (or the trailer's) signature chains from.
    previous_signature: String,
    /// The signature announced for the chunk being read.
    chunk_signature: String,
    hasher: Sha256,
    total: u64,
    decoded_length: Option<u64>,
    trailers: Vec<(String, String)>,
    trailer_signature: Option<String>,
    /// Some encoders put an empty line between the final chunk and the trailers.
    blank_line_seen: bool,
    slot: TrailerSlot,
}

impl<S> Stream for Decoder<S>
where
    S: Stream<Item = Result<Bytes, io::Error>> + Unpin,
{
    type Item = Result<Bytes, ChunkError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if this.state == State::Done {
            return Poll::Ready(None);
        }
        match this.advance(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Ok(Some(data))) => Poll::Ready(Some(Ok(data))),
            Poll::Ready(Ok(None)) => {
                this.state = State::Done;
                this.slot.set(Trailers(std::mem::take(&mut this.trailers)));
                Poll::Ready(None)
            }
            Poll::Ready(Err(error)) => {
                this.state = State::Done;
                this.pending = Bytes::new();
                this.line = Vec::new();
                Poll::Ready(Some(Err(error)))
            }
        }
    }
}

impl<S> Decoder<S>
where
    S: Stream<Item = Result<Bytes, io::Error>> + Unpin,
{
    /// Runs the state machine until it has data to yield, needs more input, ends or fails.
    fn advance(&mut self, cx: &mut Context<'_>) -> Poll<Result<Option<Bytes>, ChunkError>> {
        loop {
            if self.pending.is_empty() && !self.body_done {
                match Pin::new(&mut self.body).poll_next(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(Some(Ok(piece))) => self.pending = piece,
                    Poll::Ready(Some(Err(error))) => return Poll::Ready(Err(error.into())),
                    Poll::Ready(None) => self.body_done = true,
                }
                continue;
            }
            let step = match self.state {
                State::ChunkHeader => self.on_chunk_header(),
                State::Data { remaining } => return Poll::Ready(self.on_data(remaining)),
                State::DataEnd { seen_cr } => self.on_data_end(seen_cr),
                State::Trailers => self.on_trailers(),
                State::Drain => {
                    if !self.pending.is_empty() {
                        Err(malformed(
                            "unexpected data after the end of the aws-chunked body",
                        ))
                    } else if self.body_done {
                        return Poll::Ready(Ok(None));
                    } else {
                        Ok(())
                    }
                }
                State::Done => return Poll::Ready(Ok(None)),
            };
            if let Err(error) = step {
                return Poll::Ready(Err(error));
            }
        }
    }

    fn on_chunk_header(&mut self) -> Result<(), ChunkError> {
        let Some(line) = self.take_line()? else {
            return if self.body_done {
                Err(incomplete())
            } else {
                Ok(())
            };
        };
        let (size, signature) = parse_chunk_header(&line, self.signer.is_some())?;
        if let Some(expected) = self.decoded_length
            && self.total.saturating_add(size) > expected
        {
            return Err(ChunkError::DecodedLengthMismatch);
        }
        if size > 0 {
            self.chunk_signature = signature;
            self.state = State::Data { remaining: size };
            return Ok(());
        }
        // The final, empty chunk: its signature covers the empty string.
        self.check_chunk_signature(EMPTY_SHA256_HEX.to_owned(), &signature)?;
        if self
            .decoded_length
            .is_some_and(|expected| expected != self.total)
        {
            return Err(ChunkError::DecodedLengthMismatch);
        }
        self.state = State::Trailers;
        Ok(())
    }

    fn on_data(&mut self, remaining: u64) -> Result<Option<Bytes>, ChunkError> {
        if self.pending.is_empty() {
            // `advance` only gets here with no input left when the body has ended.
            return Err(incomplete());
        }
        let take =
            usize::try_from(remaining).map_or(self.pending.len(), |r| r.min(self.pending.len()));
        let data = self.pending.split_to(take);
        if self.signer.is_some() {
            self.hasher.update(&data);
        }
        let taken = data.len() as u64;
        self.total = self.total.saturating_add(taken);
        self.state = match remaining - taken {
            0 => State::DataEnd { seen_cr: false },
            remaining => State::Data { remaining },
        };
        Ok(Some(data))
    }

    fn on_data_end(&mut self, seen_cr: bool) -> Result<(), ChunkError> {
        let Some(&byte) = self.pending.first() else {
            return if self.body_done {
                Err(incomplete())
            } else {
                Ok(())
            };
        };
        self.pending.advance(1);
        match (seen_cr, byte) {
            (false, b'\r') => self.state = State::DataEnd { seen_cr: true },
            (true, b'\n') => {
                let digest = hex::encode(self.hasher.finalize_reset());
                let signature = std::mem::take(&mut self.chunk_signature);
                self.check_chunk_signature(digest, &signature)?;
                self.state = State::ChunkHeader;
            }
            _ => return Err(malformed("chunk data is not followed by CRLF")),
        }
        Ok(())
    }

    fn on_trailers(&mut self) -> Result<(), ChunkError> {
        let Some(line) = self.take_line()? else {
            if !self.body_done {
                return Ok(());
            }
            // Lenient: some SDKs omit the empty line that should end the trailer section.
            if !self.line.is_empty() {
                return Err(incomplete());
            }
            self.finish_trailers()?;
            self.state = State::Drain;
            return Ok(());
        };
        if line.is_empty() {
            let nothing_yet = self.trailers.is_empty() && self.trailer_signature.is_none();
            if nothing_yet && !self.blank_line_seen {
                self.blank_line_seen = true;
            } else {
                self.finish_trailers()?;
                self.state = State::Drain;
            }
            return Ok(());
        }
        let text = std::str::from_utf8(&line)
            .map_err(|_| malformed("a trailer line is not valid UTF-8"))?;
        let (name, value) = text
            .split_once(':')
            .ok_or_else(|| malformed(format!("the trailer line {text:?} has no ':'")))?;
        let name = name.trim_matches([' ', '\t']).to_ascii_lowercase();
        let value = value.trim_matches([' ', '\t']).to_owned();
        if name.is_empty() {
            return Err(malformed("a trailer line has an empty name"));
        }
        if name == TRAILER_SIGNATURE {
            if self.trailer_signature.replace(value).is_some() {
                return Err(malformed("x-amz-trailer-signature is given twice"));
            }
            return Ok(());
        }
        if self.signer.is_some() && !self.trailer_signed {
            return Err(malformed(
                "trailers are not allowed with STREAMING-AWS4-HMAC-SHA256-PAYLOAD",
            ));
        }
        if self.trailers.len() >= MAX_TRAILERS {
            return Err(ChunkError::TooLarge);
        }
        self.trailers.push((name, value));
        Ok(())
    }

    /// Checks the trailer signature where one is required.
    fn finish_trailers(&mut self) -> Result<(), ChunkError> {
        let Some(context) = &self.signer else {
            // Unsigned trailers: a stray signature line has nothing to chain from; ignore it.
            return Ok(());
        };
        if !self.trailer_signed {
            return match self.trailer_signature {
                Some(_) => Err(malformed(
                    "x-amz-trailer-signature is not allowed with STREAMING-AWS4-HMAC-SHA256-PAYLOAD",
                )),
                None => Ok(()),
            };
        }
        let provided = self
            .trailer_signature
            .as_deref()
            .ok_or_else(|| malformed("the x-amz-trailer-signature trailer is missing"))?;
        let provided = parse_signature(provided)?;
        // The SDKs sign the trailers sorted by name; accept the order they were sent in too,
        // as both are equally covered by the key.
        let mut sorted = self.trailers.clone();
        sorted.sort();
        for candidate in [&sorted, &self.trailers] {
            let string_to_sign = format!(
                "AWS4-HMAC-SHA256-TRAILER\n{}\n{}\n{}\n{}",
                context.amz_date(),
                context.scope(),
                self.previous_signature,
                hex::encode(Sha256::digest(canonical_trailers(candidate)))
            );
            let expected = context.sign(string_to_sign.as_bytes());
            if constant_time_eq(expected.as_bytes(), provided.as_bytes()) {
                return Ok(());
            }
        }
        Err(ChunkError::SignatureMismatch)
    }

    /// Checks a chunk's signature against the running chain (signed modes only).
    fn check_chunk_signature(
        &mut self,
        data_digest: String,
        provided: &str,
    ) -> Result<(), ChunkError> {
        let Some(context) = &self.signer else {
            return Ok(());
        };
        let string_to_sign = format!(
            "AWS4-HMAC-SHA256-PAYLOAD\n{}\n{}\n{}\n{EMPTY_SHA256_HEX}\n{data_digest}",
            context.amz_date(),
            context.scope(),
            self.previous_signature,
        );
        let expected = context.sign(string_to_sign.as_bytes());
        if !constant_time_eq(expected.as_bytes(), provided.as_bytes()) {
            return Err(ChunkError::SignatureMismatch);
        }
        self.previous_signature = expected;
        Ok(())
    }

    /// Moves bytes from `pending` into the line buffer until a `\n`; returns the line without its
    /// CRLF, or `None` once `pending` is exhausted without one.
    fn take_line(&mut self) -> Result<Option<Vec<u8>>, ChunkError> {
        let newline = self.pending.iter().position(|&b| b == b'\n');
        let available = newline.unwrap_or(self.pending.len());
        if self.line.len() + available > MAX_LINE_LEN {
            return Err(malformed(format!(
                "an aws-chunked header or trailer line is longer than {MAX_LINE_LEN} bytes"
            )));
        }
        self.line
            .extend_from_slice(&self.pending.split_to(available));
        if newline.is_none() {
            return Ok(None);
        }
        self.pending.advance(1);
        let mut line = std::mem::take(&mut self.line);
        if line.pop() != Some(b'\r') {
            return Err(malformed("an aws-chunked line does not end with CRLF"));
        }
        Ok(Some(line))
    }
}

/// `name:value\n` per trailer, the block the trailer signature covers.
fn canonical_trailers(trailers: &[(String, String)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (name, value) in trailers {
        out.extend_from_slice(name.as_bytes());
        out.push(b':');
        out.extend_from_slice(value.as_bytes());
        out.push(b'\n');
    }
    out
}

fn parse_signature(value: &str) -> Result<String, ChunkError> {
    if value.len() == 64 && value.bytes().all(|b| b.is_ascii_hexdigit()) {
        Ok(value.to_ascii_lowercase())
    } else {
        Err(malformed(format!(
            "the signature {value:?} is not 64 hexadecimal characters"
        )))
    }
}

/// Parses `hex-size[;name=value...]`. In the signed modes `chunk-signature` is required; in the
/// unsigned mode extensions are ignored.
fn parse_chunk_header(line: &[u8], signed: bool) -> Result<(u64, String), ChunkError> {
    let text =
        std::str::from_utf8(line).map_err(|_| malformed("a chunk header is not valid UTF-8"))?;
    let (size_text, extensions) = match text.split_once(';') {
        Some((size, extensions)) => (size, Some(extensions)),
        None => (text, None),
    };
    if size_text.is_empty()
        || size_text.len() > 16
        || !size_text.bytes().all(|b| b.is_ascii_hexdigit())
    {
        return Err(malformed(format!("invalid chunk size {size_text:?}")));
    }
    let size = u64::from_str_radix(size_text, 16)
        .map_err(|_| malformed(format!("invalid chunk size {size_text:?}")))?;
    if size > MAX_CHUNK_SIZE {
        return Err(ChunkError::TooLarge);
    }
    if !signed {
        return Ok((size, String::new()));
    }
    let mut signature = None;
    for extension in extensions.into_iter().flat_map(|e| e.split(';')) {
        let (name, value) = extension.split_once('=').unwrap_or((extension, ""));
        if name.trim_matches(' ') == "chunk-signature"
            && signature.replace(value.trim_matches(' ')).is_some()
        {
            return Err(malformed("chunk-signature is given twice"));
        }
    }
    let signature = signature.ok_or_else(|| malformed("a chunk header has no chunk-signature"))?;
    Ok((size, parse_signature(signature)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::StreamExt;
    use futures_util::stream;

    const SECRET: &str = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";
    const DATE: &str = "20130524T000000Z";

    fn context(seed: &str) -> SigningContext {
        SigningContext::new(SECRET, DATE, "us-east-1", seed).expect("context")
    }

    /// The S3 docs' streaming PUT: 65 KiB of 'a' in a 64 KiB and a 1 KiB chunk.
    fn aws_streaming_body() -> Vec<u8> {
        let mut body = Vec::new();
        body.extend_from_slice(
            b"10000;chunk-signature=ad80c730a21e5b8d04586a2213dd63b9a0e99e0e2307b0ade35a65485a288648\r\n",
        );
        body.extend_from_slice(&[b'a'; 65536]);
        body.extend_from_slice(
            b"\r\n400;chunk-signature=0055627c9e194cb4542bae2aa5492e3c1575bbb81b612b7d234b86a503ef5497\r\n",
        );
        body.extend_from_slice(&[b'a'; 1024]);
        body.extend_from_slice(
            b"\r\n0;chunk-signature=b6c6ea8a5354eaf15b3cb7646744f4275b71ea724fed81ceb9323e279d449df9\r\n\r\n",
        );
        body
    }

    fn aws_signed_mode() -> ChunkMode {
        ChunkMode::Signed(context(
            "4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9",
        ))
    }

    /// The S3 docs' streaming PUT with a signed `x-amz-checksum-crc32c` trailer.
    fn aws_trailer_body() -> Vec<u8> {
        let mut body = Vec::new();
        body.extend_from_slice(
            b"10000;chunk-signature=b474d8862b1487a5145d686f57f013e54db672cee1c953b3010fb58501ef5aa2\r\n",
        );
        body.extend_from_slice(&[b'a'; 65536]);
        body.extend_from_slice(
            b"\r\n400;chunk-signature=1c1344b170168f8e65b41376b44b20fe354e373826ccbbe2c1d40a8cae51e5c7\r\n",
        );
        body.extend_from_slice(&[b'a'; 1024]);
        body.extend_from_slice(
            b"\r\n0;chunk-signature=2ca2aba2005185cf7159c6277faf83795951dd77a3a99e6e65d5c9f85863f992\r\n\
              x-amz-checksum-crc32c:sOO8/Q==\r\n\
              x-amz-trailer-signature:d81f82fc3505edab99d459891051a732e8730629a2e4a59689829ca17fe2e435\r\n\r\n",
        );
        body
    }

    fn aws_trailer_mode() -> ChunkMode {
        ChunkMode::SignedTrailer(context(
            "106e2a8a18243abcf37539882f36619c00e2dfc72633413f02d3b74544bfeb8e",
        ))
    }

    /// botocore's `STREAMING-UNSIGNED-PAYLOAD-TRAILER` PutObject body for 100 000 bytes.
    fn boto_unsigned_body() -> (Vec<u8>, Vec<u8>) {
        let data = b"abcdefghij".repeat(10_000);
        let mut body = b"186a0\r\n".to_vec();
        body.extend_from_slice(&data);
        body.extend_from_slice(b"\r\n0\r\nx-amz-checksum-crc32:+wcbKw==\r\n\r\n");
        (body, data)
    }

    struct Outcome {
        data: Vec<u8>,
        /// Number of data items yielded, to see that data is streamed.
        items: usize,
        result: Result<(), ChunkError>,
        trailers: Option<Trailers>,
    }

    async fn run(pieces: Vec<Bytes>, mode: ChunkMode, decoded_length: Option<u64>) -> Outcome {
        let body = stream::iter(pieces.into_iter().map(Ok::<_, io::Error>));
        let (mut decoded, slot) = decode(body, mode, decoded_length);
        let mut outcome = Outcome {
            data: Vec::new(),
            items: 0,
            result: Ok(()),
            trailers: None,
        };
        while let Some(item) = decoded.next().await {
            match item {
                Ok(data) => {
                    assert!(!data.is_empty(), "empty data items are never yielded");
                    outcome.items += 1;
                    outcome.data.extend_from_slice(&data);
                }
                Err(error) => {
                    outcome.result = Err(error);
                    assert!(
                        decoded.next().await.is_none(),
                        "the stream ends after an error"
                    );
                    break;
                }
            }
        }
        outcome.trailers = slot.take();
        if outcome.result.is_err() {
            assert!(outcome.trailers.is_none(), "no trailers from a failed body");
        }
        outcome
    }

    fn whole(body: &[u8]) -> Vec<Bytes> {
        vec![Bytes::copy_from_slice(body)]
    }

    fn split_every(body: &[u8], size: usize) -> Vec<Bytes> {
        body.chunks(size).map(Bytes::copy_from_slice).collect()
    }

    /// Deterministic pseudo-random piece sizes from 1 to `max`.
    fn split_random(body: &[u8], seed: u64, max: u64) -> Vec<Bytes> {
        let mut state = seed;
        let mut pieces = Vec::new();
        let mut rest = body;
        while !rest.is_empty() {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let size = ((state >> 33) % max + 1) as usize;
            let (piece, tail) = rest.split_at(size.min(rest.len()));
            pieces.push(Bytes::copy_from_slice(piece));
            rest = tail;
        }
        pieces
    }

    #[tokio::test]
    async fn aws_streaming_example() {
        let outcome = run(whole(&aws_streaming_body()), aws_signed_mode(), Some(66560)).await;
        outcome.result.expect("AWS example decodes");
        assert_eq!(outcome.data, vec![b'a'; 66560]);
        assert_eq!(outcome.trailers, Some(Trailers::default()));
    }

    #[tokio::test]
    async fn aws_streaming_example_in_one_byte_pieces() {
        let outcome = run(
            split_every(&aws_streaming_body(), 1),
            aws_signed_mode(),
            Some(66560),
        )
        .await;
        outcome.result.expect("decodes");
        assert_eq!(outcome.data, vec![b'a'; 66560]);
        assert_eq!(
            outcome.items, 66560,
            "every byte is passed on as it arrives"
        );
    }

    #[tokio::test]
    async fn aws_streaming_example_in_random_pieces() {
        let body = aws_streaming_body();
        for seed in 0..40 {
            let max = [3, 17, 100, 5000, 70000][seed as usize % 5];
            let outcome = run(split_random(&body, seed, max), aws_signed_mode(), None).await;
            outcome
                .result
                .unwrap_or_else(|e| panic!("seed {seed} max {max}: {e}"));
            assert_eq!(outcome.data.len(), 66560);
        }
    }

    /// Encodes `chunks` as a signed `aws-chunked` body the way the SDKs do, with signed
    /// trailers when `trailers` is given (the AWS examples above pin the crypto down).
    fn sign_body(
        context: &SigningContext,
        chunks: &[&[u8]],
        trailers: Option<&[(&str, &str)]>,
    ) -> Vec<u8> {
        let mut previous = context.seed_signature().to_owned();
        let mut body = Vec::new();
        for data in chunks.iter().copied().chain([&b""[..]]) {
            let string_to_sign = format!(
                "AWS4-HMAC-SHA256-PAYLOAD\n{}\n{}\n{previous}\n{EMPTY_SHA256_HEX}\n{}",
                context.amz_date(),
                context.scope(),
                hex::encode(Sha256::digest(data))
            );
            previous = context.sign(string_to_sign.as_bytes());
            body.extend_from_slice(
                format!("{:x};chunk-signature={previous}\r\n", data.len()).as_bytes(),
            );
            if !data.is_empty() {
                body.extend_from_slice(data);
                body.extend_from_slice(b"\r\n");
            }
        }
        if let Some(trailers) = trailers {
            let mut sorted: Vec<(String, String)> = trailers
                .iter()
                .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
                .collect();
            sorted.sort();
            let string_to_sign = format!(
                "AWS4-HMAC-SHA256-TRAILER\n{}\n{}\n{previous}\n{}",
                context.amz_date(),
                context.scope(),
                hex::encode(Sha256::digest(canonical_trailers(&sorted)))
            );
            for (name, value) in trailers {
                body.extend_from_slice(format!("{name}:{value}\r\n").as_bytes());
            }
            let signature = context.sign(string_to_sign.as_bytes());
            body.extend_from_slice(format!("x-amz-trailer-signature:{signature}\r\n").as_bytes());
        }
        body.extend_from_slice(b"\r\n");
        body
    }

    #[tokio::test]
    async fn small_bodies_split_at_every_boundary() {
        let ctx = context(&"5".repeat(64));
        let chunks: [&[u8]; 3] = [b"hello, ", b"aws-chunked world", b"!"];
        let trailers = [
            ("x-amz-checksum-sha256", "abc="),
            ("x-amz-checksum-crc32", "AAAAAA=="),
        ];
        let cases = [
            (
                sign_body(&ctx, &chunks, None),
                ChunkMode::Signed(ctx.clone()),
            ),
            (
                sign_body(&ctx, &chunks, Some(&trailers)),
                ChunkMode::SignedTrailer(ctx.clone()),
            ),
            (
                b"7\r\nhello, \r\n11\r\naws-chunked world\r\n1\r\n!\r\n0\r\n\
                  x-amz-checksum-sha256:abc=\r\nx-amz-checksum-crc32:AAAAAA==\r\n\r\n"
                    .to_vec(),
                ChunkMode::UnsignedTrailer,
            ),
        ];
        for (body, mode) in cases {
            let expect_trailers = !matches!(mode, ChunkMode::Signed(_));
            let mut splits = vec![split_every(&body, 1)];
            for cut in 0..=body.len() {
                splits.push(vec![
                    Bytes::copy_from_slice(&body[..cut]),
                    Bytes::new(),
                    Bytes::copy_from_slice(&body[cut..]),
                ]);
            }
            splits.extend((0..50).map(|seed| split_random(&body, seed, 1 + seed % 40)));
            for pieces in splits {
                let outcome = run(pieces.clone(), mode.clone(), Some(25)).await;
                assert!(outcome.result.is_ok(), "{pieces:?}: {:?}", outcome.result);
                assert_eq!(outcome.data, b"hello, aws-chunked world!");
                let got = outcome.trailers.expect("trailers");
                if expect_trailers {
                    assert_eq!(got.0.len(), 2, "sent order kept");
                    assert_eq!(got.0[0].0, "x-amz-checksum-sha256");
                    assert_eq!(got.get("x-amz-checksum-crc32"), Some("AAAAAA=="));
                } else {
                    assert_eq!(got, Trailers::default());
                }
            }
        }
    }

    #[tokio::test]
    async fn aws_trailer_example() {
        for pieces in [
            whole(&aws_trailer_body()),
            split_random(&aws_trailer_body(), 7, 300),
        ] {
            let outcome = run(pieces, aws_trailer_mode(), Some(66560)).await;
            outcome.result.expect("AWS trailer example decodes");
            assert_eq!(outcome.data, vec![b'a'; 66560]);
            let trailers = outcome.trailers.expect("trailers");
            assert_eq!(
                trailers,
                Trailers(vec![(
                    "x-amz-checksum-crc32c".to_owned(),
                    "sOO8/Q==".to_owned()
                )])
            );
            assert_eq!(trailers.get("X-Amz-Checksum-CRC32C"), Some("sOO8/Q=="));
            assert_eq!(trailers.get("x-amz-checksum-crc32"), None);
        }
    }

    #[tokio::test]
    async fn trailer_variants_accepted() {
        let body = aws_trailer_body();
        // An empty line between the final chunk and the trailers, as in some write-ups, and
        // no empty line at the end.
        let marker = b"f992\r\n".as_slice();
        let at = body
            .windows(marker.len())
            .position(|w| w == marker)
            .expect("marker")
            + marker.len();
        let mut variant = body[..at].to_vec();
        variant.extend_from_slice(b"\r\n");
        variant.extend_from_slice(&body[at..body.len() - 2]);
        let outcome = run(whole(&variant), aws_trailer_mode(), Some(66560)).await;
        outcome.result.expect("variant decodes");
        assert!(outcome.trailers.is_some());
    }

    #[tokio::test]
    async fn bad_trailer_signature_or_value() {
        let body = aws_trailer_body();
        for (from, to) in [
            ("sOO8/Q==", "sOO8/Q=="),
            ("sOO8/Q==", "AAAAAA=="),
            ("d81f82fc", "d81f82fd"),
        ] {
            let text = body.clone();
            let changed = replace(&text, from.as_bytes(), to.as_bytes());
            let outcome = run(whole(&changed), aws_trailer_mode(), None).await;
            if from == to {
                assert!(outcome.result.is_ok());
            } else {
                assert!(
                    matches!(outcome.result, Err(ChunkError::SignatureMismatch)),
                    "{to}"
                );
                assert_eq!(outcome.data.len(), 66560, "the data itself was valid");
            }
        }
        // Signature line missing.
        let start = body
            .windows(23)
            .position(|w| w == b"x-amz-trailer-signature")
            .expect("signature line");
        let mut missing = body[..start].to_vec();
        missing.extend_from_slice(b"\r\n");
        let outcome = run(whole(&missing), aws_trailer_mode(), None).await;
        assert!(matches!(outcome.result, Err(ChunkError::Malformed(_))));
    }

    fn replace(haystack: &[u8], from: &[u8], to: &[u8]) -> Vec<u8> {
        let at = haystack
            .windows(from.len())
            .position(|w| w == from)
            .expect("pattern present");
        [&haystack[..at], to, &haystack[at + from.len()..]].concat()
    }

    #[tokio::test]
    async fn boto_unsigned_trailer_with_crc32() {
        let (body, data) = boto_unsigned_body();
        for pieces in [
            whole(&body),
            split_every(&body, 1),
            split_random(&body, 3, 1000),
        ] {
            let outcome = run(pieces, ChunkMode::UnsignedTrailer, Some(100_000)).await;
            outcome.result.expect("boto body decodes");
            assert_eq!(outcome.data, data);
            let trailers = outcome.trailers.expect("trailers");
            // "+wcbKw==" is base64 for the big-endian CRC32 0xfb071b2b.
            assert_eq!(trailers.get("x-amz-checksum-crc32"), Some("+wcbKw=="));
            assert_eq!(crc32fast::hash(&outcome.data), 0xfb07_1b2b);
        }
    }

    #[tokio::test]
    async fn unsigned_trailer_leniency() {
        let data = b"hello world".repeat(10);
        let strict = [
            b"6e\r\n".as_slice(),
            &data,
            b"\r\n0\r\nx-amz-checksum-crc32:6LiFlw==\r\n\r\n",
        ]
        .concat();
        // No final empty line; uppercase hex size; an extension; no trailers at all.
        for body in [
            strict[..strict.len() - 2].to_vec(),
            [b"6E;foo=bar\r\n".as_slice(), &strict[4..]].concat(),
            [b"6e\r\n".as_slice(), &data, b"\r\n0\r\n\r\n"].concat(),
            [b"6e\r\n".as_slice(), &data, b"\r\n0\r\n"].concat(),
        ] {
            let outcome = run(whole(&body), ChunkMode::UnsignedTrailer, Some(110)).await;
            outcome.result.expect("lenient body decodes");
            assert_eq!(outcome.data, data);
            assert_eq!(crc32fast::hash(&outcome.data), 0xe8b8_8597);
        }
    }

    #[tokio::test]
    async fn truncated_bodies_fail() {
        let cases = [
            (aws_streaming_body(), aws_signed_mode()),
            (aws_trailer_body(), aws_trailer_mode()),
            (boto_unsigned_body().0, ChunkMode::UnsignedTrailer),
        ];
        for (body, mode) in cases {
            let unsigned = matches!(mode, ChunkMode::UnsignedTrailer);
            // Leniency: the final empty line may be missing; and without a signature to
            // require, an unsigned body may stop right after its final chunk (the caller checks
            // that the trailer named in x-amz-trailer arrived).
            let lenient_cuts = [
                Some(body.len() - 2),
                unsigned.then(|| body.len() - b"x-amz-checksum-crc32:+wcbKw==\r\n\r\n".len()),
            ];
            // Every cut near the framing, and a sample of those inside the data.
            let cuts = (0..body.len())
                .step_by(61)
                .chain(0..200)
                .chain(65_536..65_800)
                .chain(body.len() - 300..body.len())
                .filter(|&cut| cut < body.len());
            for cut in cuts {
                let outcome = run(whole(&body[..cut]), mode.clone(), None).await;
                if lenient_cuts.contains(&Some(cut)) {
                    assert!(outcome.result.is_ok(), "cut at {cut}");
                } else {
                    assert!(
                        matches!(outcome.result, Err(ChunkError::Malformed(_))),
                        "cut at {cut}: {:?}",
                        outcome.result.err()
                    );
                }
            }
        }
    }

    #[tokio::test]
    async fn bad_chunk_signature_fails_after_the_data() {
        let body = aws_streaming_body();
        let changed = replace(&body, b"0055627c", b"1055627c");
        let outcome = run(whole(&changed), aws_signed_mode(), None).await;
        assert!(matches!(outcome.result, Err(ChunkError::SignatureMismatch)));
        assert_eq!(
            outcome.data.len(),
            65536 + 1024,
            "data came before the check"
        );

        let mut tampered = body.clone();
        tampered[100] = b'b';
        let outcome = run(whole(&tampered), aws_signed_mode(), None).await;
        assert!(matches!(outcome.result, Err(ChunkError::SignatureMismatch)));
        assert_eq!(outcome.data.len(), 65536, "stops at the first bad chunk");

        let final_changed = replace(&body, b"b6c6ea8a", b"b6c6ea8b");
        let outcome = run(whole(&final_changed), aws_signed_mode(), None).await;
        assert!(matches!(outcome.result, Err(ChunkError::SignatureMismatch)));

        // Signed with another seed (another request).
        let outcome = run(
            whole(&body),
            ChunkMode::Signed(context(&"0".repeat(64))),
            None,
        )
        .await;
        assert!(matches!(outcome.result, Err(ChunkError::SignatureMismatch)));
    }

    #[tokio::test]
    async fn signed_mode_framing_errors() {
        let body = aws_streaming_body();
        let no_signature = replace(
            &body,
            b"10000;chunk-signature=ad80c730a21e5b8d04586a2213dd63b9a0e99e0e2307b0ade35a65485a288648",
            b"10000",
        );
        let short_signature = replace(&body, b"ad80c730a21e5b8d", b"");
        let trailer_in_signed = [
            &body[..body.len() - 2],
            b"x-amz-checksum-crc32:AAAAAA==\r\n\r\n",
        ]
        .concat();
        let garbage_after = [body.as_slice(), b"extra"].concat();
        let no_crlf_after_data = replace(&body, b"aa\r\n400;", b"aaXX400;");
        for broken in [
            no_signature,
            short_signature,
            trailer_in_signed,
            garbage_after,
            no_crlf_after_data,
        ] {
            let outcome = run(whole(&broken), aws_signed_mode(), None).await;
            assert!(
                matches!(outcome.result, Err(ChunkError::Malformed(_))),
                "{:?}",
                outcome.result
            );
        }
    }

    #[tokio::test]
    async fn bad_hex_sizes() {
        for header in ["zz", "", " 6e", "6e ", "-1", "0x6e", "11111111111111111"] {
            let body = format!("{header}\r\nhello\r\n0\r\n\r\n");
            let outcome = run(whole(body.as_bytes()), ChunkMode::UnsignedTrailer, None).await;
            assert!(
                matches!(outcome.result, Err(ChunkError::Malformed(_))),
                "{header:?}"
            );
        }
        let huge = run(
            whole(b"140000001\r\nhello"),
            ChunkMode::UnsignedTrailer,
            None,
        )
        .await;
        assert!(matches!(huge.result, Err(ChunkError::TooLarge)));
    }

    #[tokio::test]
    async fn oversize_header_line_is_refused_without_buffering_it() {
        // An endless body with no newline must fail once the cap is passed.
        let pulled = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = pulled.clone();
        let endless = stream::repeat_with(move || {
            counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            Ok::<_, io::Error>(Bytes::from_static(&[b'1'; 1000]))
        });
        let (mut decoded, slot) = decode(endless, ChunkMode::UnsignedTrailer, None);
        assert!(matches!(
            decoded.next().await,
            Some(Err(ChunkError::Malformed(_)))
        ));
        assert!(decoded.next().await.is_none());
        assert!(slot.get().is_none());
        assert_eq!(
            pulled.load(std::sync::atomic::Ordering::Relaxed),
            MAX_LINE_LEN / 1000 + 1,
            "stops reading as soon as the line is too long"
        );

        let long_extension = format!("5;{}\r\nhello\r\n0\r\n\r\n", "x".repeat(MAX_LINE_LEN));
        let outcome = run(
            whole(long_extension.as_bytes()),
            ChunkMode::UnsignedTrailer,
            None,
        )
        .await;
        assert!(matches!(outcome.result, Err(ChunkError::Malformed(_))));

        let long_trailer = format!(
            "5\r\nhello\r\n0\r\nx-a:{}\r\n\r\n",
            "x".repeat(MAX_LINE_LEN)
        );
        let outcome = run(
            whole(long_trailer.as_bytes()),
            ChunkMode::UnsignedTrailer,
            None,
        )
        .await;
        assert!(matches!(outcome.result, Err(ChunkError::Malformed(_))));
    }

    #[tokio::test]
    async fn too_many_trailers() {
        let mut body = b"5\r\nhello\r\n0\r\n".to_vec();
        for i in 0..=MAX_TRAILERS {
            body.extend_from_slice(format!("x-t{i}:v\r\n").as_bytes());
        }
        body.extend_from_slice(b"\r\n");
        let outcome = run(whole(&body), ChunkMode::UnsignedTrailer, None).await;
        assert!(matches!(outcome.result, Err(ChunkError::TooLarge)));
    }

    #[tokio::test]
    async fn decoded_length_must_match() {
        for (length, ok) in [(66560, true), (66559, false), (66561, false), (0, false)] {
            let outcome = run(
                whole(&aws_streaming_body()),
                aws_signed_mode(),
                Some(length),
            )
            .await;
            if ok {
                assert!(outcome.result.is_ok());
            } else {
                assert!(
                    matches!(outcome.result, Err(ChunkError::DecodedLengthMismatch)),
                    "{length}"
                );
            }
        }
        // Too short a declared length is noticed before the oversized chunk is passed on.
        let outcome = run(whole(&aws_streaming_body()), aws_signed_mode(), Some(100)).await;
        assert_eq!(outcome.data.len(), 0);
    }

    #[tokio::test]
    async fn io_errors_are_passed_on() {
        let pieces: Vec<Result<Bytes, io::Error>> = vec![
            Ok(Bytes::from_static(b"5\r\nhel")),
            Err(io::Error::new(io::ErrorKind::ConnectionReset, "reset")),
        ];
        let (mut decoded, slot) = decode(stream::iter(pieces), ChunkMode::UnsignedTrailer, None);
        assert_eq!(
            decoded.next().await.and_then(Result::ok),
            Some(Bytes::from_static(b"hel"))
        );
        assert!(matches!(decoded.next().await, Some(Err(ChunkError::Io(_)))));
        assert!(decoded.next().await.is_none());
        assert!(slot.take().is_none());
    }

    #[tokio::test]
    async fn trailer_slot_get_and_take() {
        let (body, _) = boto_unsigned_body();
        let (mut decoded, slot) = decode(
            stream::iter(vec![Ok::<_, io::Error>(Bytes::from(body))]),
            ChunkMode::UnsignedTrailer,
            None,
        );
        let observer = slot.clone();
        while let Some(item) = decoded.next().await {
            item.expect("decodes");
            assert!(observer.get().is_none(), "filled only at the end");
        }
        assert!(observer.get().is_some());
        assert!(slot.take().is_some());
        assert!(observer.get().is_none(), "clones share the slot");
    }

    #[test]
    fn chunk_mode_for_payload() {
        let ctx = context("seed");
        assert!(matches!(
            ChunkMode::for_payload(Payload::StreamingSigned, &ctx),
            Some(ChunkMode::Signed(c)) if c.seed_signature() == "seed"
        ));
        assert!(matches!(
            ChunkMode::for_payload(Payload::StreamingSignedTrailer, &ctx),
            Some(ChunkMode::SignedTrailer(_))
        ));
        assert!(matches!(
            ChunkMode::for_payload(Payload::StreamingUnsignedTrailer, &ctx),
            Some(ChunkMode::UnsignedTrailer)
        ));
        assert!(ChunkMode::for_payload(Payload::Unsigned, &ctx).is_none());
        assert!(ChunkMode::for_payload(Payload::Sha256([0; 32]), &ctx).is_none());
    }

    #[test]
    fn decode_is_send_and_static() {
        fn assert_send_static<T: Send + 'static>(_: &T) {}
        let (decoded, slot) = decode(
            stream::empty::<Result<Bytes, io::Error>>(),
            ChunkMode::UnsignedTrailer,
            None,
        );
        assert_send_static(&decoded);
        assert_send_static(&slot);
    }
}
