//! The benchmarks' figures: line charts drawn as SVG with plotters, each with a vertical mark
//! (the instances' end) and a legend.

use std::path::Path;

use plotters::prelude::*;

/// One line of a chart: its legend, its colour, its points.
pub(crate) struct Line<'a> {
    pub name: &'a str,
    pub color: RGBColor,
    pub points: Vec<(f64, f64)>,
}

/// A chart to draw.
pub(crate) struct Chart<'a> {
    pub caption: &'a str,
    pub x_desc: &'a str,
    pub y_desc: &'a str,
    /// The axes run from 0 to these.
    pub x_max: f64,
    pub y_max: f64,
    /// A vertical line at this x, with its legend.
    pub mark: Option<(f64, &'a str)>,
    pub lines: Vec<Line<'a>>,
}

/// Draws `chart` to the SVG file `path`.
pub(crate) fn draw(path: &Path, chart: &Chart<'_>) -> anyhow::Result<()> {
    let err = |e: &dyn std::fmt::Display| anyhow::anyhow!("drawing {}: {e}", path.display());
    let root = SVGBackend::new(path, (800, 420)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let mut c = ChartBuilder::on(&root)
        .margin(20)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .caption(chart.caption, ("sans-serif", 18))
        .build_cartesian_2d(0f64..chart.x_max, 0f64..chart.y_max)
        .map_err(|e| err(&e))?;
    c.configure_mesh()
        .x_desc(chart.x_desc)
        .y_desc(chart.y_desc)
        .x_label_formatter(&|v| format!("{v:.0}"))
        .y_label_formatter(&|v| format!("{v:.0}"))
        .draw()
        .map_err(|e| err(&e))?;
    for line in &chart.lines {
        let color = line.color;
        c.draw_series(LineSeries::new(
            line.points.iter().copied(),
            color.stroke_width(2),
        ))
        .map_err(|e| err(&e))?
        .label(line.name)
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
    }
    if let Some((x, name)) = chart.mark {
        c.draw_series(LineSeries::new([(x, 0.0), (x, chart.y_max)], &BLACK))
            .map_err(|e| err(&e))?
            .label(name)
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK));
    }
    c.configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

/// The steps of a cumulative count: for each time in `times` (seconds, any order), how many
/// are at or before it; starting at (0, 0) and held to `end`.
pub(crate) fn cumulative(times: &[f64], end: f64) -> Vec<(f64, f64)> {
    let mut sorted: Vec<f64> = times.iter().copied().filter(|t| t.is_finite()).collect();
    sorted.sort_by(f64::total_cmp);
    let mut points = vec![(0.0, 0.0)];
    for (i, t) in sorted.iter().enumerate() {
        points.push((*t, i as f64));
        points.push((*t, (i + 1) as f64));
    }
    points.push((end, sorted.len() as f64));
    points
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cumulative_count_steps_up_at_each_time() {
        assert_eq!(
            cumulative(&[2.0, 1.0], 5.0),
            vec![
                (0.0, 0.0),
                (1.0, 0.0),
                (1.0, 1.0),
                (2.0, 1.0),
                (2.0, 2.0),
                (5.0, 2.0)
            ]
        );
        assert_eq!(cumulative(&[], 3.0), vec![(0.0, 0.0), (3.0, 0.0)]);
    }

    #[test]
    fn a_chart_is_written_as_svg() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.svg");
        let chart = Chart {
            caption: "c",
            x_desc: "x",
            y_desc: "y",
            x_max: 10.0,
            y_max: 3.0,
            mark: Some((5.0, "mark")),
            lines: vec![Line {
                name: "steps",
                color: BLUE,
                points: cumulative(&[1.0, 2.0], 10.0),
            }],
        };
        draw(&path, &chart).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(svg.starts_with("<svg") && svg.contains("steps") && svg.contains("mark"));
    }
}
