//! Progress of long admin work (`gateway admin disk status --watch`, `gateway admin scrub
//! status --watch`) as the operator's output can show it: bars with rate and ETA on a
//! terminal (indicatif), one plain line per item and poll otherwise (a log file, a pipe,
//! CI), so that nothing writes cursor movements into a file.

use std::collections::BTreeMap;
use std::io::IsTerminal as _;

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

use gateway::telemetry::status_page::human_bytes;

/// What is counted: bytes print as KiB/MiB, files as numbers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    Bytes,
    Files,
}

/// One piece of work at one poll.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Item {
    /// Stable identity across polls (`pair 3`, `pair 0 disk 1`).
    pub key: String,
    pub done: u64,
    /// None: not known yet (a first scrub pass).
    pub total: Option<u64>,
    pub unit: Unit,
    /// Shown after the counts (`relocated 10, failed 0`).
    pub note: String,
    /// The server's estimate, when it has one; bars also estimate from their own rate.
    pub eta_secs: Option<u64>,
    pub finished: bool,
}

impl Item {
    fn amount(&self, n: u64) -> String {
        match self.unit {
            Unit::Bytes => human_bytes(n),
            Unit::Files => format!("{n} files"),
        }
    }

    /// The plain line of this item.
    pub fn line(&self) -> String {
        let mut s = format!("{}: {}", self.key, self.amount(self.done));
        if let Some(t) = self.total {
            let pct = if t == 0 {
                100.0
            } else {
                (self.done as f64 / t as f64 * 100.0).min(100.0)
            };
            s.push_str(&format!(" / {} ({pct:.1}%)", self.amount(t)));
        }
        if !self.note.is_empty() {
            s.push_str(&format!(", {}", self.note));
        }
        if self.finished {
            s.push_str(", done");
        } else if let Some(e) = self.eta_secs {
            s.push_str(&format!(", eta {e} s"));
        }
        s
    }
}

/// Where progress goes: bars on a terminal, lines elsewhere.
pub enum Display {
    Bars {
        multi: MultiProgress,
        bars: BTreeMap<String, ProgressBar>,
    },
    Lines(Box<dyn std::io::Write + Send>),
}

impl Display {
    /// Bars when stdout is a terminal, plain lines on stdout otherwise.
    pub fn for_stdout() -> Display {
        if std::io::stdout().is_terminal() {
            Display::Bars {
                multi: MultiProgress::with_draw_target(ProgressDrawTarget::stdout()),
                bars: BTreeMap::new(),
            }
        } else {
            Display::Lines(Box::new(std::io::stdout()))
        }
    }

    pub fn update(&mut self, items: &[Item]) {
        match self {
            Display::Lines(out) => {
                for i in items {
                    let _ = writeln!(out, "{}", i.line());
                }
                let _ = out.flush();
            }
            Display::Bars { multi, bars } => {
                for i in items {
                    let bar = bars
                        .entry(i.key.clone())
                        .or_insert_with(|| multi.add(new_bar(i)));
                    if let Some(t) = i.total {
                        bar.set_length(t.max(i.done));
                    }
                    bar.set_position(i.done);
                    bar.set_message(i.note.clone());
                    if i.finished && !bar.is_finished() {
                        bar.finish();
                    }
                }
            }
        }
    }

    pub fn finish(&mut self) {
        if let Display::Bars { bars, .. } = self {
            for b in bars.values() {
                if !b.is_finished() {
                    b.abandon();
                }
            }
        }
    }
}

fn new_bar(i: &Item) -> ProgressBar {
    let counts = match i.unit {
        Unit::Bytes => "{bytes}/{total_bytes} {bytes_per_sec}",
        Unit::Files => "{human_pos}/{human_len} files {per_sec}",
    };
    let template = format!("{{prefix:<16}} [{{wide_bar}}] {counts} eta {{eta}} {{msg}}");
    let style = ProgressStyle::with_template(&template)
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ");
    let bar = ProgressBar::new(i.total.unwrap_or(0)).with_style(style);
    bar.set_prefix(i.key.clone());
    bar
}

/// Items of the UNMOVE drains in `/_admin/unmove`'s JSON.
pub fn drain_items(drains: &[serde_json::Value]) -> Vec<Item> {
    let num = |v: &serde_json::Value, f: &str| v.get(f).and_then(|x| x.as_u64()).unwrap_or(0);
    drains
        .iter()
        .map(|d| Item {
            key: format!("pair {}", num(d, "pair")),
            done: num(d, "bytes_done"),
            total: Some(num(d, "bytes_total")),
            unit: Unit::Bytes,
            note: format!(
                "files {}/{}, relocated {}, failed {}",
                num(d, "files_done"),
                num(d, "files_total"),
                num(d, "files_relocated"),
                num(d, "files_failed")
            ),
            eta_secs: d.get("eta_secs").and_then(|e| e.as_u64()),
            finished: d.get("finished").and_then(|f| f.as_bool()).unwrap_or(false),
        })
        .collect()
}

/// Items of the scrub passes in `/_admin/scrub`'s JSON: the current pass against the
/// length of the last completed one.
pub fn scrub_items(workers: &[serde_json::Value]) -> Vec<Item> {
    let num = |v: &serde_json::Value, f: &str| v.get(f).and_then(|x| x.as_u64()).unwrap_or(0);
    workers
        .iter()
        .map(|w| {
            let m = w.get("metrics").cloned().unwrap_or_default();
            let last = num(&m, "last_pass_files");
            Item {
                key: format!("pair {} disk {}", num(w, "pair"), num(w, "index")),
                done: num(&m, "pass_files_done"),
                total: (last > 0).then_some(last),
                unit: Unit::Files,
                note: format!(
                    "pass {}, repaired {}, errors {}",
                    num(&m, "passes_done") + 1,
                    num(&m, "repaired"),
                    num(&m, "errors")
                ),
                eta_secs: None,
                finished: false,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_lines_carry_counts_percent_and_eta() {
        let d = serde_json::json!({"pair": 3, "bytes_done": 1024, "bytes_total": 4096,
            "files_done": 1, "files_total": 4, "files_relocated": 1, "files_failed": 0,
            "eta_secs": 12, "finished": false});
        let items = drain_items(&[d]);
        assert_eq!(
            items[0].line(),
            "pair 3: 1.0 KiB / 4.0 KiB (25.0%), files 1/4, relocated 1, failed 0, eta 12 s"
        );
        let w = serde_json::json!({"pair": 0, "index": 1, "metrics":
            {"pass_files_done": 5, "last_pass_files": 0, "passes_done": 0}});
        assert_eq!(
            scrub_items(&[w])[0].line(),
            "pair 0 disk 1: 5 files, pass 1, repaired 0, errors 0"
        );
        // Lines go to any writer, with no escape sequence.
        let buf = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        struct W(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);
        impl std::io::Write for W {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let mut d = Display::Lines(Box::new(W(buf.clone())));
        d.update(&items);
        let text = String::from_utf8(buf.lock().unwrap().clone()).unwrap();
        assert!(
            text.starts_with("pair 3: ") && !text.contains('\u{1b}'),
            "{text}"
        );
    }
}
