//! Results: tables of min/median/max over repetitions (markdown), the raw
//! numbers (JSON) and PNG plots (plotters, bitmap backend).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use anyhow::{Context, Result};
use plotters::prelude::*;
use serde::Serialize;

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
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// First column (e.g. the case).
    pub group: String,
    /// Second column (e.g. the server).
    pub config: String,
    /// Column -> one value per repetition.
    pub values: BTreeMap<String, Vec<f64>>,
    /// Free text (failures, "n/a").
    pub note: String,
}

/// A table with fixed columns.
#[derive(Debug, Clone, Serialize)]
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
        Table { title: title.into(), keys: (k1.into(), k2.into()), columns: columns.iter().map(|c| c.to_string()).collect(), rows: Vec::new() }
    }

    fn row(&mut self, group: &str, config: &str) -> &mut Row {
        if let Some(i) = self.rows.iter().position(|r| r.group == group && r.config == config) {
            return &mut self.rows[i];
        }
        self.rows.push(Row { group: group.into(), config: config.into(), values: BTreeMap::new(), note: String::new() });
        self.rows.last_mut().expect("just pushed")
    }

    /// Adds one measurement.
    pub fn add(&mut self, group: &str, config: &str, column: &str, v: f64) {
        if v.is_finite() {
            self.row(group, config).values.entry(column.into()).or_default().push(v);
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
        let r = self.rows.iter().find(|r| r.group == group && r.config == config)?;
        r.values.get(column).filter(|v| !v.is_empty()).map(|v| median(v))
    }

    /// Markdown: each cell "median (min-max, n)" or the single value.
    pub fn markdown(&self) -> String {
        let mut s = format!("### {}\n\n| {} | {} | {} | notes |\n|---|---|", self.title, self.keys.0, self.keys.1, self.columns.join(" | "));
        s.push_str(&"---|".repeat(self.columns.len() + 1));
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
            let _ = writeln!(s, "| {} | {} | {} | {} |", r.group, r.config, cells.join(" | "), r.note);
        }
        s
    }
}

fn font_ready() -> bool {
    use std::sync::OnceLock;
    static OK: OnceLock<bool> = OnceLock::new();
    *OK.get_or_init(|| {
        for p in ["/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf", "/usr/share/fonts/TTF/DejaVuSans.ttf"] {
            if let Ok(bytes) = std::fs::read(p) {
                let leaked: &'static [u8] = Box::leak(bytes.into_boxed_slice());
                if plotters::style::register_font("sans-serif", FontStyle::Normal, leaked).is_ok() {
                    return true;
                }
            }
        }
        eprintln!("warning: no DejaVuSans.ttf found (apt-get install fonts-dejavu-core): plots skipped");
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
        .filter_map(|r| r.values.get(column).filter(|v| !v.is_empty()).map(|v| (r.config.as_str(), mmm(v))))
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
        chart.draw_series(std::iter::once(Rectangle::new([(x + 0.15, 0.0), (x + 0.85, *med)], BLUE.mix(0.6).filled())))?;
        chart.draw_series(std::iter::once(PathElement::new(vec![(x + 0.5, *lo), (x + 0.5, *hi)], BLACK.stroke_width(2))))?;
    }
    root.present().with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

/// Line chart of several (x, y) series.
pub fn line_chart(path: &Path, title: &str, xdesc: &str, ydesc: &str, series: &[(String, Vec<(f64, f64)>)]) -> Result<()> {
    if !font_ready() || series.iter().all(|s| s.1.is_empty()) {
        return Ok(());
    }
    let xmax = series.iter().flat_map(|s| s.1.iter().map(|p| p.0)).fold(0.0, f64::max).max(1e-9);
    let ymax = series.iter().flat_map(|s| s.1.iter().map(|p| p.1)).fold(0.0, f64::max) * 1.1 + 1e-9;
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
    chart.configure_series_labels().background_style(WHITE.mix(0.8)).border_style(BLACK).draw()?;
    root.present().with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

/// Writes results.md and results.json into `dir`.
pub fn write(dir: &Path, title: &str, preamble: &str, tables: &[Table], raw: &serde_json::Value) -> Result<()> {
    std::fs::create_dir_all(dir)?;
    let mut md = format!("# {title}\n\n{preamble}\n\n");
    for t in tables {
        md.push_str(&t.markdown());
        md.push('\n');
    }
    std::fs::write(dir.join("results.md"), md)?;
    let json = serde_json::json!({ "title": title, "tables": tables, "raw": raw });
    std::fs::write(dir.join("results.json"), serde_json::to_string_pretty(&json)?)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_show_median_and_range() {
        let mut t = Table::new("x", "case", "server", &["MB/s"]);
        for v in [3.0, 1.0, 2.0] {
            t.add("c", "s", "MB/s", v);
        }
        t.add("c", "s", "MB/s", f64::NAN);
        let md = t.markdown();
        assert!(md.contains("| c | s | 2.00 (1.00–3.00, n=3) |"), "{md}");
        assert_eq!(t.median_of("c", "s", "MB/s"), Some(2.0));
        assert_eq!(mmm(&[5.0]), (5.0, 5.0, 5.0));
    }
}
