//! Values as text: a parameter of a Bind or a column of a DataRow, in the text format as sent,
//! or in the binary format decoded by `postgres-types` for the types an elector sends and
//! reads (booleans, integers, floats, text); anything else in binary is shown as `\x` and hex.

use postgres_types::{FromSql, Type};

use crate::record::MAX_TEXT;

/// Format code 1: binary.
const BINARY: i16 = 1;

/// The format of value `i` of `n` under `codes` (the protocol's rule: no code means text for
/// all, one code applies to all, else one per value).
pub(crate) fn format_of(codes: &[i16], i: usize) -> i16 {
    match codes {
        [] => 0,
        [one] => *one,
        many => many.get(i).copied().unwrap_or(0),
    }
}

/// `raw` as text: `format` as the wire gave it, `oid` its type when known (0 when not).
pub(crate) fn render(raw: &[u8], format: i16, oid: u32) -> String {
    if format != BINARY {
        return cut(String::from_utf8_lossy(raw).into_owned());
    }
    let ty = Type::from_oid(oid).unwrap_or(Type::UNKNOWN);
    binary(&ty, raw).unwrap_or_else(|| hex(raw))
}

fn binary(ty: &Type, raw: &[u8]) -> Option<String> {
    fn get<'a, T: FromSql<'a> + ToString>(ty: &Type, raw: &'a [u8]) -> Option<String> {
        T::accepts(ty)
            .then(|| T::from_sql(ty, raw).ok())
            .flatten()
            .map(|v| v.to_string())
    }
    match *ty {
        Type::BOOL => bool::from_sql(ty, raw)
            .ok()
            .map(|b| if b { "t" } else { "f" }.to_owned()),
        Type::INT2 => get::<i16>(ty, raw),
        Type::INT4 => get::<i32>(ty, raw),
        Type::INT8 => get::<i64>(ty, raw),
        Type::OID => get::<u32>(ty, raw),
        Type::FLOAT4 => get::<f32>(ty, raw),
        Type::FLOAT8 => get::<f64>(ty, raw),
        Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME | Type::UNKNOWN => {
            get::<String>(ty, raw).map(cut)
        }
        _ => None,
    }
}

fn hex(raw: &[u8]) -> String {
    let mut s = String::with_capacity(2 + 2 * raw.len().min(MAX_TEXT / 2));
    s.push_str("\\x");
    for b in raw.iter().take(MAX_TEXT / 2 - 1) {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

/// `s` cut to at most [`MAX_TEXT`] bytes, at a character boundary.
pub(crate) fn cut(mut s: String) -> String {
    if s.len() > MAX_TEXT {
        let mut end = MAX_TEXT;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_values_are_kept_and_binary_ones_decoded_by_type() {
        assert_eq!(render(b"1886156915", 0, 0), "1886156915");
        assert_eq!(render(&1886156915i32.to_be_bytes(), 1, 23), "1886156915");
        assert_eq!(render(&7i64.to_be_bytes(), 1, 20), "7");
        assert_eq!(render(&[1], 1, 16), "t");
        assert_eq!(render(&[0], 1, 16), "f");
        assert_eq!(render(b"800ms", 1, 25), "800ms");
        // A type it does not decode, or bytes that do not fit the type: hex.
        assert_eq!(render(&[0xde, 0xad], 1, 17), "\\xdead");
        assert_eq!(render(&[1, 2, 3], 1, 23), "\\x010203");
        assert_eq!(format_of(&[], 3), 0);
        assert_eq!(format_of(&[1], 3), 1);
        assert_eq!(format_of(&[0, 1], 1), 1);
    }

    #[test]
    fn long_text_is_cut_at_a_character_boundary() {
        let long = "é".repeat(MAX_TEXT);
        let c = cut(long);
        assert!(c.len() <= MAX_TEXT && c.is_char_boundary(c.len()));
    }
}
