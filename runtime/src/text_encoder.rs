//! The Prometheus text format (version 0.0.4) written straight into a `String`: byte for byte
//! what `prometheus::TextEncoder` writes for the same metric families, at a fraction of the
//! cost, because a scrape of a large job (~30,000 series) is mostly this text.
//!
//! What makes it cheaper: each series' label set is escaped and written once, then copied for
//! every bucket or quantile line of the series (the encoder escapes every label again for
//! every line); the `le` and `quantile` values are formatted once per distinct bound and
//! reused across series; whole-number sample values (counts) are written as integers instead
//! of through the float formatter; nothing is allocated per line.

use prometheus::proto::{Metric, MetricFamily, MetricType};
use std::fmt::Write as _;

const BUCKET_LABEL: &str = "le";
const QUANTILE_LABEL: &str = "quantile";
const POSITIVE_INF: &str = "+Inf";

/// Appends `families` to `out` in the text format. Fails, as `prometheus::TextEncoder` does,
/// on a family with no series or no name, and on an untyped family (which the encoder cannot
/// write either); `out` then holds the families before it.
pub(crate) fn encode(families: &[MetricFamily], out: &mut String) -> Result<(), prometheus::Error> {
    let mut bounds = BoundCache::default();
    let mut labels = String::new();
    for family in families {
        if family.get_metric().is_empty() {
            return Err(prometheus::Error::Msg(format!(
                "MetricFamily has no metrics: {family:?}"
            )));
        }
        let name = family.name();
        if name.is_empty() {
            return Err(prometheus::Error::Msg(format!(
                "MetricFamily has no name: {family:?}"
            )));
        }
        let help = family.help();
        if !help.is_empty() {
            out.push_str("# HELP ");
            out.push_str(name);
            out.push(' ');
            escape_into(out, help, false);
            out.push('\n');
        }
        let kind = family.get_field_type();
        let type_name = match kind {
            MetricType::COUNTER => "counter",
            MetricType::GAUGE => "gauge",
            MetricType::SUMMARY => "summary",
            MetricType::HISTOGRAM => "histogram",
            MetricType::UNTYPED => {
                return Err(prometheus::Error::Msg(format!(
                    "cannot encode the untyped family {name}"
                )))
            }
        };
        out.push_str("# TYPE ");
        out.push_str(name);
        out.push(' ');
        out.push_str(type_name);
        out.push('\n');

        for metric in family.get_metric() {
            series_labels(metric, &mut labels);
            let line = Line {
                name,
                labels: &labels,
                timestamp_ms: metric.timestamp_ms(),
            };
            match kind {
                MetricType::COUNTER => line.write(out, "", None, metric.get_counter().get_value()),
                MetricType::GAUGE => line.write(out, "", None, metric.get_gauge().get_value()),
                MetricType::HISTOGRAM => {
                    let h = metric.get_histogram();
                    let mut inf_seen = false;
                    for b in h.get_bucket() {
                        let bound = b.upper_bound();
                        let le = bounds.text(bound);
                        line.write(
                            out,
                            "_bucket",
                            Some((BUCKET_LABEL, le)),
                            b.cumulative_count() as f64,
                        );
                        inf_seen |= bound.is_sign_positive() && bound.is_infinite();
                    }
                    if !inf_seen {
                        line.write(
                            out,
                            "_bucket",
                            Some((BUCKET_LABEL, POSITIVE_INF)),
                            h.get_sample_count() as f64,
                        );
                    }
                    line.write(out, "_sum", None, h.get_sample_sum());
                    line.write(out, "_count", None, h.get_sample_count() as f64);
                }
                MetricType::SUMMARY => {
                    let s = metric.get_summary();
                    for q in s.get_quantile() {
                        let quantile = bounds.text(q.quantile());
                        line.write(out, "", Some((QUANTILE_LABEL, quantile)), q.value());
                    }
                    line.write(out, "_sum", None, s.sample_sum());
                    line.write(out, "_count", None, s.sample_count() as f64);
                }
                MetricType::UNTYPED => unreachable!("rejected above"),
            }
        }
    }
    Ok(())
}

/// `{name="value",…` for the series' labels, escaped, without the closing brace; empty when
/// the series has no label.
fn series_labels(metric: &Metric, out: &mut String) {
    out.clear();
    let mut separator = '{';
    for pair in metric.get_label() {
        out.push(separator);
        out.push_str(pair.name());
        out.push_str("=\"");
        escape_into(out, pair.value(), true);
        out.push('"');
        separator = ',';
    }
}

/// One series: what every one of its lines starts with.
struct Line<'a> {
    name: &'a str,
    labels: &'a str,
    timestamp_ms: i64,
}

impl Line<'_> {
    /// `name{labels,extra="…"} value [timestamp]`.
    fn write(&self, out: &mut String, suffix: &str, extra: Option<(&str, &str)>, value: f64) {
        out.push_str(self.name);
        out.push_str(suffix);
        match (self.labels.is_empty(), extra) {
            (true, None) => {}
            (false, None) => {
                out.push_str(self.labels);
                out.push('}');
            }
            (empty, Some((label, text))) => {
                if empty {
                    out.push('{');
                } else {
                    out.push_str(self.labels);
                    out.push(',');
                }
                out.push_str(label);
                out.push_str("=\"");
                out.push_str(text);
                out.push_str("\"}");
            }
        }
        out.push(' ');
        write_value(out, value);
        if self.timestamp_ms != 0 {
            let _ = write!(out, " {}", self.timestamp_ms);
        }
        out.push('\n');
    }
}

/// `value` as `f64`'s `Display` writes it (what the encoder writes), whole numbers through the
/// integer formatter.
fn write_value(out: &mut String, value: f64) {
    // Display prints a whole f64 below 2^53 exactly as the integer (no exponent, no ".0"); -0
    // keeps its sign, so it takes the float path.
    if value.fract() == 0.0 && value.abs() < 9.0e15 && !(value == 0.0 && value.is_sign_negative()) {
        let _ = write!(out, "{}", value as i64);
    } else {
        let _ = write!(out, "{value}");
    }
}

/// The text of `le` and `quantile` values, escaped, formatted once per distinct value.
#[derive(Default)]
struct BoundCache {
    texts: Vec<(u64, String)>,
}

impl BoundCache {
    fn text(&mut self, value: f64) -> &str {
        let bits = value.to_bits();
        let index = match self.texts.iter().position(|(b, _)| *b == bits) {
            Some(i) => i,
            None => {
                let mut text = String::new();
                escape_into(&mut text, &value.to_string(), true);
                self.texts.push((bits, text));
                self.texts.len() - 1
            }
        };
        &self.texts[index].1
    }
}

/// Appends `text` with `\` and newline escaped, and `"` too for label values.
fn escape_into(out: &mut String, text: &str, quotes: bool) {
    let special = |c: char| c == '\\' || c == '\n' || (quotes && c == '"');
    if !text.contains(special) {
        out.push_str(text);
        return;
    }
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '"' if quotes => out.push_str("\\\""),
            c => out.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus::core::Collector;
    use prometheus::{Encoder, TextEncoder};

    fn reference(families: &[MetricFamily]) -> String {
        let mut bytes = Vec::new();
        TextEncoder::new().encode(families, &mut bytes).unwrap();
        String::from_utf8(bytes).unwrap()
    }

    fn ours(families: &[MetricFamily]) -> String {
        let mut text = String::new();
        encode(families, &mut text).unwrap();
        text
    }

    #[test]
    fn writes_what_the_prometheus_encoder_writes() {
        let registry = prometheus::Registry::new();
        let counter = prometheus::CounterVec::new(
            prometheus::Opts::new("c_total", "A \\ counter\nwith help."),
            &["a", "b"],
        )
        .unwrap();
        counter.with_label_values(&["x", "y\"\\\nz"]).inc_by(3.0);
        counter.with_label_values(&["", "q"]).inc_by(0.25);
        registry.register(Box::new(counter)).unwrap();
        let gauge = prometheus::Gauge::new("g", "g").unwrap();
        gauge.set(-0.0);
        registry.register(Box::new(gauge)).unwrap();
        let big = prometheus::Gauge::new("big", "h").unwrap();
        big.set(1e300);
        registry.register(Box::new(big)).unwrap();
        let nan = prometheus::Gauge::new("nan", "h").unwrap();
        nan.set(f64::NAN);
        registry.register(Box::new(nan)).unwrap();
        let histogram = prometheus::HistogramVec::new(
            prometheus::HistogramOpts::new("h_seconds", "h")
                .buckets(vec![0.000001, 0.0025, 1.0, 3600.0]),
            &["k"],
        )
        .unwrap();
        for v in [0.0, 0.0000005, 0.002, 5.0, 7200.0] {
            histogram.with_label_values(&["one"]).observe(v);
        }
        histogram.with_label_values(&["two"]).observe(0.1);
        registry.register(Box::new(histogram)).unwrap();
        let unlabelled = prometheus::Histogram::with_opts(
            prometheus::HistogramOpts::new("u", "u").buckets(vec![1.0, f64::INFINITY]),
        )
        .unwrap();
        unlabelled.observe(0.5);
        registry.register(Box::new(unlabelled)).unwrap();
        let families = registry.gather();
        assert_eq!(ours(&families), reference(&families));
    }

    #[test]
    fn summaries_and_timestamps_as_the_encoder_writes_them() {
        let mut s = prometheus::proto::Summary::default();
        s.set_sample_count(3);
        s.set_sample_sum(0.123456789);
        let quantiles = [0.0, 0.5, 0.999, 1.0]
            .iter()
            .map(|&p| {
                let mut q = prometheus::proto::Quantile::default();
                q.set_quantile(p);
                q.set_value(p * 0.0001);
                q
            })
            .collect();
        s.set_quantile(quantiles);
        let mut with_labels = Metric::default();
        let mut pair = prometheus::proto::LabelPair::default();
        pair.set_name("job_name".into());
        pair.set_value("j".into());
        with_labels.set_label(vec![pair]);
        with_labels.set_summary(s.clone());
        with_labels.set_timestamp_ms(1_700_000_000_000);
        let mut bare = Metric::default();
        bare.set_summary(s);
        let mut family = MetricFamily::default();
        family.set_name("s_seconds".into());
        family.set_help("a summary".into());
        family.set_field_type(MetricType::SUMMARY);
        family.set_metric(vec![with_labels, bare]);
        // No help, no label.
        let mut c = prometheus::proto::Counter::default();
        c.set_value(12345678.0);
        let mut counter = Metric::default();
        counter.set_counter(c);
        let mut no_help = MetricFamily::default();
        no_help.set_name("c_total".into());
        no_help.set_field_type(MetricType::COUNTER);
        no_help.set_metric(vec![counter]);
        let families = [family, no_help];
        assert_eq!(ours(&families), reference(&families));
    }

    #[test]
    fn process_series_as_the_encoder_writes_them() {
        #[cfg(target_os = "linux")]
        {
            let families = prometheus::process_collector::ProcessCollector::for_self().collect();
            assert!(!families.is_empty());
            assert_eq!(ours(&families), reference(&families));
        }
    }

    #[test]
    fn empty_and_untyped_families_are_errors() {
        let mut empty = MetricFamily::default();
        empty.set_name("e".into());
        let mut text = String::new();
        assert!(encode(&[empty], &mut text).is_err());
        let mut untyped = MetricFamily::default();
        untyped.set_name("u".into());
        untyped.set_field_type(MetricType::UNTYPED);
        untyped.set_metric(vec![Metric::default()]);
        assert!(encode(&[untyped], &mut text).is_err());
    }
}
