//! AM-PM as a pipeline stage: per worker, the flows' registers and
//! counters; per burst, its receive time as the measurement points see it.

use std::sync::Arc;

use crate::parse::PacketMeta;
use crate::pipeline::{Burst, Cx, Depth, Output, Packet, Stage, Step};
use crate::pktbuf::PacketBuf;
use crate::tables::Tables;

use super::{AmpmCtx, BurstTime, FlowCounters, SlotMemo};

/// Flow rule sets from which a burst is parsed and prefetched first.
const PREFETCH_MIN_FLOWS: usize = 4096;

/// A worker's AM-PM state.
pub struct AmpmStage {
    /// Registers per flow slot (this worker's own).
    regs: Vec<u8>,
    /// Counters per flow slot, written by this worker, read by the exporter.
    counters: Arc<[FlowCounters]>,
    /// The burst's time, when there are flows to measure.
    now: Option<BurstTime>,
    memo: SlotMemo,
}

impl AmpmStage {
    pub fn new(counters: Arc<[FlowCounters]>) -> AmpmStage {
        AmpmStage { regs: vec![0; counters.len()], counters, now: None, memo: SlotMemo::default() }
    }
}

impl<B: PacketBuf> Stage<B> for AmpmStage {
    #[inline(always)]
    fn depth<O: Output<B>>(&self, t: &Tables, _out: &O) -> Option<Depth> {
        t.ampm.as_ref().map(|_| Depth::Full)
    }

    #[inline(always)]
    fn prefetch_pass(&self, t: &Tables) -> bool {
        t.ampm.as_ref().is_some_and(|a| a.flows.len() >= PREFETCH_MIN_FLOWS)
    }

    #[inline(always)]
    fn prefetch(&mut self, t: &Tables, frame: &[u8], meta: &PacketMeta) {
        if let Some(a) = t.ampm.as_ref().filter(|a| a.flows.len() >= PREFETCH_MIN_FLOWS) {
            super::prefetch(a, frame, meta);
        }
    }

    /// AM-PM's time bits: CLOCK_REALTIME itself (vDSO, once per burst), not
    /// the TSC extrapolation: MPs in other processes and on other hosts
    /// (PTP-disciplined) must agree on interval edges and timestamps. With
    /// no monitored flows yet (they come at run time) there is nothing to
    /// do: no clock read, no per-packet key.
    #[inline(always)]
    fn begin(&mut self, t: &Tables, burst: &Burst) {
        self.now = t.ampm.as_ref().filter(|a| !a.flows.is_empty()).map(|a| BurstTime::new(&a.timing, burst.wall_ns()));
        self.memo = SlotMemo::default();
    }

    /// Measures a packet that is being forwarded (not drops, nor the
    /// switch's own replies).
    #[inline(always)]
    fn packet<O: Output<B>>(&mut self, cx: &mut Cx<'_, O>, m: &mut B, p: &mut Packet) -> Step {
        use crate::forward::Verdict;
        if let (Some(spec), Some(now), Ok(meta), Verdict::Tx(_) | Verdict::Flood) =
            (cx.tables.ampm.as_ref(), self.now.as_ref(), &mut p.meta, p.verdict)
        {
            let mut ctx =
                AmpmCtx { spec, regs: &mut self.regs, counters: &self.counters, c: cx.c, now, memo: &mut self.memo };
            super::apply(&mut ctx, m, meta);
        }
        Step::Next
    }
}
