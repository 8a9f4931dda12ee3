//! PostgreSQL wire framing: after startup a message is a type byte and an Int32 length
//! (counting itself) followed by the body (PostgreSQL docs, "Message Formats").

use std::io;

use bytes::{BufMut, BytesMut};

/// PostgreSQL's limit on a startup packet (`MAX_STARTUP_PACKET_LENGTH`).
const MAX_STARTUP: usize = 10_000;

/// Total length of the typed message at the start of `buf` if it is complete.
pub(super) fn frame_len(buf: &[u8]) -> io::Result<Option<usize>> {
    let Some(len) = buf.get(1..5) else {
        return Ok(None);
    };
    let len = i32::from_be_bytes(len.try_into().unwrap());
    if len < 4 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("message {:?} has length {len}", buf[0] as char),
        ));
    }
    let total = 1 + len as usize;
    Ok((buf.len() >= total).then_some(total))
}

/// Length of the untyped startup packet at the start of `buf` if it is complete.
pub(super) fn startup_len(buf: &[u8]) -> io::Result<Option<usize>> {
    let Some(len) = buf.get(..4) else {
        return Ok(None);
    };
    let len = i32::from_be_bytes(len.try_into().unwrap()) as usize;
    if !(8..=MAX_STARTUP).contains(&len) {
        return Err(io::Error::new(io::ErrorKind::InvalidData, format!("startup packet of {len} bytes")));
    }
    Ok((buf.len() >= len).then_some(len))
}

/// The request code of a startup packet (protocol version, or SSL/GSS/cancel request code).
pub(super) fn code(packet: &[u8]) -> i32 {
    i32::from_be_bytes(packet[4..8].try_into().unwrap())
}

/// The complete typed messages of `buf`, as (type byte, body).
pub(super) fn messages(buf: &[u8]) -> impl Iterator<Item = (u8, &[u8])> {
    let mut rest = buf;
    std::iter::from_fn(move || {
        let n = frame_len(rest).ok().flatten()?;
        let (m, tail) = rest.split_at(n);
        rest = tail;
        Some((m[0], &m[5..]))
    })
}

/// The NUL-terminated string at the start of `b` (lossy UTF-8) and the bytes after it.
pub(super) fn cstr(b: &[u8]) -> (String, &[u8]) {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    (String::from_utf8_lossy(&b[..end]).into_owned(), b.get(end + 1..).unwrap_or(&[]))
}

/// SQLSTATE (field `C`) and message (field `M`) of an ErrorResponse body.
pub(super) fn error_fields(mut body: &[u8]) -> (String, String) {
    let (mut code, mut message) = (String::new(), String::new());
    while let Some((&field, rest)) = body.split_first().filter(|(&f, _)| f != 0) {
        let (value, tail) = cstr(rest);
        match field {
            b'C' => code = value,
            b'M' => message = value,
            _ => {}
        }
        body = tail;
    }
    (code, message)
}

/// One typed message: `tag`, Int32 length, `body`.
pub(super) fn frame(tag: u8, body: &[u8]) -> BytesMut {
    let mut out = BytesMut::with_capacity(5 + body.len());
    out.put_u8(tag);
    out.put_i32(4 + body.len() as i32);
    out.put_slice(body);
    out
}

/// An ErrorResponse of severity ERROR with SQLSTATE `code` and message `text`.
pub(super) fn error_response(code: &str, text: &str) -> BytesMut {
    let mut body = BytesMut::new();
    for (field, value) in [(b'S', "ERROR"), (b'V', "ERROR"), (b'C', code), (b'M', &text.replace('\0', " "))] {
        body.put_u8(field);
        body.put_slice(value.as_bytes());
        body.put_u8(0);
    }
    body.put_u8(0);
    frame(b'E', &body)
}
