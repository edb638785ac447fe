//! INT-label's operations of the control API: `show_label` and
//! `label_set_shift`.

use dataplane::counters::{Event, MAX_PORTS};
use dataplane::label::SHIFT_EVERY_PACKET;

use crate::api::ApiError;
use crate::int::config::instruction_names;
use crate::int::ops::presence_view;
use crate::label::api::{LabelPortView, LabelView, ShiftSet};
use crate::label::config::LabelPlan;
use crate::switch::ops::events_by_name;
use crate::switch::Switch;

fn not_configured() -> ApiError {
    ApiError::not_configured("INT-label", "label")
}

impl Switch {
    fn label_plan(&self) -> Result<&LabelPlan, ApiError> {
        self.plan().label.as_ref().ok_or_else(not_configured)
    }

    /// The domain, each port's label state and rate, the counters.
    pub fn label_view(&self) -> Result<LabelView, ApiError> {
        let plan = self.label_plan()?;
        let spec = self.spec.label.as_ref().ok_or_else(not_configured)?;
        let now = dataplane::dpdk::tsc();
        let hz = self.hz.max(1) as f64;
        let c = self.counters();
        let ports = self
            .port_names()
            .into_iter()
            .enumerate()
            .take(MAX_PORTS)
            .map(|(i, name)| {
                let (lt, shift) = self.label_ports.state(i);
                let labels = c.labels[i];
                LabelPortView {
                    port: name,
                    index: i as u16,
                    edge: spec.is_edge(i),
                    lt_age_ms: (lt != 0).then(|| now.saturating_sub(lt) as f64 * 1e3 / hz),
                    shift,
                    labels,
                    labels_per_s: self.label_rates.get(i).copied().unwrap_or(0.0),
                }
            })
            .collect();
        let full: Vec<u64> =
            self.worker_counters().iter().map(|w| w.events[Event::LabelReportRingFull as usize]).collect();
        let rings = self.exporter.as_ref().map(|e| e.label_rings(&full)).unwrap_or_default();
        Ok(LabelView {
            label_domain_id: spec.ds_id,
            node_id: spec.node_id,
            presence: presence_view(spec.presence),
            instructions: instruction_names(spec.bitmap),
            max_labels: spec.max_labels,
            interval_ms: plan.interval_ns as f64 / 1e6,
            rest_ms: plan.rest_ns as f64 / 1e6,
            probability: match plan.f {
                dataplane::label::LabelFn::F1 => "f1",
                dataplane::label::LabelFn::F2 => "f2",
                dataplane::label::LabelFn::F3 => "f3",
                dataplane::label::LabelFn::Table(_) => "table",
            }
            .into(),
            f: (0..plan.max_hop as usize).map(|n| spec.f.probability(n)).collect(),
            max_shift: plan.max_shift,
            ports,
            counters: events_by_name(&c, "label_"),
            rings,
        })
    }

    /// Sets a port's S: its interval becomes T >> S (255: every packet).
    pub fn label_set_shift(&mut self, port: &str, shift: u8) -> Result<ShiftSet, ApiError> {
        let max = self.label_plan()?.max_shift;
        let i = self.port_index(port)?;
        if shift > max && shift != SHIFT_EVERY_PACKET {
            return Err(ApiError::bad_argument(
                "shift",
                format!("{shift}: must be 0..={max} (label.max_shift) or {SHIFT_EVERY_PACKET} (every packet)"),
            ));
        }
        let previous = self.label_ports.state(i as usize).1;
        self.label_ports.set_shift(i as usize, shift).map_err(|e| ApiError::bad_argument("port", e))?;
        Ok(ShiftSet { port: port.into(), shift, previous })
    }

    /// Once a second: each port's labels per second (for `show_label`).
    pub(crate) fn sample_label_rates(&mut self) {
        if self.plan().label.is_none() {
            return;
        }
        let now = std::time::Instant::now();
        if self.label_sample.as_ref().is_some_and(|(t, _)| now.duration_since(*t).as_secs_f64() < 1.0) {
            return;
        }
        // Summed over the workers only once a second.
        let counts: Vec<u64> = self.counters().labels.to_vec();
        if let Some((t, prev)) = &self.label_sample {
            let dt = now.duration_since(*t).as_secs_f64();
            self.label_rates = counts.iter().zip(prev).map(|(c, p)| c.saturating_sub(*p) as f64 / dt).collect();
        }
        self.label_sample = Some((now, counts));
    }
}
