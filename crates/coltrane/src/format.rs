//! `format`, enforced: the formats a tool's arguments commonly name, each as a pattern
//! (`pattern.rs`) that admits only values every validator accepts — at times a strict subset of
//! what the format allows (an `ipv6` in its full eight groups, a `uri` with a host, no leap
//! second), never more. Any other format stays an annotation. The JSON Schema Test Suite reads
//! `format` as an annotation (2020-12's default), which `Formats::Annotate` gives.

/// Whether `format` constrains the value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Formats {
    /// The known formats are enforced (what a generated value needs).
    #[default]
    Assert,
    /// Every format only annotates (the specification's default for validation).
    Annotate,
}

const LEAP_YEAR: &str = "(\\d\\d(0[48]|[2468][048]|[13579][26])|([02468][048]|[13579][26])00)";

/// The pattern and the most characters of a format this module enforces, or `None`.
pub fn format_pattern(format: &str) -> Option<(String, u32)> {
    let date = format!(
        "(\\d{{4}}-((0[13578]|1[02])-(0[1-9]|[12]\\d|3[01])|(0[469]|11)-(0[1-9]|[12]\\d|30)|02-(0[1-9]|1\\d|2[0-8]))|{LEAP_YEAR}-02-29)"
    );
    let time = "([01]\\d|2[0-3]):[0-5]\\d:[0-5]\\d(\\.\\d+)?(Z|[+-]([01]\\d|2[0-3]):[0-5]\\d)";
    let label = "[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?";
    let octet = "(25[0-5]|2[0-4]\\d|1\\d\\d|[1-9]?\\d)";
    let pchar = "([A-Za-z0-9._~!$&'()*+,;=:@-]|%[0-9A-Fa-f]{2})";
    let path = format!("(/{pchar}*)*");
    let tail = format!("(\\?({pchar}|[/?])*)?(#({pchar}|[/?])*)?");
    let uri = format!("[A-Za-z][A-Za-z0-9+.-]*://{label}(\\.{label})*(:\\d{{1,5}})?{path}{tail}");
    Some(match format {
        "date" => (format!("^{date}$"), 10),
        "time" => (format!("^{time}$"), u32::MAX),
        "date-time" => (format!("^{date}T{time}$"), u32::MAX),
        "duration" => (
            "^(P(\\d+Y(\\d+M)?(\\d+D)?|\\d+M(\\d+D)?|\\d+D)(T(\\d+H(\\d+M)?(\\d+S)?|\\d+M(\\d+S)?|\\d+S))?|PT(\\d+H(\\d+M)?(\\d+S)?|\\d+M(\\d+S)?|\\d+S)|P\\d+W)$".into(),
            u32::MAX,
        ),
        "email" => (
            format!("^[A-Za-z0-9!#$%&'*+/=?^_`{{|}}~-]+(\\.[A-Za-z0-9!#$%&'*+/=?^_`{{|}}~-]+)*@{label}(\\.{label})+$"),
            254,
        ),
        "hostname" => (format!("^{label}(\\.{label})*$"), 253),
        "ipv4" => (format!("^{octet}(\\.{octet}){{3}}$"), 15),
        "ipv6" => ("^([0-9a-fA-F]{1,4}:){7}[0-9a-fA-F]{1,4}$".into(), 39),
        "uuid" => (
            "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$".into(),
            36,
        ),
        "uri" => (format!("^{uri}$"), u32::MAX),
        "uri-reference" => (format!("^({uri}|({pchar}+{path}|{path}){tail})$"), u32::MAX),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pattern::Pattern;

    fn matches(format: &str, text: &str) -> bool {
        let (source, max) = format_pattern(format).expect("a known format");
        Pattern::compile(&source, 0, max)
            .expect("compiles")
            .matches(text)
    }

    #[test]
    fn known_formats_admit_only_valid_values() {
        let cases: &[(&str, &[&str], &[&str])] = &[
            (
                "date",
                &["2024-02-29", "2023-12-31", "2000-02-29"],
                &[
                    "2023-02-29",
                    "1900-02-29",
                    "2024-04-31",
                    "2024-13-01",
                    "24-01-01",
                ],
            ),
            (
                "time",
                &["23:59:59Z", "08:30:00.5+02:00"],
                &["24:00:00Z", "12:00:00", "12:60:00Z"],
            ),
            (
                "date-time",
                &["2024-05-03T10:00:00Z"],
                &["2024-05-03 10:00:00Z", "2024-05-03T10:00"],
            ),
            (
                "duration",
                &["P1D", "PT5M", "P1Y2M3DT4H5M6S", "P2W"],
                &["P", "PT", "P1H", "1D"],
            ),
            (
                "email",
                &["a.b+c@example.com"],
                &["a@b", ".a@b.io", "a..b@c.io", "a@-b.io"],
            ),
            (
                "hostname",
                &["example.com", "a-b.c"],
                &["-a.com", "a_b.com", "a..b"],
            ),
            (
                "ipv4",
                &["192.168.0.1", "0.0.0.0"],
                &["256.1.1.1", "01.2.3.4", "1.2.3"],
            ),
            (
                "ipv6",
                &["2001:db8:0:0:0:0:2:1"],
                &["2001:db8::1:2:3:4:5:6:7", "12345::"],
            ),
            (
                "uuid",
                &["123e4567-e89b-12d3-a456-426614174000"],
                &["123e4567e89b12d3a456426614174000"],
            ),
            (
                "uri",
                &["https://example.com/a?b=c#d", "http://h:8080/x%20y"],
                &["example.com", "http://", "https://a/%zz"],
            ),
            (
                "uri-reference",
                &["/a/b?c", "https://x.io", "a/b"],
                &["a b"],
            ),
        ];
        for (format, good, bad) in cases {
            for t in *good {
                assert!(matches(format, t), "{format}: {t}");
            }
            for t in *bad {
                assert!(!matches(format, t), "{format}: {t}");
            }
        }
        assert!(format_pattern("color").is_none());
    }
}
