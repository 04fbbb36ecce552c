//! Results: tables of min/median/max over repetitions (markdown), the raw
//! numbers (JSON) and PNG plots (plotters, bitmap backend).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use anyhow::{Context, Result};
use plotters::prelude::*;
use serde::{Deserialize, Serialize};

/// Median of a sample (upper median for even sizes, so it is a measured value).
pub fn median(v: &[f64]) -> f64 {
    let mut s: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    s.sort_by(|a, b| a.total_cmp(b));
    s.get(s.len() / 2).copied().unwrap_or(f64::NAN)
}

/// (min, median, max).
pub fn mmm(v: &[f64]) -> (f64, f64, f64) {
    let min = v.iter().copied().fold(f64::INFINITY, f64::min);
    let max = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (min, median(v), max)
}

/// Formats with a precision suited to the magnitude.
pub fn num(v: f64) -> String {
    if v.is_nan() {
        "-".into()
    } else if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else if v.abs() >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

/// One row: a configuration in a group, with repeated measurements per column.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Row {
    /// First column (e.g. the case).
    pub group: String,
    /// Second column (e.g. the server).
    pub config: String,
    /// Column -> one value per repetition.
    pub values: BTreeMap<String, Vec<f64>>,
    /// Free text (failures, "n/a").
    pub note: String,
    /// Id of the run (`RunInfo::id`) the row's numbers come from.
    #[serde(default)]
    pub run: String,
}

/// A table with fixed columns.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Table {
    /// Heading.
    pub title: String,
    /// Names of the first two columns.
    pub keys: (String, String),
    /// Metric columns in order.
    pub columns: Vec<String>,
    /// Rows in insertion order.
    pub rows: Vec<Row>,
}

impl Table {
    /// An empty table.
    pub fn new(title: &str, k1: &str, k2: &str, columns: &[&str]) -> Table {
        Table {
            title: title.into(),
            keys: (k1.into(), k2.into()),
            columns: columns.iter().map(|c| c.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    fn row(&mut self, group: &str, config: &str) -> &mut Row {
        if let Some(i) = self
            .rows
            .iter()
            .position(|r| r.group == group && r.config == config)
        {
            return &mut self.rows[i];
        }
        self.rows.push(Row {
            group: group.into(),
            config: config.into(),
            values: BTreeMap::new(),
            note: String::new(),
            run: String::new(),
        });
        self.rows.last_mut().expect("just pushed")
    }

    /// Adds one measurement.
    pub fn add(&mut self, group: &str, config: &str, column: &str, v: f64) {
        if v.is_finite() {
            self.row(group, config)
                .values
                .entry(column.into())
                .or_default()
                .push(v);
        }
    }

    /// Adds a note to a row (shown in the last column).
    pub fn note(&mut self, group: &str, config: &str, note: &str) {
        let r = self.row(group, config);
        if !r.note.contains(note) {
            if !r.note.is_empty() {
                r.note.push_str("; ");
            }
            r.note.push_str(note);
        }
    }

    /// Median of a column of a row.
    pub fn median_of(&self, group: &str, config: &str, column: &str) -> Option<f64> {
        let r = self
            .rows
            .iter()
            .find(|r| r.group == group && r.config == config)?;
        r.values
            .get(column)
            .filter(|v| !v.is_empty())
            .map(|v| median(v))
    }

    /// Markdown: each cell "median (min-max, n)" or the single value; a
    /// "run" column when rows come from different runs.
    pub fn markdown(&self) -> String {
        let runs = self.rows.iter().any(|r| !r.run.is_empty());
        let run_head = if runs { " run |" } else { "" };
        let mut s = format!(
            "### {}\n\n| {} | {} |{run_head} {} | notes |\n|---|---|",
            self.title,
            self.keys.0,
            self.keys.1,
            self.columns.join(" | ")
        );
        s.push_str(&"---|".repeat(self.columns.len() + 1 + runs as usize));
        s.push('\n');
        for r in &self.rows {
            let cells: Vec<String> = self
                .columns
                .iter()
                .map(|c| match r.values.get(c) {
                    None => "".into(),
                    Some(v) if v.is_empty() => "".into(),
                    Some(v) if v.len() == 1 => num(v[0]),
                    Some(v) => {
                        let (lo, med, hi) = mmm(v);
                        format!("{} ({}–{}, n={})", num(med), num(lo), num(hi), v.len())
                    }
                })
                .collect();
            let run = if runs {
                format!(" {} |", r.run)
            } else {
                String::new()
            };
            let _ = writeln!(
                s,
                "| {} | {} |{run} {} | {} |",
                r.group,
                r.config,
                cells.join(" | "),
                r.note
            );
        }
        s
    }
}

fn font_ready() -> bool {
    use std::sync::OnceLock;
    static OK: OnceLock<bool> = OnceLock::new();
    *OK.get_or_init(|| {
        for p in [
            "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
            "/usr/share/fonts/TTF/DejaVuSans.ttf",
        ] {
            if let Ok(bytes) = std::fs::read(p) {
                let leaked: &'static [u8] = Box::leak(bytes.into_boxed_slice());
                if plotters::style::register_font("sans-serif", FontStyle::Normal, leaked).is_ok() {
                    return true;
                }
            }
        }
        eprintln!(
            "warning: no DejaVuSans.ttf found (apt-get install fonts-dejavu-core): plots skipped"
        );
        false
    })
}

/// Bar chart of one table column: one bar per row (median), whiskers min..max.
pub fn bar_chart(path: &Path, title: &str, table: &Table, group: &str, column: &str) -> Result<()> {
    if !font_ready() {
        return Ok(());
    }
    let rows: Vec<(&str, (f64, f64, f64))> = table
        .rows
        .iter()
        .filter(|r| r.group == group)
        .filter_map(|r| {
            r.values
                .get(column)
                .filter(|v| !v.is_empty())
                .map(|v| (r.config.as_str(), mmm(v)))
        })
        .collect();
    if rows.is_empty() {
        return Ok(());
    }
    let ymax = rows.iter().map(|r| r.1 .2).fold(0.0, f64::max) * 1.15 + 1e-9;
    let root = BitMapBackend::new(path, (900, 500)).into_drawing_area();
    root.fill(&WHITE)?;
    let n = rows.len();
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(10)
        .x_label_area_size(60)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..n as f64, 0f64..ymax)?;
    let labels: Vec<String> = rows.iter().map(|r| r.0.to_string()).collect();
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(n * 2 + 1)
        .x_label_formatter(&|x| {
            let i = x.floor() as usize;
            if (x - i as f64 - 0.5).abs() < 0.01 {
                labels.get(i).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        })
        .y_desc(column)
        .draw()?;
    for (i, (_, (lo, med, hi))) in rows.iter().enumerate() {
        let x = i as f64;
        chart.draw_series(std::iter::once(Rectangle::new(
            [(x + 0.15, 0.0), (x + 0.85, *med)],
            BLUE.mix(0.6).filled(),
        )))?;
        chart.draw_series(std::iter::once(PathElement::new(
            vec![(x + 0.5, *lo), (x + 0.5, *hi)],
            BLACK.stroke_width(2),
        )))?;
    }
    root.present()
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

/// Line chart of several (x, y) series.
pub fn line_chart(
    path: &Path,
    title: &str,
    xdesc: &str,
    ydesc: &str,
    series: &[(String, Vec<(f64, f64)>)],
) -> Result<()> {
    if !font_ready() || series.iter().all(|s| s.1.is_empty()) {
        return Ok(());
    }
    let xmax = series
        .iter()
        .flat_map(|s| s.1.iter().map(|p| p.0))
        .fold(0.0, f64::max)
        .max(1e-9);
    let ymax = series
        .iter()
        .flat_map(|s| s.1.iter().map(|p| p.1))
        .fold(0.0, f64::max)
        * 1.1
        + 1e-9;
    let root = BitMapBackend::new(path, (900, 500)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..xmax, 0f64..ymax)?;
    chart.configure_mesh().x_desc(xdesc).y_desc(ydesc).draw()?;
    for (i, (name, pts)) in series.iter().enumerate() {
        let c = Palette99::pick(i).to_rgba();
        chart
            .draw_series(LineSeries::new(pts.iter().copied(), c.stroke_width(2)))?
            .label(name.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2)));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    root.present()
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

/// Writes results.md and results.json into `dir`.
pub fn write(
    dir: &Path,
    title: &str,
    preamble: &str,
    tables: &[Table],
    raw: &serde_json::Value,
) -> Result<()> {
    std::fs::create_dir_all(dir)?;
    let mut md = format!("# {title}\n\n{preamble}\n\n");
    for t in tables {
        md.push_str(&t.markdown());
        md.push('\n');
    }
    std::fs::write(dir.join("results.md"), md)?;
    let json = serde_json::json!({ "title": title, "tables": tables, "raw": raw });
    std::fs::write(
        dir.join("results.json"),
        serde_json::to_string_pretty(&json)?,
    )?;
    Ok(())
}

/// Where a set of rows came from.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunInfo {
    /// "R1", "R2", ... (assigned when results are written).
    pub id: String,
    /// The command line.
    pub command: String,
    /// When it finished, with the load average then.
    pub finished: String,
    /// The Sluice binary (path and build time), if Sluice ran.
    pub binary: String,
}

/// Results as stored in results.json.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Stored {
    /// Experiment name.
    #[serde(default)]
    pub title: String,
    /// The tables.
    #[serde(default)]
    pub tables: Vec<Table>,
    /// Raw per-run numbers (objects with "group" and "server" where merging applies).
    #[serde(default)]
    pub raw: serde_json::Value,
    /// The runs rows refer to.
    #[serde(default)]
    pub runs: Vec<RunInfo>,
}

/// Provenance of rows from a results.md written before runs were recorded:
/// its "Command:", "Finished:" and "Sluice binary:" lines.
pub fn run_from_markdown(md: &str, id: &str) -> RunInfo {
    let field = |k: &str| {
        md.lines()
            .find_map(|l| l.strip_prefix(k))
            .map(|v| v.trim().trim_end_matches("  ").trim().to_string())
            .unwrap_or_default()
    };
    RunInfo {
        id: id.into(),
        command: field("Command:").trim_matches('`').to_string(),
        finished: field("Finished:"),
        binary: field("Sluice binary:"),
    }
}

fn raw_key(v: &serde_json::Value) -> Option<(String, String)> {
    Some((
        v.get("group")?.as_str()?.to_string(),
        v.get("server").or(v.get("config"))?.as_str()?.to_string(),
    ))
}

/// Merges a new run into stored results: rows (group, config) of `new`
/// replace the same rows of `old` (in place), other old rows stay; raw
/// entries of replaced rows go; runs no row refers to any more go.
pub fn merge(
    old: Stored,
    new_tables: &[Table],
    new_raw: &serde_json::Value,
    mut run: RunInfo,
) -> Stored {
    let next = old
        .runs
        .iter()
        .filter_map(|r| r.id.strip_prefix('R')?.parse::<u32>().ok())
        .max()
        .unwrap_or(0)
        + 1;
    run.id = format!("R{next}");
    let mut tables = old.tables;
    let mut replaced = std::collections::BTreeSet::new();
    for nt in new_tables {
        let i = match tables.iter().position(|t| t.title == nt.title) {
            Some(i) => i,
            None => {
                tables.push(Table {
                    rows: Vec::new(),
                    ..nt.clone()
                });
                tables.len() - 1
            }
        };
        let t = &mut tables[i];
        let mut cols = nt.columns.clone();
        cols.extend(
            t.columns
                .iter()
                .filter(|c| !nt.columns.contains(c))
                .cloned(),
        );
        t.columns = cols;
        for r in &nt.rows {
            let mut r = r.clone();
            r.run = run.id.clone();
            replaced.insert((r.group.clone(), r.config.clone()));
            match t
                .rows
                .iter()
                .position(|o| o.group == r.group && o.config == r.config)
            {
                Some(j) => t.rows[j] = r,
                // A new row goes after the last of its group.
                None => match t.rows.iter().rposition(|o| o.group == r.group) {
                    Some(j) => t.rows.insert(j + 1, r),
                    None => t.rows.push(r),
                },
            }
        }
        // Columns no row has any more (renamed since) go.
        let rows = &t.rows;
        t.columns
            .retain(|c| rows.iter().any(|r| r.values.contains_key(c)));
    }
    let mut raw: Vec<serde_json::Value> = match old.raw {
        serde_json::Value::Array(a) => a
            .into_iter()
            .filter(|v| raw_key(v).is_none_or(|k| !replaced.contains(&k)))
            .collect(),
        _ => Vec::new(),
    };
    if let serde_json::Value::Array(a) = new_raw {
        raw.extend(a.iter().cloned().map(|mut v| {
            if let Some(o) = v.as_object_mut() {
                o.insert("run_id".into(), serde_json::Value::String(run.id.clone()));
            }
            v
        }));
    }
    let mut runs = old.runs;
    runs.push(run);
    runs.retain(|r| tables.iter().any(|t| t.rows.iter().any(|x| x.run == r.id)));
    Stored {
        title: old.title,
        tables,
        raw: serde_json::Value::Array(raw),
        runs,
    }
}

/// Writes results.md and results.json, merging into what `dir` holds when
/// `keep_others` (a run of some servers or steps only): the rows this run
/// produced replace theirs, every other row stays with the run it came from.
/// Returns the stored (merged) results.
/// `post` runs on every merged table before it is written (columns that
/// compare rows, e.g. against a baseline row of an earlier run).
#[allow(clippy::too_many_arguments)]
pub fn write_merged(
    dir: &Path,
    title: &str,
    preamble: &str,
    tables: &[Table],
    raw: &serde_json::Value,
    run: RunInfo,
    keep_others: bool,
    post: &dyn Fn(&mut Table),
) -> Result<Stored> {
    std::fs::create_dir_all(dir)?;
    let mut old = Stored {
        title: title.into(),
        raw: serde_json::Value::Array(Vec::new()),
        ..Default::default()
    };
    let jp = dir.join("results.json");
    if keep_others && jp.exists() {
        let text = std::fs::read_to_string(&jp)?;
        match serde_json::from_str::<Stored>(&text) {
            Ok(mut s) => {
                if s.tables
                    .iter()
                    .any(|t| t.rows.iter().any(|r| r.run.is_empty()))
                {
                    // Written before runs were recorded: one run described by the old results.md.
                    let md = std::fs::read_to_string(dir.join("results.md")).unwrap_or_default();
                    let id = format!("R{}", s.runs.len() + 1);
                    for t in &mut s.tables {
                        for r in t.rows.iter_mut().filter(|r| r.run.is_empty()) {
                            r.run = id.clone();
                        }
                    }
                    s.runs.push(run_from_markdown(&md, &id));
                }
                s.title = title.into();
                old = s;
            }
            Err(e) => eprintln!(
                "warning: {} not merged (unreadable: {e}); rows of other servers are dropped",
                jp.display()
            ),
        }
    }
    let mut stored = merge(old, tables, raw, run);
    for t in &mut stored.tables {
        post(t);
    }
    let mut md = format!("# {title}\n\n{preamble}\n\n");
    if stored.runs.len() > 1 || keep_others {
        md.push_str("Rows come from these runs (column \"run\"; a later run of some servers or steps replaces only their rows):\n\n| run | command | finished (load average) | Sluice binary |\n|---|---|---|---|\n");
        for r in &stored.runs {
            let _ = writeln!(
                md,
                "| {} | `{}` | {} | {} |",
                r.id, r.command, r.finished, r.binary
            );
        }
        md.push('\n');
    }
    for t in &stored.tables {
        md.push_str(&t.markdown());
        md.push('\n');
    }
    std::fs::write(dir.join("results.md"), md)?;
    std::fs::write(&jp, serde_json::to_string_pretty(&stored)?)?;
    Ok(stored)
}

#[cfg(test)]
mod tests;
