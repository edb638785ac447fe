//! GPINT's operation of the control API: `show_gpint`.

use dataplane::counters::Event;
use dataplane::worker::FlowCommand;

use crate::api::ApiError;
use crate::gpint::api::{GpintView, SqrWorkerView, WaitingView};
use crate::switch::ops::{drops_by_name, events_by_name};
use crate::switch::Switch;

impl Switch {
    /// The section, the counters, and each worker's clone buffer (asked of
    /// the workers, which answer between bursts).
    pub fn gpint_view(&mut self) -> Result<GpintView, ApiError> {
        let plan = self.plan().gpint.ok_or_else(|| ApiError::not_configured("GPINT", "gpint"))?;
        let spec = self.spec.gpint.ok_or_else(|| ApiError::not_configured("GPINT", "gpint"))?;
        let hz = self.hz as f64;
        let workers: Vec<SqrWorkerView> = self
            .dump(|g| FlowCommand::GpintShow { generation: g }, |w| &w.gpint_view)?
            .into_iter()
            .map(|(worker, v)| SqrWorkerView {
                worker,
                capacity: v.capacity,
                in_use: v.in_use,
                high_water: v.high_water,
                waiting: v
                    .waiting
                    .iter()
                    .map(|w| WaitingView {
                        request_id: w.key.request_id,
                        attempt: w.key.attempt,
                        hop_index: w.key.hop_index,
                        age_ms: w.age as f64 * 1000.0 / hz,
                    })
                    .collect(),
            })
            .collect();
        let c = self.counters();
        let mut counters = events_by_name(&c, "gpint_");
        counters.extend(events_by_name(&c, "sqr_"));
        counters.extend(events_by_name(&c, "impair_lost_gpint_"));
        // The most copies any worker held at once.
        counters.insert("sqr_high_water".into(), workers.iter().map(|w| w.high_water as u64).max().unwrap_or(0));
        counters.extend(drops_by_name(&c).into_iter().filter(|(k, _)| k.starts_with("gpint_")));
        let (mut rings, delivered, notices) =
            self.exporter.as_ref().map(|e| e.gpint_counts()).unwrap_or((Vec::new(), 0, 0));
        for (r, w) in rings.iter_mut().zip(self.worker_counters()) {
            r.ring_full = w.events[Event::GpintExportFull as usize];
        }
        Ok(GpintView {
            int_port: spec.int_port,
            udp_port: spec.udp_port,
            domain_id: spec.domain_id,
            node_id: spec.node_id,
            recovery: spec.recovery,
            hold_ms: plan.hold_ms,
            clone_slots: plan.clone_slots,
            counters,
            workers,
            delivered,
            notices,
            rings,
        })
    }
}
