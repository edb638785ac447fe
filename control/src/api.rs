//! The control API: one dispatcher for every request, whichever front end
//! (unix socket, metrics endpoint) it came from. Requests and responses are
//! JSON objects, one per line:
//!
//! ```text
//! -> {"version":1,"id":7,"cmd":"route_add","args":{"prefix":"10.9.0.0/16","port":"p1","via":"10.0.2.254"}}
//! <- {"version":1,"id":7,"ok":true,"result":{"generation":12}}
//! <- {"version":1,"id":7,"ok":false,"error":{"code":"bad_argument","argument":"via","message":"..."}}
//! ```
//!
//! Error codes: bad_request, unsupported_version, unknown_command,
//! bad_argument, not_found, not_configured, busy, table_full, too_large, internal.

use std::net::IpAddr;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde_json::{json, Map, Value};

use crate::config::{parse_prefix, ConfigError, FlowConfig, NeighbourConfig, RouteConfig};
use crate::server::Request;
use crate::switch::Switch;

pub const PROTOCOL_VERSION: u64 = 1;

/// Every command the API serves (what `intctl` sends).
pub const COMMANDS: &[&str] = &[
    "show_version",
    "show_config",
    "show_ports",
    "show_workers",
    "show_counters",
    "show_drops",
    "show_flows",
    "show_macs",
    "show_routes",
    "show_neighbours",
    "flow_add",
    "flow_del",
    "route_add",
    "route_del",
    "neighbour_add",
    "neighbour_del",
    "port_enable",
    "port_disable",
    "port_impair",
    "clear_counters",
    "capture",
    "metrics",
    "show_int",
    "show_reports",
    "int_watch_add",
    "int_watch_del",
    "int_export",
    "show_ampm",
    "ampm_add",
    "ampm_del",
    "rule_show",
    "rule_add",
    "rule_del",
];

/// A failed request: a code, the argument at fault (if one is), and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub code: &'static str,
    pub argument: Option<String>,
    pub message: String,
}

impl ApiError {
    pub fn new(code: &'static str, argument: Option<String>, message: impl Into<String>) -> ApiError {
        ApiError { code, argument, message: message.into() }
    }
    pub fn bad_argument(arg: &str, message: impl Into<String>) -> ApiError {
        ApiError::new("bad_argument", Some(arg.to_string()), message)
    }
    pub fn not_found(arg: &str, message: impl Into<String>) -> ApiError {
        ApiError::new("not_found", Some(arg.to_string()), message)
    }
    pub fn busy(message: impl Into<String>) -> ApiError {
        ApiError::new("busy", None, message)
    }
    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError::new("internal", None, message)
    }
}

impl From<ConfigError> for ApiError {
    fn from(e: ConfigError) -> ApiError {
        let msg = if e.key.is_empty() { e.reason.clone() } else { format!("{}: {}", e.key, e.reason) };
        ApiError::new("bad_argument", (!e.key.is_empty()).then_some(e.key), msg)
    }
}

/// The response line for a result.
pub fn response(id: &Value, r: Result<Value, ApiError>) -> String {
    match r {
        Ok(v) => json!({"version": PROTOCOL_VERSION, "id": id, "ok": true, "result": v}),
        Err(e) => json!({"version": PROTOCOL_VERSION, "id": id, "ok": false,
                         "error": {"code": e.code, "argument": e.argument, "message": e.message}}),
    }
    .to_string()
}

/// Deserializes `args` into a config item type (unknown arguments rejected).
fn args_as<T: DeserializeOwned>(args: &Map<String, Value>) -> Result<T, ApiError> {
    serde_json::from_value(Value::Object(args.clone())).map_err(|e| {
        let m = e.to_string();
        // serde names the field between backticks: "missing field `port`".
        let arg = m.split('`').nth(1).map(str::to_string);
        ApiError::new("bad_argument", arg, m)
    })
}

fn str_arg<'a>(args: &'a Map<String, Value>, name: &str) -> Result<&'a str, ApiError> {
    match args.get(name) {
        Some(Value::String(s)) => Ok(s),
        Some(_) => Err(ApiError::bad_argument(name, format!("{name} must be a string"))),
        None => Err(ApiError::bad_argument(name, format!("missing argument {name}"))),
    }
}

/// The optional `max` of a table dump (entries per worker; default 1000).
fn max_per_worker(args: &Map<String, Value>) -> Result<usize, ApiError> {
    only(args, &["max"])?;
    match args.get("max") {
        None => Ok(1000),
        Some(v) => v.as_u64().map(|m| m as usize).ok_or_else(|| ApiError::bad_argument("max", "max must be a number")),
    }
}

fn only(args: &Map<String, Value>, allowed: &[&str]) -> Result<(), ApiError> {
    match args.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(k) => Err(ApiError::bad_argument(k, format!("unknown argument {k} (expected: {})", allowed.join(", ")))),
        None => Ok(()),
    }
}

/// Serves one request; the answer goes to `req.reply` (later, for a capture).
pub fn handle(sw: &mut Switch, req: Request) {
    let parsed: Result<Value, _> = serde_json::from_str(&req.line);
    let v = match parsed {
        Ok(v @ Value::Object(_)) => v,
        Ok(_) => {
            return req
                .reply
                .send(response(&Value::Null, Err(ApiError::new("bad_request", None, "request must be a JSON object"))))
        }
        Err(e) => {
            return req
                .reply
                .send(response(&Value::Null, Err(ApiError::new("bad_request", None, format!("malformed JSON: {e}")))))
        }
    };
    let id = v.get("id").cloned().unwrap_or(Value::Null);
    match v.get("version").and_then(Value::as_u64) {
        Some(PROTOCOL_VERSION) => {}
        other => {
            let msg = format!("protocol version {other:?} not supported; this switch speaks {PROTOCOL_VERSION}");
            return req
                .reply
                .send(response(&id, Err(ApiError::new("unsupported_version", Some("version".into()), msg))));
        }
    }
    let Some(cmd) = v.get("cmd").and_then(Value::as_str) else {
        return req.reply.send(response(&id, Err(ApiError::new("bad_request", Some("cmd".into()), "missing \"cmd\""))));
    };
    let empty = Map::new();
    let args = match v.get("args") {
        None | Some(Value::Null) => &empty,
        Some(Value::Object(m)) => m,
        Some(_) => return req.reply.send(response(&id, Err(ApiError::bad_argument("args", "args must be an object")))),
    };
    if cmd == "capture" {
        if let Err((e, reply)) = start_capture(sw, args, id.clone(), req.reply) {
            reply.send(response(&id, Err(e)));
        }
        return;
    }
    let r = dispatch(sw, cmd, args);
    req.reply.send(response(&id, r));
}

fn dispatch(sw: &mut Switch, cmd: &str, args: &Map<String, Value>) -> Result<Value, ApiError> {
    let names = sw.port_names();
    match cmd {
        "show_version" => {
            only(args, &[])?;
            Ok(json!({
                "intswitch": env!("CARGO_PKG_VERSION"),
                "protocol": PROTOCOL_VERSION,
                "dpdk": dataplane::dpdk::dpdk_version(),
                "name": sw.plan().raw.name,
                "mode": sw.plan().mode.name(),
            }))
        }
        "show_config" => serde_json::to_value(&sw.plan().raw).map_err(|e| ApiError::internal(e.to_string())),
        "show_ports" => Ok(sw.ports_json()),
        "show_workers" => Ok(sw.workers_json()),
        "show_counters" => Ok(sw.counters_json()),
        "show_drops" => Ok(sw.drops_json()),
        "show_routes" => Ok(sw.routes_json()),
        "show_neighbours" => Ok(sw.neighbours_json()),
        "show_flows" => sw.flows_json(max_per_worker(args)?),
        "show_macs" => sw.macs_json(max_per_worker(args)?),
        "flow_add" => {
            let f: FlowConfig = args_as(args)?;
            let (key, action) = f.to_rule(&names)?;
            sw.flow_add(key, action)
        }
        "flow_del" => {
            if args.contains_key("action") {
                return Err(ApiError::bad_argument("action", "flow_del takes the flow key only"));
            }
            let mut a = args.clone();
            a.insert("action".into(), "normal".into());
            let f: FlowConfig = args_as(&a)?;
            let key = f.to_key(&names)?;
            sw.flow_del(key)
        }
        "route_add" => {
            let r: RouteConfig = args_as(args)?;
            sw.route_add(r.to_spec(&names)?)
        }
        "route_del" => {
            only(args, &["prefix"])?;
            let (prefix, len) =
                parse_prefix(str_arg(args, "prefix")?).map_err(|e| ApiError::bad_argument("prefix", e))?;
            sw.route_del(prefix, len)
        }
        "neighbour_add" => {
            let n: NeighbourConfig = args_as(args)?;
            sw.neighbour_add(n.to_spec(&names)?)
        }
        "neighbour_del" => {
            only(args, &["ip"])?;
            let s = str_arg(args, "ip")?;
            let ip: IpAddr =
                s.parse().map_err(|_| ApiError::bad_argument("ip", format!("'{s}' is not an IP address")))?;
            sw.neighbour_del(ip)
        }
        "port_enable" | "port_disable" => {
            only(args, &["port"])?;
            sw.port_set_enabled(str_arg(args, "port")?, cmd == "port_enable")
        }
        "port_impair" => {
            only(args, &["port", "netem"])?;
            let imp = dataplane::impair::Impairment::parse(str_arg(args, "netem")?)
                .map_err(|e| ApiError::bad_argument("netem", e))?;
            sw.port_set_impair(str_arg(args, "port")?, imp)
        }
        "clear_counters" => {
            only(args, &[])?;
            Ok(sw.clear_counters())
        }
        "metrics" => Ok(json!({ "text": crate::metrics::render(sw) })),
        "show_int" => {
            only(args, &[])?;
            sw.int_json()
        }
        "show_reports" => {
            only(args, &[])?;
            sw.reports_json()
        }
        "int_watch_add" => {
            let w: crate::int::config::WatchConfig = args_as(args)?;
            sw.int_watch_add(w.to_rule(&names)?)
        }
        "int_watch_del" => {
            only(args, &["name"])?;
            sw.int_watch_del(str_arg(args, "name")?)
        }
        "int_export" => {
            only(args, &["paused"])?;
            let paused = args
                .get("paused")
                .and_then(Value::as_bool)
                .ok_or_else(|| ApiError::bad_argument("paused", "paused must be true or false"))?;
            sw.int_export_pause(paused)
        }
        "show_ampm" => {
            only(args, &[])?;
            sw.ampm_json()
        }
        "ampm_add" => {
            let f: crate::ampm::config::AmpmFlowConfig = args_as(args)?;
            sw.ampm_add(f)
        }
        "ampm_del" => {
            only(args, &["name"])?;
            sw.ampm_del(str_arg(args, "name")?)
        }
        "rule_show" => {
            only(args, &["table"])?;
            sw.rule_json(args.get("table").and_then(Value::as_str))
        }
        "rule_add" => {
            let r: crate::ampm::api::SlotRuleArgs = args_as(args)?;
            sw.rule_add(r)
        }
        "rule_del" => {
            only(args, &["table", "name"])?;
            sw.rule_del(str_arg(args, "table")?, str_arg(args, "name")?)
        }
        _ => Err(ApiError::new(
            "unknown_command",
            Some("cmd".into()),
            format!("unknown command '{cmd}' (known: {})", COMMANDS.join(", ")),
        )),
    }
}

fn start_capture(
    sw: &mut Switch,
    args: &Map<String, Value>,
    id: Value,
    reply: crate::server::Reply,
) -> Result<(), (ApiError, crate::server::Reply)> {
    let parse = || -> Result<(u16, bool, usize, String, Duration), ApiError> {
        only(args, &["port", "direction", "count", "out", "timeout_s"])?;
        let port = sw.port_index(str_arg(args, "port")?)?;
        let tx = match args.get("direction").and_then(Value::as_str).unwrap_or("rx") {
            "rx" => false,
            "tx" => true,
            d => return Err(ApiError::bad_argument("direction", format!("'{d}' is not rx or tx"))),
        };
        let count = args
            .get("count")
            .and_then(Value::as_u64)
            .filter(|c| (1..=10_000_000).contains(c))
            .ok_or_else(|| ApiError::bad_argument("count", "count must be a number from 1 to 10000000"))?;
        let out = str_arg(args, "out")?.to_string();
        if !out.starts_with('/') {
            return Err(ApiError::bad_argument("out", "out must be an absolute path"));
        }
        let t = match args.get("timeout_s") {
            None => 10.0,
            Some(v) => v.as_f64().filter(|t| *t > 0.0 && *t <= 300.0).ok_or_else(|| {
                ApiError::bad_argument("timeout_s", "timeout_s must be a number of seconds, 0 < t <= 300")
            })?,
        };
        Ok((port, tx, count as usize, out, Duration::from_secs_f64(t)))
    };
    match parse() {
        Ok((port, tx, count, out, timeout)) => crate::capture::start(sw, port, tx, count, out, timeout, id, reply),
        Err(e) => Err((e, reply)),
    }
}
