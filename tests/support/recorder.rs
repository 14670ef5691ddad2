//! A `metrics` recorder for the tests that read what lockman records (tests/metrics.rs,
//! tests/contention.rs): every value by `name{label=value,…}` (labels sorted), counters and
//! gauges as a number, histograms as their samples. Installed once per test binary.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, OnceLock};

use metrics::{
    Counter, CounterFn, Gauge, GaugeFn, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder,
    SharedString, Unit,
};

/// Every value, by `name{label=value,…}`: counters and gauges as a number, histograms as their
/// samples.
#[derive(Default)]
pub struct Recorded {
    pub values: Mutex<BTreeMap<String, f64>>,
    pub samples: Mutex<BTreeMap<String, Vec<f64>>>,
}

struct Cell {
    key: String,
    rec: Arc<Recorded>,
}

impl Cell {
    fn add(&self, delta: f64) {
        *self
            .rec
            .values
            .lock()
            .unwrap()
            .entry(self.key.clone())
            .or_default() += delta;
    }
}

impl CounterFn for Cell {
    fn increment(&self, value: u64) {
        self.add(value as f64);
    }
    fn absolute(&self, value: u64) {
        self.rec
            .values
            .lock()
            .unwrap()
            .insert(self.key.clone(), value as f64);
    }
}

impl GaugeFn for Cell {
    fn increment(&self, value: f64) {
        self.add(value);
    }
    fn decrement(&self, value: f64) {
        self.add(-value);
    }
    fn set(&self, value: f64) {
        self.rec
            .values
            .lock()
            .unwrap()
            .insert(self.key.clone(), value);
    }
}

impl HistogramFn for Cell {
    fn record(&self, value: f64) {
        let mut samples = self.rec.samples.lock().unwrap();
        samples.entry(self.key.clone()).or_default().push(value);
    }
}

struct Rec(Arc<Recorded>);

impl Rec {
    fn cell(&self, key: &Key) -> Arc<Cell> {
        let mut labels: Vec<String> = key
            .labels()
            .map(|l| format!("{}={}", l.key(), l.value()))
            .collect();
        labels.sort();
        let key = match labels.is_empty() {
            true => key.name().to_owned(),
            false => format!("{}{{{}}}", key.name(), labels.join(",")),
        };
        Arc::new(Cell {
            key,
            rec: self.0.clone(),
        })
    }
}

impl Recorder for Rec {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        Counter::from_arc(self.cell(key))
    }
    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::from_arc(self.cell(key))
    }
    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::from_arc(self.cell(key))
    }
}

pub fn recorded() -> &'static Arc<Recorded> {
    static RECORDED: OnceLock<Arc<Recorded>> = OnceLock::new();
    RECORDED.get_or_init(|| {
        let rec = Arc::new(Recorded::default());
        metrics::set_global_recorder(Rec(rec.clone())).expect("the only recorder");
        rec
    })
}
