//! A schema's text: JSON as CPython's `json` module reads it ([`parse`]) and writes it
//! ([`canonical`], [`in_order`]), the fingerprint ([`fingerprint`]), and the gate every schema
//! text passes before a parser reads it ([`check_source`]: size and nesting, for TOML and JSON;
//! [`check_nesting`]). The checks a reader makes on a frame's embedded schema, in order, are
//! `schema::embedded`'s.
//!
//! # The canonical form
//!
//! (Specified for readers of frames in `docs/format.md`, section 3; this is the codec's view.)
//!
//! What CPython's `json.dumps(value, sort_keys=True, separators=(",", ":"))` writes (its other
//! arguments at their defaults: `ensure_ascii=True`, `allow_nan=True`), for the values a schema
//! holds:
//!
//! - no whitespace at all; `,` between items, `:` after a key;
//! - object keys sorted by code point (Python's `str` order), each key once;
//! - `null`, `true`, `false`;
//! - integers in decimal, no leading zeros, no `+`, `-0` as `0`, at most [`MAX_INT_DIGITS`]
//!   digits (CPython's `int` limit);
//! - floats as Python's `repr`: the shortest digits that round-trip; positional when the decimal
//!   exponent `e` (of `d.ddd × 10^e`) is in `-4 <= e < 16`, with at least one digit after the
//!   point (`1.0`, `0.0001`, `-0.0`, `1234567890123456.0`), else `d[.ddd]e±XX` with a sign and at
//!   least two exponent digits (`1e-05`, `1.5e+16`, `5e-324`); `NaN`, `Infinity`, `-Infinity`;
//! - strings in ASCII: `\"`, `\\`, `\b`, `\f`, `\n`, `\r`, `\t` as those two-character escapes,
//!   other characters below U+0020 and every character from U+007F as `\u` and four lowercase
//!   hex digits (above U+FFFF: a UTF-16 surrogate pair, `\ud83d\ude00`; a lone surrogate as
//!   itself, `\ud800`), every other character (U+0020 to U+007E) as itself (`/` unescaped).
//!
//! A schema's text is ASCII, so its fingerprint is the digest of its UTF-8 bytes, equal to the
//! digest Python computes of `canonical_json.encode()`.

use std::fmt::Write as _;

use sha2::{Digest, Sha256};

use crate::error::{Error, Result};
use crate::{frame_err, schema_err};

/// The largest schema text (a frame's `py_wire.schema`, a schema file) read at all, in bytes.
pub const MAX_SCHEMA_BYTES: usize = 1 << 20;
/// The deepest nesting of arrays and objects (tables) a schema may have; a real one needs 3.
pub const MAX_NESTING: usize = 32;
/// The most digits an integer may have: CPython's default `sys.get_int_max_str_digits()`,
/// beyond which its `json.loads` refuses the text.
pub const MAX_INT_DIGITS: usize = 4300;

/// What the errors call the text.
const WHERE: &str = "the frame's schema";

/// A JSON value as CPython's `json` module holds it. Strings are code points (Python's `str`,
/// which may hold lone surrogates); integers are their canonical decimal text (any size).
#[derive(Debug, Clone, PartialEq)]
pub enum Json {
    /// `null` (Python's `None`).
    Null,
    /// `true` or `false`.
    Bool(bool),
    /// An integer, as its canonical decimal text.
    Int(String),
    /// A float (Python's `float`, `NaN` and the infinities included).
    Float(f64),
    /// A string, as code points.
    Str(Vec<u32>),
    /// An array, in order.
    Array(Vec<Json>),
    /// Keys in text order, duplicates kept (the canonical form keeps each key's last value).
    Object(Vec<(Vec<u32>, Json)>),
}

impl Json {
    /// The value of `key` in an object (its last occurrence), if any.
    pub fn get(&self, key: &str) -> Option<&Json> {
        let Json::Object(items) = self else {
            return None;
        };
        let key: Vec<u32> = key.chars().map(u32::from).collect();
        items.iter().rev().find(|(k, _)| *k == key).map(|(_, v)| v)
    }
}

/// Code points as a Rust string; `None` if they hold a lone surrogate.
pub fn code_points_to_string(s: &[u32]) -> Option<String> {
    s.iter().map(|&c| char::from_u32(c)).collect()
}

// -- parsing ----------------------------------------------------------------------------------

/// Parses `text` as CPython's `json.loads` does (the C scanner, `strict=True`): whitespace is
/// space, tab, newline and carriage return; `NaN`, `Infinity` and `-Infinity` are numbers; a
/// control character inside a string is an error; `\u` escapes of a high then a low surrogate
/// form one character; a number with a fraction or exponent is a float (rounded to nearest,
/// overflow to infinity), else an integer of at most [`MAX_INT_DIGITS`] digits. Nesting deeper
/// than [`MAX_NESTING`] is refused.
pub fn parse(text: &str) -> Result<Json> {
    let mut p = Parser {
        t: text,
        s: text.as_bytes(),
        i: 0,
    };
    p.ws();
    let value = p.value(0)?;
    p.ws();
    if p.i != p.s.len() {
        return Err(p.err("extra data after the value"));
    }
    Ok(value)
}

struct Parser<'a> {
    t: &'a str,
    s: &'a [u8],
    i: usize,
}

impl Parser<'_> {
    fn err(&self, what: &str) -> Error {
        frame_err!("{WHERE} is not valid JSON: {what} at byte {}", self.i)
    }

    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }

    fn ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.i += 1;
        }
    }

    fn eat(&mut self, word: &[u8]) -> bool {
        if self
            .s
            .get(self.i..)
            .is_some_and(|rest| rest.starts_with(word))
        {
            self.i += word.len();
            true
        } else {
            false
        }
    }

    fn value(&mut self, depth: usize) -> Result<Json> {
        match self.peek() {
            None => Err(self.err("a value expected")),
            Some(b'{') | Some(b'[') if depth >= MAX_NESTING => Err(frame_err!(
                "{WHERE}: nested deeper than {MAX_NESTING} levels"
            )),
            Some(b'{') => self.object(depth + 1),
            Some(b'[') => self.array(depth + 1),
            Some(b'"') => Ok(Json::Str(self.string()?)),
            Some(b'n') if self.eat(b"null") => Ok(Json::Null),
            Some(b't') if self.eat(b"true") => Ok(Json::Bool(true)),
            Some(b'f') if self.eat(b"false") => Ok(Json::Bool(false)),
            Some(b'N') if self.eat(b"NaN") => Ok(Json::Float(f64::NAN)),
            Some(b'I') if self.eat(b"Infinity") => Ok(Json::Float(f64::INFINITY)),
            Some(b'-') if self.eat(b"-Infinity") => Ok(Json::Float(f64::NEG_INFINITY)),
            Some(b'-' | b'0'..=b'9') => self.number(),
            Some(_) => Err(self.err("a value expected")),
        }
    }

    fn object(&mut self, depth: usize) -> Result<Json> {
        self.i += 1; // '{'
        let mut items = Vec::new();
        self.ws();
        if self.eat(b"}") {
            return Ok(Json::Object(items));
        }
        loop {
            self.ws();
            if self.peek() != Some(b'"') {
                return Err(self.err("a string key expected"));
            }
            let key = self.string()?;
            self.ws();
            if !self.eat(b":") {
                return Err(self.err("':' expected"));
            }
            self.ws();
            let value = self.value(depth)?;
            items.push((key, value));
            self.ws();
            if self.eat(b",") {
                continue;
            }
            if self.eat(b"}") {
                return Ok(Json::Object(items));
            }
            return Err(self.err("',' or '}' expected"));
        }
    }

    fn array(&mut self, depth: usize) -> Result<Json> {
        self.i += 1; // '['
        let mut items = Vec::new();
        self.ws();
        if self.eat(b"]") {
            return Ok(Json::Array(items));
        }
        loop {
            self.ws();
            items.push(self.value(depth)?);
            self.ws();
            if self.eat(b",") {
                continue;
            }
            if self.eat(b"]") {
                return Ok(Json::Array(items));
            }
            return Err(self.err("',' or ']' expected"));
        }
    }

    fn hex4(&mut self) -> Result<u32> {
        let digits = self
            .s
            .get(self.i..self.i.saturating_add(4))
            .filter(|d| d.iter().all(u8::is_ascii_hexdigit))
            .ok_or_else(|| self.err("four hex digits expected after \\u"))?;
        let mut v = 0u32;
        for &d in digits {
            // Hex digits, checked above.
            v = v * 16 + char::from(d).to_digit(16).unwrap_or(0);
        }
        self.i += 4;
        Ok(v)
    }

    fn string(&mut self) -> Result<Vec<u32>> {
        self.i += 1; // '"'
        let mut out = Vec::new();
        loop {
            // Every step moves by whole characters, so `i` stays on a character boundary.
            let Some(c) = self.t.get(self.i..).and_then(|rest| rest.chars().next()) else {
                return Err(self.err("unterminated string"));
            };
            match c {
                '"' => {
                    self.i += 1;
                    return Ok(out);
                }
                '\\' => {
                    self.i += 1;
                    let Some(e) = self.peek() else {
                        return Err(self.err("unterminated string"));
                    };
                    self.i += 1;
                    let simple = match e {
                        b'"' => Some('"'),
                        b'\\' => Some('\\'),
                        b'/' => Some('/'),
                        b'b' => Some('\u{8}'),
                        b'f' => Some('\u{c}'),
                        b'n' => Some('\n'),
                        b'r' => Some('\r'),
                        b't' => Some('\t'),
                        b'u' => None,
                        _ => return Err(self.err("invalid \\escape")),
                    };
                    if let Some(c) = simple {
                        out.push(u32::from(c));
                        continue;
                    }
                    let mut unit = self.hex4()?;
                    if (0xD800..0xDC00).contains(&unit)
                        && self.s.get(self.i..self.i + 2) == Some(b"\\u")
                    {
                        let save = self.i;
                        self.i += 2;
                        let low = self.hex4()?;
                        if (0xDC00..0xE000).contains(&low) {
                            unit = 0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00);
                        } else {
                            self.i = save; // a lone high surrogate, then another escape
                        }
                    }
                    out.push(unit);
                }
                c if u32::from(c) < 0x20 => return Err(self.err("invalid control character")),
                c => {
                    self.i += c.len_utf8();
                    out.push(u32::from(c));
                }
            }
        }
    }

    fn number(&mut self) -> Result<Json> {
        let start = self.i;
        self.eat(b"-");
        let digits_start = self.i;
        match self.peek() {
            Some(b'0') => self.i += 1,
            Some(b'1'..=b'9') => {
                while matches!(self.peek(), Some(b'0'..=b'9')) {
                    self.i += 1;
                }
            }
            _ => return Err(self.err("a value expected")),
        }
        let int_end = self.i;
        let mut is_float = false;
        if self.peek() == Some(b'.') && matches!(self.s.get(self.i + 1), Some(b'0'..=b'9')) {
            is_float = true;
            self.i += 1;
            while matches!(self.peek(), Some(b'0'..=b'9')) {
                self.i += 1;
            }
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            let save = self.i;
            self.i += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.i += 1;
            }
            if matches!(self.peek(), Some(b'0'..=b'9')) {
                is_float = true;
                while matches!(self.peek(), Some(b'0'..=b'9')) {
                    self.i += 1;
                }
            } else {
                self.i = save; // as CPython: "1e" is the integer 1, then extra data
            }
        }
        let lexeme =
            std::str::from_utf8(&self.s[start..self.i]).map_err(|_| self.err("invalid number"))?;
        if is_float {
            let x: f64 = lexeme.parse().map_err(|_| self.err("invalid number"))?;
            return Ok(Json::Float(x));
        }
        let digits = int_end - digits_start;
        if digits > MAX_INT_DIGITS {
            return Err(frame_err!(
                "{WHERE} is not valid JSON: an integer of {digits} digits at byte {start} (CPython \
                 reads at most {MAX_INT_DIGITS})"
            ));
        }
        Ok(Json::Int(if lexeme == "-0" {
            "0".into()
        } else {
            lexeme.into()
        }))
    }
}

// -- the canonical serializer ------------------------------------------------------------------

/// The canonical form of `value` (see the module docs): CPython's
/// `json.dumps(value, sort_keys=True, separators=(",", ":"))`.
pub fn canonical(value: &Json) -> String {
    let mut out = String::new();
    write_value(&mut out, value, true);
    out
}

/// `value` written as [`canonical`] writes it, but with each object's keys in the order the
/// value holds them (every entry, as given).
pub fn in_order(value: &Json) -> String {
    let mut out = String::new();
    write_value(&mut out, value, false);
    out
}

fn write_value(out: &mut String, value: &Json, sorted: bool) {
    match value {
        Json::Null => out.push_str("null"),
        Json::Bool(true) => out.push_str("true"),
        Json::Bool(false) => out.push_str("false"),
        Json::Int(digits) => out.push_str(digits),
        Json::Float(x) => write_float(out, *x),
        Json::Str(s) => write_string(out, s),
        Json::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_value(out, item, sorted);
            }
            out.push(']');
        }
        Json::Object(items) => {
            let entries: Vec<(&Vec<u32>, &Json)> = if sorted {
                // A dict: each key once, with its last value; then sorted by code point.
                let mut last: Vec<(&Vec<u32>, &Json)> = Vec::with_capacity(items.len());
                let mut order: Vec<usize> = (0..items.len()).collect();
                order.sort_by(|&a, &b| items[a].0.cmp(&items[b].0).then(b.cmp(&a)));
                for i in order {
                    let (k, v) = &items[i];
                    if last.last().is_some_and(|(prev, _)| *prev == k) {
                        continue; // an earlier occurrence of the key: the later value won
                    }
                    last.push((k, v));
                }
                last
            } else {
                items.iter().map(|(k, v)| (k, v)).collect()
            };
            out.push('{');
            for (i, (k, v)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(out, k);
                out.push(':');
                write_value(out, v, sorted);
            }
            out.push('}');
        }
    }
}

/// A string as CPython's `json` writes it with `ensure_ascii=True`.
pub fn write_string(out: &mut String, s: &[u32]) {
    out.push('"');
    for &c in s {
        match c {
            0x22 => out.push_str("\\\""),
            0x5C => out.push_str("\\\\"),
            0x08 => out.push_str("\\b"),
            0x0C => out.push_str("\\f"),
            0x0A => out.push_str("\\n"),
            0x0D => out.push_str("\\r"),
            0x09 => out.push_str("\\t"),
            0x20..=0x7E => out.push(char::from(c as u8)),
            0x10000.. => {
                let v = c - 0x10000;
                let _ = write!(
                    out,
                    "\\u{:04x}\\u{:04x}",
                    0xD800 | (v >> 10),
                    0xDC00 | (v & 0x3FF)
                );
            }
            _ => {
                let _ = write!(out, "\\u{c:04x}");
            }
        }
    }
    out.push('"');
}

/// A float as Python's `repr` writes it (and `json.dumps`, with `NaN` and `Infinity`).
pub fn write_float(out: &mut String, x: f64) {
    if x.is_nan() {
        out.push_str("NaN");
        return;
    }
    if x.is_infinite() {
        out.push_str(if x > 0.0 { "Infinity" } else { "-Infinity" });
        return;
    }
    if x.is_sign_negative() {
        out.push('-');
    }
    if x == 0.0 {
        out.push_str("0.0");
        return;
    }
    // Rust's shortest round-trip digits, as `d.ddde<exp>`, fix how many digits Python writes;
    // when two strings of that length round-trip, Python writes the one nearest the value
    // (ties to even: 562949953421312.25 is "….2"), which is the correctly rounded form.
    let shortest = format!("{:e}", x.abs());
    let n_digits = shortest
        .split_once('e')
        .map_or(1, |(m, _)| m.len() - m.contains('.') as usize);
    let nearest = format!("{:.*e}", n_digits.saturating_sub(1), x.abs());
    let sci = if nearest.parse::<f64>() == Ok(x.abs()) {
        nearest
    } else {
        shortest
    };
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let digits: String = mantissa.chars().filter(|&c| c != '.').collect();
    let exp: i64 = exp.parse().unwrap_or(0);
    // Python's `decpt`: the value is 0.DIGITS × 10^decpt.
    let decpt = exp + 1;
    let n = digits.len() as i64;
    if !(-4 < decpt && decpt <= 16) {
        let (first, rest) = digits.split_at(digits.len().min(1));
        out.push_str(first);
        if !rest.is_empty() {
            out.push('.');
            out.push_str(rest);
        }
        let sign = if exp < 0 { '-' } else { '+' };
        let _ = write!(out, "e{sign}{:02}", exp.unsigned_abs());
    } else if decpt <= 0 {
        out.push_str("0.");
        out.extend(std::iter::repeat_n('0', decpt.unsigned_abs() as usize));
        out.push_str(&digits);
    } else if decpt < n {
        let (int, frac) = digits.split_at(decpt as usize);
        out.push_str(int);
        out.push('.');
        out.push_str(frac);
    } else {
        out.push_str(&digits);
        out.extend(std::iter::repeat_n('0', (decpt - n) as usize));
        out.push_str(".0");
    }
}

// -- the checks --------------------------------------------------------------------------------

/// `"sha256:" + hex(sha256(text))`, as py_wire writes fingerprints.
pub fn fingerprint(text: &str) -> String {
    let digest = Sha256::digest(text.as_bytes());
    let mut out = String::with_capacity(7 + 64);
    out.push_str("sha256:");
    for b in digest {
        let _ = write!(out, "{b:02x}");
    }
    out
}

/// Refuses text whose arrays and objects nest deeper than [`MAX_NESTING`], counting brackets
/// outside strings, in one pass (before any parse).
pub fn check_nesting(text: &str) -> Result<()> {
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    for &b in text.as_bytes() {
        if in_string {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                if depth > MAX_NESTING {
                    return Err(frame_err!(
                        "{WHERE}: nested deeper than {MAX_NESTING} levels"
                    ));
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    Ok(())
}

/// The language a schema's source text is written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Syntax {
    /// A schema file.
    Toml,
    /// A schema's JSON (a frame's, or `Schema.from_json`'s).
    Json,
}

/// The gate every schema text passes before a parser reads it (a file's TOML, JSON handed to
/// `Schema.from_json`): at most [`MAX_SCHEMA_BYTES`] characters, and brackets nested at most
/// [`MAX_NESTING`] deep outside strings and comments, so no parser recurses on hostile text.
/// The error (a `SchemaError`) names `source`.
pub fn check_source(text: &str, syntax: Syntax, source: &str) -> Result<()> {
    let chars = text.chars().count();
    if chars > MAX_SCHEMA_BYTES {
        return Err(schema_err!(
            "{source}: {chars} characters; a schema is at most {MAX_SCHEMA_BYTES}"
        ));
    }
    let deep = match syntax {
        Syntax::Json => check_nesting(text).is_err(),
        Syntax::Toml => toml_too_deep(text),
    };
    if deep {
        return Err(schema_err!(
            "{source}: nested deeper than {MAX_NESTING} levels"
        ));
    }
    Ok(())
}

/// Whether TOML `text`'s arrays and inline tables nest deeper than [`MAX_NESTING`], counting
/// brackets outside strings (basic and literal, one-line and multi-line) and comments, in one
/// pass. A one-line string or a comment ends at a newline; a backslash in a basic string
/// escapes the next character.
fn toml_too_deep(text: &str) -> bool {
    #[derive(Clone, Copy, PartialEq)]
    enum In {
        Code,
        Basic,
        Literal,
        MultiBasic,
        MultiLiteral,
        Comment,
    }
    let s = text.as_bytes();
    let (mut depth, mut state, mut i) = (0usize, In::Code, 0usize);
    while i < s.len() {
        let b = s[i];
        let triple = |q: u8| s.get(i..i + 3) == Some(&[q, q, q][..]);
        let mut step = 1;
        match state {
            In::Code => match b {
                b'[' | b'{' => {
                    depth += 1;
                    if depth > MAX_NESTING {
                        return true;
                    }
                }
                b']' | b'}' => depth = depth.saturating_sub(1),
                b'"' if triple(b'"') => (state, step) = (In::MultiBasic, 3),
                b'\'' if triple(b'\'') => (state, step) = (In::MultiLiteral, 3),
                b'"' => state = In::Basic,
                b'\'' => state = In::Literal,
                b'#' => state = In::Comment,
                _ => {}
            },
            In::Basic | In::MultiBasic if b == b'\\' => step = 2,
            In::Basic if b == b'"' || b == b'\n' => state = In::Code,
            In::Literal if b == b'\'' || b == b'\n' => state = In::Code,
            In::Comment if b == b'\n' => state = In::Code,
            In::MultiBasic if triple(b'"') => (state, step) = (In::Code, 3),
            In::MultiLiteral if triple(b'\'') => (state, step) = (In::Code, 3),
            _ => {}
        }
        i += step;
    }
    false
}

/// Checks `text` is the canonical form of the JSON it holds, returning that value.
pub fn check_canonical(text: &str) -> Result<Json> {
    let value = parse(text)?;
    let again = canonical(&value);
    if again != text {
        let (a, b) = (text.as_bytes(), again.as_bytes());
        let at = a.iter().zip(b).take_while(|(x, y)| x == y).count();
        let shown = |s: &[u8]| {
            let start = at.saturating_sub(20);
            String::from_utf8_lossy(&s[start.min(s.len())..(at + 20).min(s.len())]).into_owned()
        };
        return Err(frame_err!(
            "{WHERE} is not in canonical form (keys sorted, no whitespace, CPython's json.dumps \
             escaping): at byte {at} it reads {:?} where the canonical form reads {:?}",
            shown(a),
            shown(b)
        )
        .expected(shown(b))
        .found(shown(a)));
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_source_gate_counts_brackets_outside_strings_and_comments() {
        let deep = |open: &str| format!("a = {}{}", open.repeat(33), "]".repeat(33));
        let refused = |text: &str, syntax| check_source(text, syntax, "s.toml").is_err();
        assert!(refused(&deep("["), Syntax::Toml));
        assert!(!refused(&deep("[").replace("[[[", "[["), Syntax::Toml));
        let decoy = "[".repeat(40);
        for text in [
            format!("a = \"{decoy}\""),
            format!("a = '{decoy}'"),
            format!("a = \"\"\"\n{decoy}\n\"\"\""),
            format!("a = '''{decoy}'''"),
            format!("# {decoy}\na = 1"),
            format!("a = \"\\\"{decoy}\""),
        ] {
            assert!(!refused(&text, Syntax::Toml), "{text}");
        }
        // A one-line string ends at a newline: brackets after it count.
        assert!(refused(&format!("a = \"x\n{decoy}"), Syntax::Toml));
        assert!(refused(&"[".repeat(33), Syntax::Json));
        let err = check_source(&" ".repeat(MAX_SCHEMA_BYTES + 1), Syntax::Json, "s.json");
        assert!(err
            .unwrap_err()
            .message()
            .starts_with("s.json: 1048577 characters"));
    }

    fn canon(text: &str) -> String {
        canonical(&parse(text).unwrap())
    }

    fn float(x: f64) -> String {
        let mut s = String::new();
        write_float(&mut s, x);
        s
    }

    #[test]
    fn floats_as_python_repr() {
        let cases: &[(f64, &str)] = &[
            (0.5, "0.5"),
            (1.0, "1.0"),
            (-0.0, "-0.0"),
            (0.0, "0.0"),
            (0.1, "0.1"),
            (1e-4, "0.0001"),
            (1e-5, "1e-05"),
            (1.5e-7, "1.5e-07"),
            (123.456, "123.456"),
            (1e15, "1000000000000000.0"),
            (1234567890123456.0, "1234567890123456.0"),
            (1e16, "1e+16"),
            (1.5e16, "1.5e+16"),
            (1e22, "1e+22"),
            (1.7976931348623157e308, "1.7976931348623157e+308"),
            (5e-324, "5e-324"),
            (3.3895313892515355e38, "3.3895313892515355e+38"),
            (65504.0, "65504.0"),
            // Two 17-digit strings round-trip; the value lies halfway, Python writes the even one.
            (562949953421312.2, "562949953421312.2"),
            (562949953421312.3, "562949953421312.2"),
            (562949953421312.4, "562949953421312.4"),
            (-2.5, "-2.5"),
            (f64::NAN, "NaN"),
            (f64::INFINITY, "Infinity"),
            (f64::NEG_INFINITY, "-Infinity"),
        ];
        for &(x, want) in cases {
            assert_eq!(float(x), want, "{x:e}");
        }
    }

    #[test]
    fn strings_as_cpython_ensure_ascii() {
        let s = |text: &str| canon(text);
        assert_eq!(s(r#""a/b""#), r#""a/b""#);
        assert_eq!(s(r#""\/""#), r#""/""#);
        assert_eq!(s("\"\u{e9}\""), r#""\u00e9""#);
        assert_eq!(s(r#""\u00E9""#), r#""\u00e9""#);
        assert_eq!(s("\"\u{7f}\""), r#""\u007f""#);
        assert_eq!(s(r#""\u0001\b\f\n\r\t\"\\""#), r#""\u0001\b\f\n\r\t\"\\""#);
        assert_eq!(s(r#""\u0008""#), r#""\b""#);
        assert_eq!(s("\"\u{1F600}\""), r#""\ud83d\ude00""#);
        assert_eq!(s(r#""\ud83d\ude00""#), r#""\ud83d\ude00""#);
        // Lone surrogates are Python strings too, written as they came.
        assert_eq!(s(r#""\ud800""#), r#""\ud800""#);
        assert_eq!(s(r#""\ud800\u0041""#), r#""\ud800A""#);
        assert_eq!(s(r#""\ude00\ud83d""#), r#""\ude00\ud83d""#);
    }

    #[test]
    fn numbers_and_keys() {
        assert_eq!(canon("-0"), "0");
        assert_eq!(canon("-0.0"), "-0.0");
        assert_eq!(canon("5e-1"), "0.5");
        assert_eq!(canon("1E400"), "Infinity");
        assert_eq!(canon("[NaN,-Infinity]"), "[NaN,-Infinity]");
        assert_eq!(canon(&"9".repeat(300)), "9".repeat(300));
        assert!(parse(&"9".repeat(MAX_INT_DIGITS)).is_ok());
        assert!(parse(&"9".repeat(MAX_INT_DIGITS + 1)).is_err());
        assert_eq!(
            canon(" {\"b\": [1, true, null], \"a\" : {\"z\":1,\"\u{e9}\":2,\"Z\":3}}\n"),
            r#"{"a":{"Z":3,"z":1,"\u00e9":2},"b":[1,true,null]}"#
        );
        // Code point order: U+FFFF before U+10000 (UTF-16 order would differ).
        assert_eq!(
            canon("{\"\u{10000}\":1,\"\u{ffff}\":2}"),
            r#"{"\uffff":2,"\ud800\udc00":1}"#
        );
        // A duplicate key keeps its last value, as a Python dict.
        assert_eq!(canon(r#"{"a":1,"b":2,"a":3}"#), r#"{"a":3,"b":2}"#);
        for bad in [
            "",
            "{",
            "[1,]",
            "01",
            "1e",
            "-",
            "[1 2]",
            "{\"a\"}",
            "\"\t\"",
            "\"\\x\"",
            "nul",
            "\"\\u12\"",
            "1 2",
            "{1:2}",
            "'a'",
            "+1",
            ".5",
            "1.",
        ] {
            assert!(matches!(parse(bad), Err(Error::Frame(_))), "{bad:?}");
        }
    }
}
