//! AM-PM operations of the control API (`show ampm`, `ampm add|del`,
//! `rule show|add|del`). Flows and slot rules change by publishing a new
//! table generation: traffic keeps flowing.

use dataplane::ampm::{self, AmpmSetup, SlotAction};
use dataplane::classifier::{format_bits, parse_bits, Rule};

use crate::ampm::api::{
    AmpmAdded, AmpmFlowView, AmpmView, ColorCounters, RuleAdd, SlotRuleView, SlotTableView, SlotTables,
};
use crate::ampm::config::AmpmFlowConfig;
use crate::ampm::export::sum;
use crate::api::views::Generation;
use crate::api::ApiError;
use crate::switch::ops::events_by_name;
use crate::switch::Switch;

fn not_configured() -> ApiError {
    ApiError::not_configured("AM-PM", "ampm")
}

fn table_index(name: &str) -> Result<usize, ApiError> {
    AmpmSetup::table_by_name(name).ok_or_else(|| {
        ApiError::not_found("table", format!("no slot table '{name}' (one of {})", AmpmSetup::table_names().join(", ")))
    })
}

fn rule_view(setup: &AmpmSetup, r: &Rule<SlotAction>) -> SlotRuleView {
    let t = &setup.timing;
    let w = t.word();
    let lsb = (t.interval_bit - t.sub_bits) as u32;
    let meta = dataplane::classifier::field::META;
    let a = &r.action;
    SlotRuleView {
        name: r.name.clone(),
        priority: r.priority,
        time: format_bits(r.value.0[w], r.mask.0[w], lsb, t.sub_bits as u32 + 1),
        mark: format_bits(r.value.0[meta], r.mask.0[meta], 0, 2),
        reg: format_bits(r.value.0[meta], r.mask.0[meta], 8, 1),
        set_l: a.set_l,
        set_d: a.set_d,
        set_reg: a.reg,
        color: a.color,
        count: a.count,
        timestamp: a.timestamp,
    }
}

impl Switch {
    fn ampm_setup(&self) -> Result<&AmpmSetup, ApiError> {
        self.spec.ampm.as_ref().ok_or_else(not_configured)
    }

    /// Timing, current interval and color, every flow with its counters.
    pub fn ampm_view(&self) -> Result<AmpmView, ApiError> {
        let s = self.ampm_setup()?;
        let t = &s.timing;
        let now = self.now_ns();
        let (interval, slot) = t.position(now);
        let ex = self.ampm_exporter.as_ref();
        let flows = s
            .flows
            .iter()
            .map(|f| {
                let counters = (0..2u8)
                    .map(|color| {
                        let v = sum(&self.shared, f.mp.slot as usize, color as usize);
                        ColorCounters {
                            color,
                            packets: v.packets,
                            bytes: v.bytes,
                            delay_count: v.delay_count,
                            last_delay_ts_ns: v.delay_ts,
                        }
                    })
                    .collect();
                AmpmFlowView {
                    name: f.name.clone(),
                    slot: f.mp.slot,
                    flow_mon_id: f.mp.flow_mon_id,
                    role: f.mp.role.name().into(),
                    method: f.mp.method.name().into(),
                    carrier: f.mp.carrier.name().into(),
                    clear: f.mp.clear,
                    matching: self.ampm_configs.get(&f.name).cloned(),
                    counters,
                    last_record: ex.and_then(|e| e.last_record.get(f.mp.slot as usize).cloned().flatten()),
                }
            })
            .collect();
        Ok(AmpmView {
            node_id: s.node_id,
            time_format: if t.format == ampm::TimeFormat::Ns { "ns" } else { "sec_frac" }.into(),
            interval_bit: t.interval_bit,
            interval_ns: t.interval_ns(),
            sub_bits: t.sub_bits,
            now_ns: now,
            interval,
            color: interval & 1,
            sub_interval: slot,
            max_flows: s.capacity,
            flows,
            export: ex.map(|e| e.view()),
            counters: events_by_name(&self.counters(), "ampm_"),
        })
    }

    /// Adds a monitored flow, or replaces the one with the same name.
    pub fn ampm_add(&mut self, cfg: AmpmFlowConfig) -> Result<AmpmAdded, ApiError> {
        let names = self.port_names();
        let s = self.ampm_setup()?;
        let existing = s.flows.iter().position(|f| f.name == cfg.name);
        if let Some(other) = s.flows.iter().find(|f| f.name != cfg.name && f.mp.flow_mon_id == cfg.flow_mon_id) {
            return Err(ApiError::bad_argument(
                "flow_mon_id",
                crate::ampm::config::shared_id(cfg.flow_mon_id, &other.name),
            ));
        }
        let slot = match existing {
            Some(i) => s.flows[i].mp.slot,
            None => {
                let used: std::collections::HashSet<u32> = s.flows.iter().map(|f| f.mp.slot).collect();
                match (0..s.capacity as u32).find(|x| !used.contains(x)) {
                    Some(x) => x,
                    None => {
                        return Err(ApiError::new(
                            "table_full",
                            None,
                            format!("all {} AM-PM flow slots are in use", s.capacity),
                        ))
                    }
                }
            }
        };
        let flow = cfg.to_flow(&names, slot)?;
        let s = self.spec.ampm.as_mut().ok_or_else(not_configured)?;
        match existing {
            Some(i) => s.flows[i] = flow,
            None => s.flows.push(flow),
        }
        if existing.is_none() {
            if let Some(ex) = &mut self.ampm_exporter {
                ex.rebase(&self.shared, slot as usize);
            }
        }
        self.ampm_configs.insert(cfg.name.clone(), cfg);
        let g = self.commit()?;
        Ok(AmpmAdded { generation: g.generation, slot })
    }

    pub fn ampm_del(&mut self, name: &str) -> Result<Generation, ApiError> {
        let s = self.spec.ampm.as_mut().ok_or_else(not_configured)?;
        let n = s.flows.len();
        s.flows.retain(|f| f.name != name);
        if s.flows.len() == n {
            return Err(ApiError::not_found("name", format!("no AM-PM flow named '{name}'")));
        }
        self.ampm_configs.remove(name);
        self.commit()
    }

    /// The slot tables (one, or all), rows in priority order.
    pub fn slot_tables(&self, table: Option<&str>) -> Result<SlotTables, ApiError> {
        let s = self.ampm_setup()?;
        let names = AmpmSetup::table_names();
        let pick: Vec<usize> = match table {
            Some(t) => vec![table_index(t)?],
            None => (0..names.len()).collect(),
        };
        let tables = pick
            .into_iter()
            .map(|i| {
                let mut rows: Vec<&Rule<SlotAction>> = s.slot_rules[i].iter().collect();
                rows.sort_by_key(|r| std::cmp::Reverse(r.priority));
                SlotTableView {
                    table: names[i].to_string(),
                    lookup: dataplane::classifier::kind_of(&s.slot_rules[i]).into(),
                    rules: rows.iter().map(|r| rule_view(s, r)).collect(),
                }
            })
            .collect();
        Ok(SlotTables { tables })
    }

    /// Adds a slot-table row (or replaces the one with the same name).
    pub fn rule_add(&mut self, a: RuleAdd) -> Result<Generation, ApiError> {
        let ti = table_index(&a.table)?;
        crate::fields::check_name("name", &a.name)?;
        let t = self.ampm_setup()?.timing;
        let bad = |k: &str, e: String| ApiError::bad_argument(k, e);
        // Only an initiator writes marks: the data path applies set_l and
        // set_d there alone, so elsewhere they would be taken and ignored.
        if !a.table.ends_with("-initiator") {
            for (k, v) in [("set_l", a.set_l), ("set_d", a.set_d)] {
                if v.is_some() {
                    return Err(bad(k, format!("only an initiator's table writes marks ('{}' reads them)", a.table)));
                }
            }
        }
        let mark = if a.mark.chars().all(|c| c == '*') {
            None
        } else {
            if a.mark.len() > 2 {
                return Err(bad("mark", "two bits at most: D then L (e.g. \"*1\")".into()));
            }
            let (v, m) = parse_bits(&a.mark, 0).map_err(|e| bad("mark", e))?;
            Some((v as u8, m as u8))
        };
        let reg = match a.reg.as_str() {
            "*" => None,
            "0" => Some(0),
            "1" => Some(1),
            r => return Err(bad("reg", format!("'{r}' is not 0, 1 or *"))),
        };
        let action = SlotAction {
            set_l: a.set_l,
            set_d: a.set_d,
            reg: a.set_reg,
            color: a.color,
            count: a.count,
            timestamp: a.timestamp,
        };
        let time = if a.time.chars().all(|c| c == '*') { "*".to_string() } else { a.time.clone() };
        let rule =
            ampm::user_slot_rule(&t, &a.name, a.priority, &time, mark, reg, action).map_err(|e| bad("rule", e))?;
        let s = self.spec.ampm.as_mut().ok_or_else(not_configured)?;
        let rows = &mut s.slot_rules[ti];
        match rows.iter().position(|r| r.name == a.name) {
            Some(i) => rows[i] = rule,
            None => rows.push(rule),
        }
        self.commit()
    }

    pub fn rule_del(&mut self, table: &str, name: &str) -> Result<Generation, ApiError> {
        let ti = table_index(table)?;
        let s = self.spec.ampm.as_mut().ok_or_else(not_configured)?;
        let n = s.slot_rules[ti].len();
        s.slot_rules[ti].retain(|r| r.name != name);
        if s.slot_rules[ti].len() == n {
            return Err(ApiError::not_found("name", format!("no rule '{name}' in table '{table}'")));
        }
        self.commit()
    }
}
