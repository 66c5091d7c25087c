//! The one serde codec of checkpoint state: [postcard](https://docs.rs/postcard) 1.x, whose
//! wire format is documented and stable across its 1.x versions, so a checkpoint written by
//! one build of Tidemark reads in the next. Sources, sinks and operators encode what they
//! keep in a checkpoint (positions, file lengths, per-key values) with [`encode`] and read it
//! back with [`decode`]; the checkpoint files add a versioned header and a checksum around it.

use serde::de::DeserializeOwned;
use serde::Serialize;

/// State that could not be encoded or decoded.
#[derive(Debug, thiserror::Error)]
#[error("checkpoint state: {0}")]
pub struct StateCodecError(#[from] postcard::Error);

/// Encodes `value` as checkpoint state.
pub fn encode<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, StateCodecError> {
    Ok(postcard::to_stdvec(value)?)
}

/// Appends `value`, encoded as checkpoint state, to `out` (without allocating beyond what
/// `out` grows by: a checkpoint encodes many values into one buffer).
pub fn encode_into<T: Serialize + ?Sized>(
    value: &T,
    out: &mut Vec<u8>,
) -> Result<(), StateCodecError> {
    Ok(append(value, out)?)
}

/// [`encode_into`] with postcard's error.
#[inline]
pub(crate) fn append<T: Serialize + ?Sized>(value: &T, out: &mut Vec<u8>) -> postcard::Result<()> {
    postcard::serialize_with_flavor(value, AppendTo(out))
}

/// A postcard output that appends to a `Vec` it borrows.
struct AppendTo<'a>(&'a mut Vec<u8>);

impl postcard::ser_flavors::Flavor for AppendTo<'_> {
    type Output = ();

    #[inline]
    fn try_extend(&mut self, data: &[u8]) -> postcard::Result<()> {
        self.0.extend_from_slice(data);
        Ok(())
    }

    #[inline]
    fn try_push(&mut self, data: u8) -> postcard::Result<()> {
        self.0.push(data);
        Ok(())
    }

    fn finalize(self) -> postcard::Result<()> {
        Ok(())
    }
}

/// Appends `n` as the codec encodes an unsigned integer (`u16` to `u64`, `usize`, an enum's
/// variant, the length of a sequence, string or byte string): postcard's varint, 7 bits a
/// byte, least significant first, the high bit set on every byte but the last (postcard does
/// not export its own). The runtime's framing of snapshots uses it; operators put their state
/// through serde ([`KeyedSnapshot::put`](crate::keyed_state::KeyedSnapshot::put)).
#[inline]
pub fn encode_varint(n: u64, out: &mut Vec<u8>) {
    let (bytes, len) = varint_bytes(n);
    out.extend_from_slice(&bytes[..len]);
}

/// The bytes [`encode_varint`] appends for `n`: the first `.1` of `.0` (at most 10).
#[inline]
pub fn varint_bytes(mut n: u64) -> ([u8; 10], usize) {
    let mut bytes = [0u8; 10];
    let mut len = 0;
    while n >= 0x80 {
        bytes[len] = n as u8 | 0x80;
        n >>= 7;
        len += 1;
    }
    bytes[len] = n as u8;
    (bytes, len + 1)
}

/// Appends `n` as the codec encodes a signed integer (`i16` to `i64`): zigzag (0, -1, 1, -2,
/// … as 0, 1, 2, 3, …), then [`encode_varint`].
#[inline]
pub fn encode_varint_signed(n: i64, out: &mut Vec<u8>) {
    encode_varint(((n << 1) ^ (n >> 63)) as u64, out);
}

/// Decodes checkpoint state [`encode`] made; bytes left over are an error.
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, StateCodecError> {
    let (value, rest) = postcard::take_from_bytes(bytes)?;
    if rest.is_empty() {
        Ok(value)
    } else {
        Err(StateCodecError(postcard::Error::DeserializeBadEncoding))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The hand-written varints are postcard's, byte for byte.
        #[test]
        fn varints_are_postcards(u in any::<u64>(), i in any::<i64>(), small in 0u64..300) {
            for n in [u, small, u >> 30] {
                let mut out = vec![9];
                encode_varint(n, &mut out);
                prop_assert_eq!(&out[1..], &encode(&n).unwrap()[..]);
            }
            for n in [i, small as i64, -(small as i64)] {
                let mut out = Vec::new();
                encode_varint_signed(n, &mut out);
                prop_assert_eq!(out, encode(&n).unwrap());
            }
            let mut out = Vec::new();
            encode_into(&(u, "ab"), &mut out).unwrap();
            encode_into(&i, &mut out).unwrap();
            prop_assert_eq!(out, [encode(&(u, "ab")).unwrap(), encode(&i).unwrap()].concat());
        }
    }

    #[test]
    fn values_come_back_equal_and_damage_is_an_error() {
        let value = (
            7u64,
            String::from("user-3"),
            vec![1.5f64, -2.0],
            Some(-9i64),
        );
        let bytes = encode(&value).unwrap();
        assert_eq!(
            decode::<(u64, String, Vec<f64>, Option<i64>)>(&bytes).unwrap(),
            value
        );
        assert!(decode::<(u64, String, Vec<f64>, Option<i64>)>(&bytes[..bytes.len() - 1]).is_err());
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(decode::<(u64, String, Vec<f64>, Option<i64>)>(&longer).is_err());
    }
}
