//! `/_status`: one self-contained HTML page (inline CSS, no script, no external asset, so
//! it works on an air-gapped network and leaks nothing to a CDN) for an operator's eyes.
//!
//! Every number that `/_metrics` also exports is printed exactly, in an element carrying
//! `data-metric="<metric name>"` (and the metric's labels as `data-*` attributes), with the
//! human-readable form beside it: a test or a script can read the page's numbers and find
//! the same ones in the scrape.

use std::fmt::Write as _;

use super::snapshot::{PAIR_FLAGS, Snapshot};

pub const CONTENT_TYPE: &str = "text/html; charset=utf-8";

const STYLE: &str = "
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#1d2330;background:#f6f7f9}
h1{font-size:1.4em;margin:0 0 .2em}h2{font-size:1.1em;margin:1.4em 0 .4em}
section{background:#fff;border:1px solid #dde1e7;border-radius:6px;padding:.6em 1em;margin-bottom:1em}
table{border-collapse:collapse;width:100%}td,th{text-align:left;padding:.25em .6em;border-bottom:1px solid #eef0f3}
th{font-weight:600;color:#4a5263}.num{font-variant-numeric:tabular-nums;text-align:right}
.bar{background:#e7eaef;border-radius:3px;height:.9em;width:14em;overflow:hidden;display:inline-block;vertical-align:middle}
.fill{background:#3a7bd5;height:100%}.warn .fill{background:#d58a3a}.crit .fill{background:#c0392b}
.big{font-size:1.6em;font-weight:600}.muted{color:#7a8294}.flag{background:#fbe3c8;border-radius:3px;padding:0 .3em;margin-right:.3em}
.human{color:#7a8294;margin-left:.4em}code{font-size:.92em}
";

fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// 1536 -> "1.5 KiB".
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 7] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// A value cell: the exact number for machines, the human one for people.
fn metric(name: &str, labels: &[(&str, String)], v: u64, bytes: bool) -> String {
    let mut attrs = String::new();
    for (k, val) in labels {
        let _ = write!(attrs, " data-{k}=\"{}\"", esc(val));
    }
    let human = if bytes {
        format!("<span class=\"human\">{}</span>", human_bytes(v))
    } else {
        String::new()
    };
    format!("<span class=\"num\" data-metric=\"{name}\"{attrs}>{v}</span>{human}")
}

fn bar(done: u64, total: u64) -> String {
    let pct = if total == 0 {
        0.0
    } else {
        (done as f64 / total as f64 * 100.0).clamp(0.0, 100.0)
    };
    let class = if pct >= 95.0 {
        "bar crit"
    } else if pct >= 85.0 {
        "bar warn"
    } else {
        "bar"
    };
    format!(
        "<span class=\"{class}\"><span class=\"fill\" style=\"display:block;width:{pct:.1}%\"></span></span> <span class=\"muted\">{pct:.1}%</span>"
    )
}

pub fn render(s: &Snapshot) -> String {
    let mut h = String::with_capacity(16 * 1024);
    let _ = write!(
        h,
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>gateway status</title><style>{STYLE}</style></head><body>"
    );
    let r = &s.raft;
    let _ = write!(
        h,
        "<h1>Gateway status</h1><p class=\"muted\">node {} · {} · term {} · leader {}</p>",
        r.node_id,
        r.role,
        r.term,
        r.leader.map_or("none".into(), |l| l.to_string())
    );
    savings(&mut h, s);
    pairs(&mut h, s);
    valkyrie(&mut h, s);
    unmove(&mut h, s);
    errors(&mut h, s);
    cluster(&mut h, s);
    groups(&mut h, s);
    h.push_str("</body></html>");
    h
}

fn savings(h: &mut String, s: &Snapshot) {
    h.push_str("<section id=\"savings\"><h2>Deduplication</h2>");
    let Some(st) = &s.stored else {
        h.push_str(
            "<p class=\"muted\">The first scan of the metadata has not finished yet.</p></section>",
        );
        return;
    };
    let saved = st.logical_bytes.saturating_sub(st.physical_bytes);
    let ratio = if st.physical_bytes == 0 {
        "–".to_owned()
    } else {
        format!("{:.2}×", st.logical_bytes as f64 / st.physical_bytes as f64)
    };
    let _ = write!(
        h,
        "<p><span class=\"big\">{ratio}</span> logical per physical byte · saved {}</p><table>",
        human_bytes(saved)
    );
    let rows: [(&str, &str, u64, bool); 8] = [
        (
            "Logical bytes (sum of object sizes)",
            "gateway_stored_logical_bytes",
            st.logical_bytes,
            true,
        ),
        (
            "Physical bytes (distinct contents × 2 copies)",
            "gateway_stored_physical_bytes",
            st.physical_bytes,
            true,
        ),
        ("Objects", "gateway_stored_objects", st.objects, false),
        (
            "Distinct contents",
            "gateway_stored_contents",
            st.contents,
            false,
        ),
        (
            "References",
            "gateway_stored_references",
            st.references,
            false,
        ),
        (
            "DO_NOT_DELETE",
            "gateway_stored_do_not_delete",
            st.do_not_delete,
            false,
        ),
        (
            "Waiting for deletion",
            "gateway_stored_deleting",
            st.deleting,
            false,
        ),
        (
            "Parts of uploads in progress",
            "gateway_stored_parts",
            st.parts,
            false,
        ),
    ];
    for (label, name, v, bytes) in rows {
        let _ = write!(
            h,
            "<tr><th>{label}</th><td>{}</td></tr>",
            metric(name, &[], v, bytes)
        );
    }
    let _ = write!(
        h,
        "</table><p class=\"muted\">Scanned at unix {} in {:.3} s.</p>",
        st.scanned_at_secs, st.scan_duration_secs
    );
    h.push_str("<h2>Most duplicated contents</h2><table id=\"top\"><tr><th>SHA-1</th><th class=\"num\">references</th><th class=\"num\">size</th><th class=\"num\">saved</th></tr>");
    for t in &st.top {
        let (size, saved) = match t.size_bytes {
            Some(b) => (
                human_bytes(b),
                human_bytes(b.saturating_mul(u64::from(t.refs.saturating_sub(1)))),
            ),
            None => ("?".into(), "?".into()),
        };
        let _ = write!(
            h,
            "<tr><td><code>{}</code></td><td class=\"num\" data-refs=\"{}\">{}</td><td class=\"num\">{size}</td><td class=\"num\">{saved}</td></tr>",
            t.sha1, t.refs, t.refs
        );
    }
    h.push_str("</table></section>");
}

fn pairs(h: &mut String, s: &Snapshot) {
    h.push_str("<section id=\"pairs\"><h2>Disk pairs</h2><table><tr><th>pair</th><th>disk</th><th>fill</th><th class=\"num\">free</th><th class=\"num\">capacity</th><th>flags</th></tr>");
    for (id, p) in &s.pairs {
        let flags: String = PAIR_FLAGS
            .iter()
            .filter(|(f, _)| p.flags.contains(*f))
            .map(|(_, n)| format!("<span class=\"flag\">{n}</span>"))
            .collect();
        for (i, disk) in p.disks.iter().enumerate() {
            let labels = [
                ("disk", disk.as_str().to_owned()),
                ("pair", id.0.to_string()),
                ("index", i.to_string()),
            ];
            let cap = p.capacity_bytes[i];
            let used = cap.saturating_sub(p.free_bytes[i]);
            let _ = write!(
                h,
                "<tr><td>{}</td><td><code>{}</code></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                id.0,
                esc(disk.as_str()),
                bar(used, cap),
                metric("gateway_disk_free_bytes", &labels, p.free_bytes[i], true),
                metric("gateway_disk_capacity_bytes", &labels, cap, true),
                if i == 0 { flags.as_str() } else { "" }
            );
        }
    }
    h.push_str("</table></section>");
}

fn valkyrie(h: &mut String, s: &Snapshot) {
    h.push_str("<section id=\"valkyrie\"><h2>Valkyrie</h2>");
    if s.workers.is_empty() {
        h.push_str("<p class=\"muted\">No Valkyrie worker runs in this process (remote disks have their own, or this node does not lead).</p></section>");
        return;
    }
    h.push_str("<table><tr><th>disk</th><th class=\"num\">scrub passes</th><th class=\"num\">this pass</th><th class=\"num\">verified</th><th class=\"num\">repaired</th><th class=\"num\">quarantined</th><th class=\"num\">errors</th></tr>");
    for w in &s.workers {
        let labels = [
            ("disk", w.disk.clone()),
            ("pair", w.pair.0.to_string()),
            ("index", w.index.to_string()),
        ];
        let c = &w.counters;
        let _ = write!(
            h,
            "<tr><td><code>{}</code></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&w.disk),
            metric("valkyrie_scrub_passes_total", &labels, c.passes_done, false),
            metric(
                "valkyrie_scrub_pass_files_done",
                &labels,
                c.pass_files_done,
                false
            ),
            metric(
                "valkyrie_bytes_verified_total",
                &labels,
                c.bytes_verified,
                true
            ),
            metric("valkyrie_repaired_total", &labels, c.repaired, false),
            metric("valkyrie_quarantined_total", &labels, c.quarantined, false),
            metric("valkyrie_errors_total", &labels, c.errors, false),
        );
    }
    h.push_str("</table></section>");
}

fn unmove(h: &mut String, s: &Snapshot) {
    h.push_str("<section id=\"unmove\"><h2>UNMOVE (drains of failed disks)</h2>");
    if s.drains.is_empty() {
        h.push_str("<p class=\"muted\">No drain.</p></section>");
        return;
    }
    h.push_str("<table><tr><th>pair</th><th>progress</th><th class=\"num\">files</th><th class=\"num\">bytes</th><th class=\"num\">failed</th><th>ETA</th></tr>");
    for d in &s.drains {
        let labels = [("pair", d.pair.to_string())];
        let eta = match (d.finished, d.eta_secs) {
            (true, _) => "finished".to_owned(),
            (false, Some(e)) => format!("{e} s"),
            (false, None) => "–".to_owned(),
        };
        let _ = write!(
            h,
            "<tr><td>{}</td><td>{}</td><td>{} / {}</td><td>{}</td><td>{}</td><td>{eta}</td></tr>",
            d.pair,
            bar(d.bytes_done, d.bytes_total),
            metric("gateway_unmove_files_done", &labels, d.files_done, false),
            metric("gateway_unmove_files", &labels, d.files_total, false),
            human_bytes(d.bytes_done),
            metric(
                "gateway_unmove_files_failed",
                &labels,
                d.files_failed,
                false
            ),
        );
    }
    h.push_str("</table></section>");
}

fn errors(h: &mut String, s: &Snapshot) {
    let (answered, failed) = s.requests;
    let _ = write!(
        h,
        "<section id=\"errors\"><h2>Recent errors</h2><p class=\"muted\">{answered} S3 requests answered since start, {failed} with a server error.</p>"
    );
    if s.recent_errors.is_empty() {
        h.push_str("<p class=\"muted\">None.</p></section>");
        return;
    }
    h.push_str("<table><tr><th>when (unix ms)</th><th>operation</th><th>status</th><th>target</th><th>request id</th></tr>");
    for e in &s.recent_errors {
        let _ = write!(
            h,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td><code>{}</code></td><td><code>{}</code></td></tr>",
            e.at_ms,
            e.operation,
            e.status,
            esc(&e.target),
            esc(&e.request_id)
        );
    }
    h.push_str("</table></section>");
}

fn cluster(h: &mut String, s: &Snapshot) {
    let r = &s.raft;
    let voters: Vec<String> = r.voters.iter().map(|v| v.to_string()).collect();
    let _ = write!(
        h,
        "<section id=\"cluster\"><h2>Cluster</h2><table>\
         <tr><th>node</th><td>{}</td></tr><tr><th>role</th><td data-role=\"{}\">{}</td></tr>\
         <tr><th>term</th><td>{}</td></tr><tr><th>leader</th><td>{}</td></tr>\
         <tr><th>voters</th><td>{}</td></tr>\
         <tr><th>last log index</th><td>{}</td></tr><tr><th>commit index</th><td>{}</td></tr>\
         <tr><th>applied index</th><td>{}</td></tr></table></section>",
        metric("gateway_raft_node_id", &[], r.node_id, false),
        r.role,
        r.role,
        metric("gateway_raft_term", &[], r.term, false),
        r.leader.map_or("none".into(), |l| l.to_string()),
        esc(&voters.join(", ")),
        r.last_log_index,
        r.commit_index,
        r.applied_index,
    );
}

/// What a group's cell shows for a figure of this node's replica where it holds none.
const NOT_HELD: &str = "not held here";

/// The metadata groups: each one's ranges, size, leader, replicas and this node's lag.
fn groups(h: &mut String, s: &Snapshot) {
    let Some(status) = &s.groups else {
        return;
    };
    let _ = write!(
        h,
        "<section id=\"groups\"><h2>Metadata groups</h2><p>shard map version {}</p><table>\
         <tr><th>group</th><th>kind</th><th>sha1 ranges</th><th>key ranges</th>\
         <th>records here</th><th>leader</th><th>replicas</th><th>lag here</th></tr>",
        status.version
    );
    for g in &status.groups {
        let sha1s: Vec<String> = g
            .filedb
            .iter()
            .map(|r| {
                let short = |x: &str| x.get(..8).unwrap_or(x).to_string();
                format!(
                    "{}… – {}",
                    short(&r.start),
                    r.end
                        .as_deref()
                        .map_or("end".into(), |e| format!("{}…", short(e)))
                )
            })
            .collect();
        let keys: Vec<String> = g
            .index
            .iter()
            .map(|r| {
                let at = |k: &meta::groups::IndexStart| {
                    if k.bucket.is_empty() && k.key.is_empty() {
                        "start".to_string()
                    } else {
                        format!("{}/{}", k.bucket, k.key)
                    }
                };
                format!(
                    "{} – {}",
                    at(&r.start),
                    r.end.as_ref().map_or("end".into(), at)
                )
            })
            .collect();
        let replicas: Vec<String> = g.replicas.iter().map(|r| r.to_string()).collect();
        let labels = [
            ("group", g.id.to_string()),
            ("kind", g.kind.name().to_string()),
        ];
        let _ = write!(
            h,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>\
             <td>{}</td></tr>",
            g.id,
            g.kind.name(),
            esc(&sha1s.join(", ")),
            esc(&keys.join(", ")),
            if g.held {
                metric("gateway_group_records", &labels, g.records, false)
            } else {
                NOT_HELD.into()
            },
            match (g.held, g.leader) {
                (false, _) => NOT_HELD.into(),
                (true, Some(l)) => l.to_string(),
                (true, None) => "none".into(),
            },
            esc(&replicas.join(", ")),
            if g.held {
                metric("gateway_group_lag", &labels, g.lag, false)
            } else {
                NOT_HELD.into()
            },
        );
    }
    h.push_str("</table></section>");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_read_as_people_read_them() {
        assert_eq!(human_bytes(0), "0 B");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(3 << 30), "3.0 GiB");
        assert_eq!(esc("<a href='x'>&"), "&lt;a href=&#39;x&#39;&gt;&amp;");
    }
}
