//! Routes each request of the control API to its operation: the argument
//! struct of its command (`api`), the operation on the switch (`switch::ops`
//! and the features' `ops`), the reply serialized into the response line.
//! Runs on the control core between control rounds.

use std::net::IpAddr;

use serde_json::Value;

use crate::ampm::api as ampm;
use crate::api::views as v;
use crate::api::{response, ApiError, Command, Envelope};
use crate::capture;
use crate::fields::parse_network;
use crate::gpint::api as gpint;
use crate::int::analytics::api as ia;
use crate::int::api as int;
use crate::label::api as label;
use crate::server::{HttpCounters, Reply, Request};
use crate::switch::Switch;

/// What the handlers act on.
pub struct Context<'a> {
    pub sw: &'a mut Switch,
    pub capture: &'a mut capture::Slot,
    /// The metrics endpoint's counters, when it runs.
    pub http: Option<&'a HttpCounters>,
}

/// Serves one request; the answer goes to its reply (later, for a capture).
pub fn handle(cx: &mut Context, req: Request) {
    match req {
        Request::Metrics { reply } => reply.send(crate::metrics::render(cx.sw, cx.http)),
        Request::Api { line, reply } => match Envelope::parse(&line) {
            Err((id, e)) => reply.send(response(&id, Err(e))),
            Ok(env) if env.cmd == v::Capture::NAME => start_capture(cx, env, reply),
            Ok(env) => reply.send(response(&env.id, dispatch(cx, &env))),
        },
    }
}

fn start_capture(cx: &mut Context, env: Envelope, reply: Reply) {
    let a: v::Capture = match env.command() {
        Ok(a) => a,
        Err(e) => return reply.send(response(&env.id, Err(e))),
    };
    if let Err((e, reply)) = capture::start(cx.sw, cx.capture, &a, env.id.clone(), reply) {
        reply.send(response(&env.id, Err(e)));
    }
}

/// Parses the arguments as command `C`'s, runs `op`, serializes its reply.
fn serve<C: Command>(env: &Envelope, op: impl FnOnce(C) -> Result<C::Reply, ApiError>) -> Result<Value, ApiError> {
    let reply = op(env.command::<C>()?)?;
    serde_json::to_value(reply).map_err(|e| ApiError::internal(format!("serializing the reply: {e}")))
}

fn ip_arg(name: &str, s: &str) -> Result<IpAddr, ApiError> {
    s.parse().map_err(|_| ApiError::bad_argument(name, format!("'{s}' is not an IP address")))
}

fn dump_max(max: Option<u64>) -> usize {
    max.unwrap_or(v::DUMP_MAX).min(usize::MAX as u64) as usize
}

/// A command's handler: parses its arguments, runs its operation.
type Handler = fn(&mut Context, &Envelope) -> Result<Value, ApiError>;

/// Every command and its handler (capture's answer comes later: it is
/// started in `handle`, and here only for the list).
const ROUTES: &[(&str, Handler)] = &[
    (v::ShowVersion::NAME, |cx, env| serve(env, |_: v::ShowVersion| Ok(cx.sw.version()))),
    (v::ShowConfig::NAME, |cx, env| serve(env, |_: v::ShowConfig| Ok(cx.sw.plan().raw.clone()))),
    (v::ShowPorts::NAME, |cx, env| serve(env, |_: v::ShowPorts| Ok(cx.sw.port_views()))),
    (v::ShowWorkers::NAME, |cx, env| serve(env, |_: v::ShowWorkers| Ok(cx.sw.worker_views(&cx.sw.worker_counters())))),
    (v::ShowCounters::NAME, |cx, env| serve(env, |_: v::ShowCounters| Ok(cx.sw.counters_view()))),
    (v::ShowDrops::NAME, |cx, env| serve(env, |_: v::ShowDrops| Ok(cx.sw.drops_view()))),
    (v::ShowRoutes::NAME, |cx, env| serve(env, |a: v::ShowRoutes| Ok(cx.sw.route_views(dump_max(a.max))))),
    (v::ShowNeighbours::NAME, |cx, env| serve(env, |_: v::ShowNeighbours| Ok(cx.sw.neighbour_views()))),
    (v::ShowFlows::NAME, |cx, env| serve(env, |a: v::ShowFlows| cx.sw.flow_views(dump_max(a.max)))),
    (v::ShowMacs::NAME, |cx, env| serve(env, |a: v::ShowMacs| cx.sw.mac_views(dump_max(a.max)))),
    (v::FlowAdd::NAME, |cx, env| {
        serve(env, |a: v::FlowAdd| {
            let (key, action) = a.0.to_rule(&cx.sw.port_names())?;
            cx.sw.flow_add(key, action)
        })
    }),
    (v::FlowDel::NAME, |cx, env| serve(env, |a: v::FlowDel| cx.sw.flow_del(a.as_flow().to_key(&cx.sw.port_names())?))),
    (v::RouteAdd::NAME, |cx, env| serve(env, |a: v::RouteAdd| cx.sw.route_add(a.0.to_spec(&cx.sw.port_names())?))),
    (v::RouteDel::NAME, |cx, env| {
        serve(env, |a: v::RouteDel| {
            let (prefix, len) = parse_network(&a.prefix).map_err(|e| ApiError::bad_argument("prefix", e))?;
            cx.sw.route_del(prefix, len)
        })
    }),
    (v::RouteLoad::NAME, |cx, env| serve(env, |a: v::RouteLoad| cx.sw.route_load(&a.path, a.replace))),
    (v::RouteGet::NAME, |cx, env| serve(env, |a: v::RouteGet| Ok(cx.sw.route_get(ip_arg("address", &a.address)?)))),
    (v::NeighbourAdd::NAME, |cx, env| {
        serve(env, |a: v::NeighbourAdd| cx.sw.neighbour_add(a.0.to_spec(&cx.sw.port_names())?))
    }),
    (v::NeighbourDel::NAME, |cx, env| serve(env, |a: v::NeighbourDel| cx.sw.neighbour_del(ip_arg("ip", &a.ip)?))),
    (v::PortEnable::NAME, |cx, env| serve(env, |a: v::PortEnable| cx.sw.port_set_enabled(&a.port, true))),
    (v::PortDisable::NAME, |cx, env| serve(env, |a: v::PortDisable| cx.sw.port_set_enabled(&a.port, false))),
    (v::PortImpair::NAME, |cx, env| {
        serve(env, |a: v::PortImpair| {
            let imp = dataplane::impair::Impairment::parse(&a.netem).map_err(|e| ApiError::bad_argument("netem", e))?;
            cx.sw.port_set_impair(&a.port, imp)
        })
    }),
    (v::ClearCounters::NAME, |cx, env| serve(env, |_: v::ClearCounters| Ok(cx.sw.clear_counters()))),
    (v::Capture::NAME, |_, _| Err(ApiError::internal("capture is started by handle"))),
    (v::Metrics::NAME, |cx, env| {
        serve(env, |_: v::Metrics| Ok(v::MetricsText { text: crate::metrics::render(cx.sw, cx.http) }))
    }),
    (int::ShowInt::NAME, |cx, env| serve(env, |_: int::ShowInt| cx.sw.int_view())),
    (int::ShowReports::NAME, |cx, env| serve(env, |_: int::ShowReports| cx.sw.reports_view())),
    (gpint::ShowGpint::NAME, |cx, env| serve(env, |_: gpint::ShowGpint| cx.sw.gpint_view())),
    (label::ShowLabel::NAME, |cx, env| serve(env, |_: label::ShowLabel| cx.sw.label_view())),
    (label::LabelSetShift::NAME, |cx, env| {
        serve(env, |a: label::LabelSetShift| cx.sw.label_set_shift(&a.port, a.shift))
    }),
    (int::IntWatchAdd::NAME, |cx, env| {
        serve(env, |a: int::IntWatchAdd| cx.sw.int_watch_add(a.0.to_rule(&cx.sw.port_names())?))
    }),
    (int::IntWatchDel::NAME, |cx, env| serve(env, |a: int::IntWatchDel| cx.sw.int_watch_del(&a.name))),
    (int::IntExport::NAME, |cx, env| serve(env, |a: int::IntExport| cx.sw.int_export_pause(a.paused))),
    (ia::ShowIntAnalytics::NAME, |cx, env| serve(env, |_: ia::ShowIntAnalytics| cx.sw.analytics_view())),
    (ia::IntFlowsFlush::NAME, |cx, env| serve(env, |_: ia::IntFlowsFlush| cx.sw.int_flows_flush())),
    (ia::IntFlowShow::NAME, |cx, env| serve(env, |a: ia::IntFlowShow| cx.sw.int_flow_show(&a))),
    (ia::IntEventSet::NAME, |cx, env| serve(env, |a: ia::IntEventSet| cx.sw.int_event_set(&a))),
    (ia::IntEventShow::NAME, |cx, env| serve(env, |_: ia::IntEventShow| cx.sw.int_event_show())),
    (ia::IntDetectAdd::NAME, |cx, env| serve(env, |a: ia::IntDetectAdd| cx.sw.int_detect_add(&a.0))),
    (ia::IntDetectDel::NAME, |cx, env| serve(env, |a: ia::IntDetectDel| cx.sw.int_detect_del(&a.name))),
    (ia::IntDetectShow::NAME, |cx, env| serve(env, |_: ia::IntDetectShow| cx.sw.int_detect_show())),
    (ia::IntExprAdd::NAME, |cx, env| serve(env, |a: ia::IntExprAdd| cx.sw.int_expr_add(&a.0))),
    (ia::IntExprDel::NAME, |cx, env| serve(env, |a: ia::IntExprDel| cx.sw.int_expr_del(&a.name))),
    (ia::IntExprShow::NAME, |cx, env| serve(env, |_: ia::IntExprShow| cx.sw.int_expr_show())),
    (ia::ShowIntHistograms::NAME, |cx, env| serve(env, |a: ia::ShowIntHistograms| cx.sw.int_histograms(&a))),
    (ampm::ShowAmpm::NAME, |cx, env| serve(env, |_: ampm::ShowAmpm| cx.sw.ampm_view())),
    (ampm::AmpmAdd::NAME, |cx, env| serve(env, |a: ampm::AmpmAdd| cx.sw.ampm_add(a.0))),
    (ampm::AmpmDel::NAME, |cx, env| serve(env, |a: ampm::AmpmDel| cx.sw.ampm_del(&a.name))),
    (ampm::RuleShow::NAME, |cx, env| serve(env, |a: ampm::RuleShow| cx.sw.slot_tables(a.table.as_deref()))),
    (ampm::RuleAdd::NAME, |cx, env| serve(env, |a: ampm::RuleAdd| cx.sw.rule_add(a))),
    (ampm::RuleDel::NAME, |cx, env| serve(env, |a: ampm::RuleDel| cx.sw.rule_del(&a.table, &a.name))),
];

/// Every command the API serves (what `intctl` sends), in the table's order.
pub fn commands() -> impl Iterator<Item = &'static str> {
    ROUTES.iter().map(|(name, _)| *name)
}

fn dispatch(cx: &mut Context, env: &Envelope) -> Result<Value, ApiError> {
    match ROUTES.iter().find(|(name, _)| *name == env.cmd) {
        Some((_, handler)) => handler(cx, env),
        None => Err(ApiError::new(
            "unknown_command",
            Some("cmd".into()),
            format!("unknown command '{}' (known: {})", env.cmd, commands().collect::<Vec<_>>().join(", ")),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_command_is_routed_once() {
        let mut names: Vec<&str> = commands().collect();
        let n = names.len();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), n, "a command routed twice");
        assert!(names.contains(&crate::api::views::Capture::NAME));
    }
}
