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

fn table(rows: &[(&str, &str, f64)]) -> Table {
    let mut t = Table::new("x", "case", "server", &["MB/s"]);
    for (g, s, v) in rows {
        t.add(g, s, "MB/s", *v);
    }
    t
}

#[test]
fn merging_replaces_only_the_rows_that_ran() {
    let run = |c: &str| RunInfo {
        command: c.into(),
        ..Default::default()
    };
    let raw = |rows: &[(&str, &str)]| {
        serde_json::Value::Array(
            rows.iter()
                .map(|(g, s)| serde_json::json!({"group": g, "server": s}))
                .collect(),
        )
    };
    let first = merge(
        Stored::default(),
        &[table(&[
            ("a", "nginx", 1.0),
            ("a", "sluice", 2.0),
            ("b", "sluice", 3.0),
        ])],
        &raw(&[("a", "nginx"), ("a", "sluice"), ("b", "sluice")]),
        run("all"),
    );
    assert_eq!(first.runs.len(), 1);
    assert!(first.tables[0].rows.iter().all(|r| r.run == "R1"));
    // A later run of sluice in group a only.
    let mut t2 = table(&[("a", "sluice", 20.0)]);
    t2.columns.push("new col".into());
    t2.add("a", "sluice", "new col", 5.0);
    let second = merge(first, &[t2], &raw(&[("a", "sluice")]), run("sluice only"));
    let t = &second.tables[0];
    assert_eq!(t.rows.len(), 3);
    assert_eq!(
        (t.rows[1].config.as_str(), t.rows[1].run.as_str()),
        ("sluice", "R2")
    );
    assert_eq!(t.median_of("a", "sluice", "MB/s"), Some(20.0));
    assert_eq!(t.median_of("a", "nginx", "MB/s"), Some(1.0));
    assert_eq!(t.rows[2].run, "R1");
    // A new row of an existing group goes after that group's rows.
    let third = merge(
        second.clone(),
        &[table(&[("a", "vsftpd", 7.0)])],
        &raw(&[]),
        run("vsftpd"),
    );
    let order: Vec<_> = third.tables[0]
        .rows
        .iter()
        .map(|r| (r.group.as_str(), r.config.as_str()))
        .collect();
    assert_eq!(
        order,
        vec![
            ("a", "nginx"),
            ("a", "sluice"),
            ("a", "vsftpd"),
            ("b", "sluice")
        ]
    );
    let t = &second.tables[0];
    assert_eq!(t.columns, vec!["MB/s".to_string(), "new col".to_string()]);
    let keys: Vec<_> = second
        .raw
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            (
                v["server"].as_str().unwrap().to_string(),
                v.get("run_id")
                    .and_then(|x| x.as_str())
                    .unwrap_or("R1")
                    .to_string(),
            )
        })
        .collect();
    assert_eq!(keys.len(), 3);
    assert!(keys.contains(&("sluice".into(), "R2".into())));
    assert_eq!(
        second
            .runs
            .iter()
            .map(|r| r.id.as_str())
            .collect::<Vec<_>>(),
        vec!["R1", "R2"]
    );
    assert!(
        t.markdown()
            .contains("| a | sluice | R2 | 20.0 | 5.00 |  |"),
        "{}",
        t.markdown()
    );
    // Replacing every row of R1 drops R1 from the runs.
    let third = merge(
        second,
        &[table(&[("a", "nginx", 1.5), ("b", "sluice", 3.5)])],
        &raw(&[]),
        run("rest"),
    );
    assert_eq!(
        third.runs.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(),
        vec!["R2", "R3"]
    );
}

#[test]
fn old_markdown_headers_give_the_provenance() {
    let md = "# x\n\nd\n\nCommand: `sluice-lab run x --repeat 1`  \nFinished: 2026-11-22 08:09 UTC (load average then: 2.39 1.86 2.11)  \nSluice binary: /b/sluice (built 07:26)  \nKernel: k\n";
    let r = run_from_markdown(md, "R1");
    assert_eq!(r.command, "sluice-lab run x --repeat 1");
    assert_eq!(
        r.finished,
        "2026-11-22 08:09 UTC (load average then: 2.39 1.86 2.11)"
    );
    assert_eq!(r.binary, "/b/sluice (built 07:26)");
}
