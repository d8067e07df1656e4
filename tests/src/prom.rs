//! A strict reader of the OpenMetrics / Prometheus text exposition format, for tests that
//! check what `/_metrics` says: every line must parse, every sample must belong to a family
//! declared by `# TYPE`, label values must be well quoted, histograms must be consistent,
//! and the text must end with `# EOF`.

use std::collections::BTreeMap;

#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

#[derive(Debug, Default)]
pub struct Exposition {
    /// Family name -> type (counter, gauge, histogram, ...).
    pub families: BTreeMap<String, String>,
    pub samples: Vec<Sample>,
}

/// Suffixes a sample may add to its family's name, by family type.
fn suffixes(kind: &str) -> &'static [&'static str] {
    match kind {
        "counter" => &["_total", "_created"],
        "histogram" => &["_bucket", "_count", "_sum", "_created"],
        "summary" => &["_count", "_sum", "_created", ""],
        "info" => &["_info"],
        _ => &[""],
    }
}

fn valid_name(n: &str) -> bool {
    let mut chars = n.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

fn parse_value(v: &str) -> Result<f64, String> {
    match v {
        "+Inf" => Ok(f64::INFINITY),
        "-Inf" => Ok(f64::NEG_INFINITY),
        "NaN" => Ok(f64::NAN),
        v => v.parse().map_err(|_| format!("bad value {v:?}")),
    }
}

/// `{a="x",b="y\"z"}` at the start of `s`: the labels and the rest after `}`.
fn parse_labels(s: &str) -> Result<(BTreeMap<String, String>, &str), String> {
    let mut labels = BTreeMap::new();
    let mut rest = s.strip_prefix('{').ok_or("expected {")?;
    loop {
        if let Some(r) = rest.strip_prefix('}') {
            return Ok((labels, r));
        }
        let eq = rest.find('=').ok_or("label without =")?;
        let name = &rest[..eq];
        if !valid_name(name) {
            return Err(format!("bad label name {name:?}"));
        }
        rest = rest[eq + 1..]
            .strip_prefix('"')
            .ok_or("label value not quoted")?;
        let mut value = String::new();
        let mut chars = rest.char_indices();
        let end = loop {
            match chars.next() {
                None => return Err("unterminated label value".into()),
                Some((i, '"')) => break i,
                Some((_, '\\')) => match chars.next() {
                    Some((_, 'n')) => value.push('\n'),
                    Some((_, '"')) => value.push('"'),
                    Some((_, '\\')) => value.push('\\'),
                    other => return Err(format!("bad escape {other:?}")),
                },
                Some((_, c)) => value.push(c),
            }
        };
        if labels.insert(name.to_owned(), value).is_some() {
            return Err(format!("label {name} twice"));
        }
        rest = &rest[end + 1..];
        rest = rest.strip_prefix(',').unwrap_or(rest);
    }
}

/// Parses the whole text; any deviation is an error naming the line.
pub fn parse(text: &str) -> Result<Exposition, String> {
    let mut out = Exposition::default();
    let mut eof = false;
    for (n, line) in text.lines().enumerate() {
        let err = |e: String| format!("line {}: {e}: {line:?}", n + 1);
        if eof {
            return Err(err("text after # EOF".into()));
        }
        if line == "# EOF" {
            eof = true;
            continue;
        }
        if let Some(meta) = line.strip_prefix("# ") {
            let mut parts = meta.splitn(3, ' ');
            let (kw, name) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
            if !valid_name(name) {
                return Err(err(format!("bad family name {name:?}")));
            }
            match kw {
                "TYPE" => {
                    let kind = parts.next().unwrap_or("");
                    if ![
                        "counter",
                        "gauge",
                        "histogram",
                        "summary",
                        "info",
                        "stateset",
                        "unknown",
                        "gaugehistogram",
                    ]
                    .contains(&kind)
                    {
                        return Err(err(format!("unknown type {kind:?}")));
                    }
                    if out.families.insert(name.into(), kind.into()).is_some() {
                        return Err(err(format!("family {name} declared twice")));
                    }
                }
                "HELP" | "UNIT" => {}
                other => return Err(err(format!("unknown comment {other:?}"))),
            }
            continue;
        }
        let name_end = line
            .find(['{', ' '])
            .ok_or_else(|| err("no value".into()))?;
        let name = &line[..name_end];
        if !valid_name(name) {
            return Err(err(format!("bad metric name {name:?}")));
        }
        let (labels, rest) = if line[name_end..].starts_with('{') {
            parse_labels(&line[name_end..]).map_err(err)?
        } else {
            (BTreeMap::new(), &line[name_end..])
        };
        let mut fields = rest.trim_start().split(' ');
        let value = parse_value(fields.next().unwrap_or("")).map_err(err)?;
        let family = out
            .families
            .iter()
            .find(|(f, kind)| {
                suffixes(kind)
                    .iter()
                    .any(|s| name.strip_prefix(f.as_str()) == Some(s))
            })
            .map(|(f, _)| f.clone());
        if family.is_none() {
            return Err(err(format!("sample {name} of no declared family")));
        }
        out.samples.push(Sample {
            name: name.into(),
            labels,
            value,
        });
    }
    if !eof {
        return Err("no # EOF at the end".into());
    }
    check_histograms(&out)?;
    Ok(out)
}

/// A series' labels but `le`, in order.
type LabelKey = Vec<(String, String)>;

/// Buckets never decrease with `le`, and the `+Inf` bucket equals `_count`.
fn check_histograms(e: &Exposition) -> Result<(), String> {
    for (family, _) in e.families.iter().filter(|(_, k)| *k == "histogram") {
        let mut series: BTreeMap<LabelKey, Vec<(f64, f64)>> = BTreeMap::new();
        for s in e
            .samples
            .iter()
            .filter(|s| s.name == format!("{family}_bucket"))
        {
            let le = parse_value(s.labels.get("le").ok_or("bucket without le")?)?;
            let key: Vec<_> = s
                .labels
                .iter()
                .filter(|(k, _)| *k != "le")
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            series.entry(key).or_default().push((le, s.value));
        }
        for (key, mut buckets) in series {
            buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
            if buckets.windows(2).any(|w| w[1].1 < w[0].1) {
                return Err(format!("{family}{key:?}: buckets decrease"));
            }
            let inf = buckets.last().filter(|b| b.0.is_infinite()).map(|b| b.1);
            let count = e
                .samples
                .iter()
                .find(|s| {
                    s.name == format!("{family}_count")
                        && s.labels
                            .iter()
                            .map(|(k, v)| (k.clone(), v.clone()))
                            .collect::<Vec<_>>()
                            == key
                })
                .map(|s| s.value);
            if inf.is_none() || inf != count {
                return Err(format!(
                    "{family}{key:?}: +Inf bucket {inf:?} != count {count:?}"
                ));
            }
        }
    }
    Ok(())
}

impl Exposition {
    /// The value of the one sample named `name` whose labels include `labels`.
    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let mut found = self.samples.iter().filter(|s| {
            s.name == name
                && labels
                    .iter()
                    .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
        });
        let first = found.next()?;
        assert!(
            found.next().is_none(),
            "{name}{labels:?} matches more than one sample"
        );
        Some(first.value)
    }

    /// Every family name and every sample name: what a query may select.
    pub fn names(&self) -> std::collections::BTreeSet<String> {
        self.families
            .keys()
            .cloned()
            .chain(self.samples.iter().map(|s| s.name.clone()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_well_formed_text_parses_and_a_broken_one_does_not() {
        let ok = "# HELP a_total x\n# TYPE a counter\na_total{op=\"P\\\"ut\"} 3\n# EOF\n";
        let e = parse(ok).unwrap();
        assert_eq!(e.value("a_total", &[("op", "P\"ut")]), Some(3.0));
        assert!(parse("# TYPE a counter\na_total 3\n").is_err(), "no EOF");
        assert!(parse("b 1\n# EOF\n").is_err(), "undeclared");
        assert!(
            parse("# TYPE a gauge\na{x=1} 1\n# EOF\n").is_err(),
            "unquoted"
        );
        let h = "# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\nh_count 1\nh_sum 1\n# EOF\n";
        assert!(parse(h).is_err(), "decreasing buckets");
    }
}
