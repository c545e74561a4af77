//! Just enough JSON for the dormant process, without allocating: the raw text of a member of
//! a top-level object (a control request's `op`, the status file's `state` and `stats`), and
//! whether a raw value is a given string. The whole text is checked against JSON's grammar;
//! what is not JSON is [`Malformed`].

/// The text is not one JSON object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Malformed;

/// How deep arrays and objects may nest (deeper: [`Malformed`]).
const MAX_DEPTH: usize = 128;

/// The raw text of the member `key` of the JSON object `text` (the last one, where a key
/// repeats, as serde_json keeps), or None when there is no such member.
///
/// # Errors
/// `text` is not one JSON object (whitespace around it aside).
pub fn member<'a>(text: &'a [u8], key: &str) -> Result<Option<&'a [u8]>, Malformed> {
    let mut p = Parser { text, at: 0 };
    p.ws();
    if p.peek() != Some(b'{') {
        return Err(Malformed);
    }
    let mut found = None;
    p.object(0, |k, v| {
        if is_string(k, key) {
            found = Some(v);
        }
    })?;
    p.ws();
    if p.at != text.len() {
        return Err(Malformed);
    }
    Ok(found)
}

/// Whether the raw JSON value `raw` is the string `s` (escapes decoded).
pub fn is_string(raw: &[u8], s: &str) -> bool {
    let Some(inner) = raw.strip_prefix(b"\"").and_then(|r| r.strip_suffix(b"\"")) else {
        return false;
    };
    let want = s.as_bytes();
    let (mut i, mut j) = (0, 0);
    while i < inner.len() {
        let c = if inner[i] == b'\\' {
            let Some(&e) = inner.get(i + 1) else {
                return false;
            };
            i += 2;
            match e {
                b'"' => b'"',
                b'\\' => b'\\',
                b'/' => b'/',
                b'b' => 8,
                b'f' => 12,
                b'n' => b'\n',
                b'r' => b'\r',
                b't' => b'\t',
                b'u' => {
                    let Some(code) = inner.get(i..i + 4).and_then(hex4) else {
                        return false;
                    };
                    i += 4;
                    // The strings compared here are ASCII: any other character differs.
                    match u8::try_from(code) {
                        Ok(b) if b < 0x80 => b,
                        _ => return false,
                    }
                }
                _ => return false,
            }
        } else {
            i += 1;
            inner[i - 1]
        };
        if want.get(j) != Some(&c) {
            return false;
        }
        j += 1;
    }
    j == want.len()
}

/// The value of four hexadecimal digits.
fn hex4(d: &[u8]) -> Option<u32> {
    d.iter().try_fold(0u32, |acc, &c| {
        let v = (c as char).to_digit(16)?;
        Some(acc * 16 + v)
    })
}

struct Parser<'a> {
    text: &'a [u8],
    at: usize,
}

impl<'a> Parser<'a> {
    fn peek(&self) -> Option<u8> {
        self.text.get(self.at).copied()
    }

    fn next(&mut self) -> Option<u8> {
        let c = self.peek()?;
        self.at += 1;
        Some(c)
    }

    fn expect(&mut self, c: u8) -> Result<(), Malformed> {
        if self.next() == Some(c) {
            Ok(())
        } else {
            Err(Malformed)
        }
    }

    fn ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.at += 1;
        }
    }

    fn literal(&mut self, word: &[u8]) -> Result<(), Malformed> {
        if self.text[self.at..].starts_with(word) {
            self.at += word.len();
            Ok(())
        } else {
            Err(Malformed)
        }
    }

    /// A string; its raw text, quotes included.
    fn string(&mut self) -> Result<&'a [u8], Malformed> {
        let start = self.at;
        self.expect(b'"')?;
        loop {
            match self.next().ok_or(Malformed)? {
                b'"' => return Ok(&self.text[start..self.at]),
                b'\\' => match self.next().ok_or(Malformed)? {
                    b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => {}
                    b'u' => {
                        let d = self.text.get(self.at..self.at + 4).ok_or(Malformed)?;
                        hex4(d).ok_or(Malformed)?;
                        self.at += 4;
                    }
                    _ => return Err(Malformed),
                },
                c if c < 0x20 => return Err(Malformed),
                _ => {}
            }
        }
    }

    fn digits(&mut self) -> usize {
        let start = self.at;
        while matches!(self.peek(), Some(b'0'..=b'9')) {
            self.at += 1;
        }
        self.at - start
    }

    /// `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`
    fn number(&mut self) -> Result<(), Malformed> {
        if self.peek() == Some(b'-') {
            self.at += 1;
        }
        match self.peek() {
            Some(b'0') => self.at += 1,
            Some(b'1'..=b'9') => {
                self.digits();
            }
            _ => return Err(Malformed),
        }
        if self.peek() == Some(b'.') {
            self.at += 1;
            if self.digits() == 0 {
                return Err(Malformed);
            }
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.at += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.at += 1;
            }
            if self.digits() == 0 {
                return Err(Malformed);
            }
        }
        Ok(())
    }

    /// Any value, nested `depth` deep.
    fn value(&mut self, depth: usize) -> Result<(), Malformed> {
        if depth > MAX_DEPTH {
            return Err(Malformed);
        }
        match self.peek().ok_or(Malformed)? {
            b'"' => self.string().map(|_| ()),
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'n' => self.literal(b"null"),
            b'[' => self.items(b']', |p| p.value(depth + 1)),
            b'{' => self.object(depth, |_, _| {}),
            _ => self.number(),
        }
    }

    /// The object at the cursor (on its `{`), its members' values nested `depth + 1` deep;
    /// `each` gets every member's key and value as raw text.
    fn object(
        &mut self,
        depth: usize,
        mut each: impl FnMut(&'a [u8], &'a [u8]),
    ) -> Result<(), Malformed> {
        self.items(b'}', |p| {
            let key = p.string()?;
            p.ws();
            p.expect(b':')?;
            p.ws();
            let start = p.at;
            p.value(depth + 1)?;
            each(key, &p.text[start..p.at]);
            Ok(())
        })
    }

    /// The array or object at the cursor (on its opening bracket), up to `close`: `item`
    /// parses each element, which commas separate.
    fn items(
        &mut self,
        close: u8,
        mut item: impl FnMut(&mut Self) -> Result<(), Malformed>,
    ) -> Result<(), Malformed> {
        self.at += 1;
        self.ws();
        if self.peek() == Some(close) {
            self.at += 1;
            return Ok(());
        }
        loop {
            self.ws();
            item(self)?;
            self.ws();
            match self.next() {
                Some(b',') => {}
                Some(c) if c == close => return Ok(()),
                _ => return Err(Malformed),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use std::string::String;
    use std::vec::Vec;

    use super::*;

    #[test]
    fn members_are_found_as_raw_text() {
        let t = br#" {"op" : "state", "n": [1, {"op": "inner"}], "x": -1.5e3 } "#;
        assert_eq!(member(t, "op"), Ok(Some(&br#""state""#[..])));
        assert_eq!(member(t, "n"), Ok(Some(&br#"[1, {"op": "inner"}]"#[..])));
        assert_eq!(member(t, "x"), Ok(Some(&b"-1.5e3"[..])));
        assert_eq!(member(t, "missing"), Ok(None));
        assert_eq!(member(b"{}", "op"), Ok(None));
        // The last of repeated keys, as serde_json keeps.
        assert_eq!(
            member(br#"{"op":"a","op":"b"}"#, "op"),
            Ok(Some(&br#""b""#[..]))
        );
        // An escaped key is the key it decodes to.
        assert_eq!(
            member(br#"{"\u006fp":"stats"}"#, "op"),
            Ok(Some(&br#""stats""#[..]))
        );
        let status = br#"{"state":{"id":"d1","status":"dormant"},"stats":{"rss":4096,"l":[],"o":{},"t":true,"f":false,"z":null}}"#;
        assert_eq!(
            member(status, "state"),
            Ok(Some(&br#"{"id":"d1","status":"dormant"}"#[..]))
        );
    }

    #[test]
    fn what_is_not_one_object_is_malformed() {
        for bad in [
            &b""[..],
            b"not json",
            b"[]",
            b"\"op\"",
            br#"{"op":"state""#,
            br#"{"op":"state"} x"#,
            br#"{"op" "state"}"#,
            br#"{"op":"state",}"#,
            br#"{op:"state"}"#,
            br#"{"op":"st\ate"}"#,
            br#"{"op":"\u12"}"#,
            b"{\"op\":\"a\nb\"}",
            br#"{"n":01}"#,
            br#"{"n":1.}"#,
            br#"{"n":1e}"#,
            br#"{"n":-}"#,
            br#"{"n":tru}"#,
            br#"{"n":[1,]}"#,
            br#"{"n":{"a"}}"#,
        ] {
            assert_eq!(
                member(bad, "op"),
                Err(Malformed),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
        // Nesting beyond the limit.
        let deep: Vec<u8> = b"{\"a\":"
            .iter()
            .chain(&[b'['; 200])
            .chain(&[b']'; 200])
            .chain(b"}")
            .copied()
            .collect();
        assert_eq!(member(&deep, "a"), Err(Malformed));
    }

    #[test]
    fn strings_compare_decoded() {
        assert!(is_string(br#""state""#, "state"));
        assert!(is_string(br#""st\u0061te""#, "state"));
        assert!(is_string(br#""a\"b\\c\/\n""#, "a\"b\\c/\n"));
        assert!(is_string(br#""""#, ""));
        assert!(!is_string(br#""stat""#, "state"));
        assert!(!is_string(br#""states""#, "state"));
        assert!(!is_string(br#""st\u00e1te""#, "state"));
        assert!(!is_string(b"state", "state"));
        assert!(!is_string(b"1", "state"));
        assert!(!is_string(br#""\"#, ""));
    }
}

/// The scanner against serde_json, on many texts made by mutating valid ones: both accept the
/// same texts as one JSON object, and a member's raw text is the member serde_json reads.
#[cfg(test)]
mod against_serde_json {
    extern crate std;
    use std::vec::Vec;

    use super::*;

    /// xorshift64*: a fixed sequence, no dependency.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }

        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
    }

    const SEEDS: &[&str] = &[
        r#"{"op":"state"}"#,
        r#"{"op": "stats", "id": "x-1"}"#,
        r#"{"op":"exec","args":["/bin/sh","-c","echo \"hi\" \\ done"],"env":[],"cwd":"/"}"#,
        r#" { "a" : [ 1, -2.5e3, true, false, null, {"b": {}} ], "op" : "st\u0061te" } "#,
        r#"{"state":{"id":"d1","status":"dormant","pid":12,"created":1.5},"stats":{"rss":4096,"l":[]}}"#,
        r#"{"op":"delete","force":true}"#,
    ];

    /// Bytes a mutation inserts: JSON's own punctuation and a few others.
    const PIECES: &[u8] = b"{}[]:,\"\\ \t\n0123456789-+.eEtrufalsn/u\x01\x7f\xc3";

    fn mutate(rng: &mut Rng, text: &[u8]) -> Vec<u8> {
        let mut t = text.to_vec();
        for _ in 0..=rng.below(3) {
            let at = rng.below(t.len() + 1);
            match rng.below(3) {
                0 if !t.is_empty() => {
                    t.remove(at.min(t.len() - 1));
                }
                1 => t.insert(at, PIECES[rng.below(PIECES.len())]),
                _ if !t.is_empty() => {
                    let i = at.min(t.len() - 1);
                    t[i] = PIECES[rng.below(PIECES.len())];
                }
                _ => {}
            }
        }
        t
    }

    #[test]
    fn agrees_with_serde_json() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let (mut accepted, mut checked) = (0, 0);
        for round in 0..60_000 {
            let seed = SEEDS[round % SEEDS.len()].as_bytes();
            let text = if round < SEEDS.len() {
                seed.to_vec()
            } else {
                mutate(&mut rng, seed)
            };
            let reference = serde_json::from_slice::<serde_json::Value>(&text)
                .ok()
                .filter(serde_json::Value::is_object);
            for key in ["op", "state", "a", "args"] {
                let ours = member(&text, key);
                match &reference {
                    // Ours may accept what serde_json refuses only for bytes it does not
                    // decode (invalid UTF-8 inside a string): it never needs them.
                    None => assert!(
                        ours.is_err() || std::str::from_utf8(&text).is_err(),
                        "accepted {:?}",
                        std::string::String::from_utf8_lossy(&text)
                    ),
                    Some(v) => {
                        let raw = ours.unwrap_or_else(|_| {
                            panic!("refused {:?}", std::string::String::from_utf8_lossy(&text))
                        });
                        let want = v.get(key);
                        let got = raw.map(|r| {
                            serde_json::from_slice::<serde_json::Value>(r)
                                .expect("a member's raw text is JSON")
                        });
                        assert_eq!(got.as_ref(), want, "{key} of {:?}", v);
                        // `is_string` compares with ASCII words (the verbs) only.
                        if let Some(serde_json::Value::String(s)) =
                            want.filter(|w| w.as_str().is_some_and(|s| s.is_ascii()))
                        {
                            assert!(is_string(raw.unwrap_or_default(), s), "{s:?}");
                        }
                        checked += 1;
                    }
                }
            }
            accepted += usize::from(reference.is_some());
        }
        // The mutations must leave enough valid texts for the comparison to mean something.
        assert!(accepted > 5_000 && checked > 20_000, "{accepted} {checked}");
    }
}
