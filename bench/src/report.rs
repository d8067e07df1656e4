//! The result table: every figure beside the limit (or peer) it is compared with, the
//! ratio, the target and where it stands.

use std::fmt::Write as _;

#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Row {
    pub section: String,
    pub figure: String,
    pub measured: String,
    /// What it is compared with: a limit measured in this run, or a peer.
    pub compared_with: String,
    pub ratio: String,
    pub target: String,
    /// MET, NOT MET, SKIPPED, ERROR, or empty for a plain figure.
    pub status: String,
    /// The harness's own CPU time per request during this workload.
    pub client_cpu: String,
}

#[derive(Default, serde::Serialize)]
pub struct Report {
    pub rows: Vec<Row>,
    pub notes: Vec<String>,
    /// Workloads that failed: the harness exits non-zero when there is any.
    pub errors: Vec<String>,
}

impl Report {
    pub fn info(&mut self, section: &str, figure: &str, measured: String) {
        self.rows.push(Row {
            section: section.into(),
            figure: figure.into(),
            measured,
            ..Row::default()
        });
    }

    pub fn push(&mut self, row: Row) {
        self.rows.push(row);
    }

    /// A figure against a target: `ratio` = measured / compared; met when `ok`.
    #[allow(clippy::too_many_arguments)]
    pub fn target(
        &mut self,
        section: &str,
        figure: &str,
        measured: String,
        compared_with: String,
        ratio: f64,
        target: &str,
        ok: bool,
        client_cpu: String,
    ) {
        self.rows.push(Row {
            section: section.into(),
            figure: figure.into(),
            measured,
            compared_with,
            ratio: fmt_ratio(ratio),
            target: target.into(),
            status: if ok { "MET" } else { "NOT MET" }.into(),
            client_cpu,
        });
    }

    pub fn skipped(&mut self, section: &str, figure: &str, why: String) {
        self.rows.push(Row {
            section: section.into(),
            figure: figure.into(),
            measured: why,
            status: "SKIPPED".into(),
            ..Row::default()
        });
    }

    pub fn error(&mut self, section: &str, figure: &str, err: String) {
        eprintln!("bench: {section} / {figure}: {err}");
        self.rows.push(Row {
            section: section.into(),
            figure: figure.into(),
            measured: first_line(&err),
            status: "ERROR".into(),
            ..Row::default()
        });
        self.errors.push(format!("{section} / {figure}: {err}"));
    }

    pub fn note(&mut self, n: String) {
        self.notes.push(n);
    }

    /// A Markdown table (pasteable into the README), then the notes.
    pub fn render(&self) -> String {
        let head = [
            "section",
            "figure",
            "measured",
            "compared with",
            "ratio",
            "target",
            "status",
            "client CPU/req",
        ];
        let cells: Vec<[&str; 8]> = self
            .rows
            .iter()
            .map(|r| {
                [
                    r.section.as_str(),
                    r.figure.as_str(),
                    r.measured.as_str(),
                    r.compared_with.as_str(),
                    r.ratio.as_str(),
                    r.target.as_str(),
                    r.status.as_str(),
                    r.client_cpu.as_str(),
                ]
            })
            .collect();
        let mut w = head.map(|h| h.chars().count());
        for c in &cells {
            for (i, s) in c.iter().enumerate() {
                w[i] = w[i].max(s.chars().count());
            }
        }
        let line = |c: &[&str; 8]| {
            let mut s = String::from("|");
            for (i, v) in c.iter().enumerate() {
                let pad = w[i] - v.chars().count();
                let _ = write!(s, " {v}{} |", " ".repeat(pad));
            }
            s
        };
        let mut out = String::new();
        out.push_str(&line(&head));
        out.push('\n');
        out.push('|');
        for wi in w {
            out.push_str(&"-".repeat(wi + 2));
            out.push('|');
        }
        out.push('\n');
        for c in &cells {
            out.push_str(&line(c));
            out.push('\n');
        }
        if !self.notes.is_empty() {
            out.push('\n');
            for n in &self.notes {
                let _ = writeln!(out, "- {n}");
            }
        }
        out
    }
}

pub fn fmt_ratio(r: f64) -> String {
    if !r.is_finite() {
        return "-".into();
    }
    if r >= 10.0 {
        format!("{r:.0}x")
    } else {
        format!("{r:.2}x")
    }
}

fn first_line(s: &str) -> String {
    let l = s.lines().next().unwrap_or("");
    if l.chars().count() > 120 {
        format!("{}...", l.chars().take(117).collect::<String>())
    } else {
        l.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_aligned_markdown() {
        let mut r = Report::default();
        r.info("limits", "SHA-1", "1900 MB/s".into());
        r.target(
            "8 MiB",
            "PUT",
            "400 MB/s".into(),
            "min(...) 470 MB/s".into(),
            0.85,
            ">= 0.80x",
            true,
            "40 us".into(),
        );
        r.note("a note".into());
        let t = r.render();
        let lens: Vec<usize> = t.lines().take(4).map(|l| l.chars().count()).collect();
        assert!(lens.windows(2).all(|w| w[0] == w[1]), "{t}");
        assert!(t.contains("| MET "), "{t}");
        assert!(t.contains("- a note"));
    }
}
