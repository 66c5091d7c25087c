//! The Confluent wire format: byte 0 (the magic byte), the schema id as 4 bytes big-endian,
//! then the payload. For Protobuf the payload starts with the message-index list: a count, then
//! that many indexes, each a zigzag varint; a count of 0 stands for `[0]` (the file's first
//! message).

/// The magic byte.
pub const MAGIC: u8 = 0;

/// The schema id and the rest of a message in the wire format.
pub fn split(message: &[u8]) -> Result<(u32, &[u8]), String> {
    match message {
        [MAGIC, a, b, c, d, rest @ ..] => Ok((u32::from_be_bytes([*a, *b, *c, *d]), rest)),
        [] => Err("empty value: not in the Confluent wire format".into()),
        [first, ..] if *first != MAGIC => Err(format!(
            "not in the Confluent wire format: the first byte is {first:#04x}, expected 0x00"
        )),
        _ => Err(format!(
            "not in the Confluent wire format: {} bytes, shorter than the 5-byte header",
            message.len()
        )),
    }
}

/// Appends the header of schema `id`.
pub fn write_header(out: &mut Vec<u8>, id: u32) {
    out.push(MAGIC);
    out.extend_from_slice(&id.to_be_bytes());
}

/// One zigzag varint (as Java's `ByteUtils.readVarint`), and the bytes after it.
fn read_varint(bytes: &[u8]) -> Result<(i64, &[u8]), String> {
    let mut value: u64 = 0;
    for (i, b) in bytes.iter().enumerate().take(10) {
        value |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            let decoded = ((value >> 1) as i64) ^ -((value & 1) as i64);
            return Ok((decoded, &bytes[i + 1..]));
        }
    }
    Err("the Protobuf message-index list is cut short or too long".into())
}

/// The message-index list of a Protobuf payload, and the message bytes after it.
pub fn message_indexes(payload: &[u8]) -> Result<(Vec<usize>, &[u8]), String> {
    let (count, mut rest) = read_varint(payload)?;
    if count == 0 {
        return Ok((vec![0], rest));
    }
    if !(0..=100).contains(&count) {
        return Err(format!(
            "the Protobuf message-index list has {count} entries"
        ));
    }
    let mut indexes = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let (i, after) = read_varint(rest)?;
        let i = usize::try_from(i).map_err(|_| format!("message index {i} is negative"))?;
        indexes.push(i);
        rest = after;
    }
    Ok((indexes, rest))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_and_indexes() {
        let mut m = Vec::new();
        write_header(&mut m, 258);
        m.extend_from_slice(b"xy");
        assert_eq!(split(&m).unwrap(), (258, b"xy".as_slice()));
        assert_eq!(
            split(b"{\"a\":1}").unwrap_err(),
            "not in the Confluent wire format: the first byte is 0x7b, expected 0x00"
        );
        assert!(split(&[0, 0, 1]).unwrap_err().contains("shorter than"));
        assert_eq!(message_indexes(&[0, 9]).unwrap(), (vec![0], [9].as_slice()));
        // [1, 2]: count 2, then 1 and 2, all zigzag (2, 2, 4).
        assert_eq!(
            message_indexes(&[4, 2, 4, 7]).unwrap(),
            (vec![1, 2], [7].as_slice())
        );
        assert!(message_indexes(&[0x80]).is_err());
    }
}
