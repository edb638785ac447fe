//! The control API's protocol: requests and responses are JSON objects, one
//! per line, whichever front end (unix socket, metrics endpoint) carries them:
//!
//! ```text
//! -> {"version":1,"id":7,"cmd":"route_add","args":{"prefix":"10.9.0.0/16","port":"p1","via":"10.0.2.254"}}
//! <- {"version":1,"id":7,"ok":true,"result":{"generation":12}}
//! <- {"version":1,"id":7,"ok":false,"error":{"code":"bad_argument","argument":"via","message":"..."}}
//! ```
//!
//! Every command is a type: its arguments are a struct implementing
//! [`Command`], whose `Reply` is the struct its result deserializes into. The
//! switch (`dispatch`), `intctl` and the tests share these types, so a field
//! is named once. This module and its children depend on no part of the
//! switch: `intctl` links them without the runtime.
//!
//! Error codes: bad_request, unsupported_version, unknown_command,
//! bad_argument, not_found, not_configured, busy, table_full, too_large, internal.

pub mod views;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use crate::fields::ConfigError;

pub const PROTOCOL_VERSION: u64 = 1;

/// A command of the API: its arguments are `Self`, its result `Reply`.
pub trait Command: Serialize + DeserializeOwned {
    /// The `cmd` of the request line.
    const NAME: &'static str;
    type Reply: Serialize + DeserializeOwned;
}

/// Declares that `$args` is command `$name` answered by `$reply`.
macro_rules! command {
    ($args:ty, $name:literal, $reply:ty) => {
        impl $crate::api::Command for $args {
            const NAME: &'static str = $name;
            type Reply = $reply;
        }
    };
}
pub(crate) use command;

/// A command without arguments.
macro_rules! no_args {
    ($($t:ident),*) => {$(
        #[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
        #[serde(deny_unknown_fields)]
        pub struct $t {}
    )*};
}
pub(crate) use no_args;

/// What a table change answers: the generation every worker now uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Generation {
    pub generation: u64,
}

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
    /// A feature's commands on a switch without its config section.
    pub fn not_configured(feature: &str, section: &str) -> ApiError {
        ApiError::new(
            "not_configured",
            None,
            format!("{feature} is not configured on this switch (no [{section}] section)"),
        )
    }
}

impl From<ConfigError> for ApiError {
    fn from(e: ConfigError) -> ApiError {
        let msg = if e.key.is_empty() { e.reason.clone() } else { format!("{}: {}", e.key, e.reason) };
        ApiError::new("bad_argument", (!e.key.is_empty()).then_some(e.key), msg)
    }
}

/// The error object of a response line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    pub code: String,
    pub argument: Option<String>,
    pub message: String,
}

/// A response line as it travels.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Response {
    pub version: u64,
    pub id: Value,
    pub ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorBody>,
}

/// The response line for a result.
pub fn response(id: &Value, r: Result<Value, ApiError>) -> String {
    let (ok, result, error) = match r {
        Ok(v) => (true, Some(v), None),
        Err(e) => (false, None, Some(ErrorBody { code: e.code.into(), argument: e.argument, message: e.message })),
    };
    let line = Response { version: PROTOCOL_VERSION, id: id.clone(), ok, result, error };
    // A Value and strings always serialize.
    serde_json::to_string(&line).unwrap_or_default()
}

/// The request line for command `c`.
pub fn request_line<C: Command>(id: u64, c: &C) -> Result<String, serde_json::Error> {
    Ok(json!({"version": PROTOCOL_VERSION, "id": id, "cmd": C::NAME, "args": serde_json::to_value(c)?}).to_string())
}

/// A request line taken apart: its id, command and arguments (an object;
/// absent or null arguments are the empty object).
#[derive(Debug)]
pub struct Envelope {
    pub id: Value,
    pub cmd: String,
    pub args: Map<String, Value>,
}

impl Envelope {
    /// Parses a request line; an error comes with the id when there was one.
    pub fn parse(line: &str) -> Result<Envelope, (Value, ApiError)> {
        let v = match serde_json::from_str::<Value>(line) {
            Ok(Value::Object(v)) => v,
            Ok(_) => return Err((Value::Null, ApiError::new("bad_request", None, "request must be a JSON object"))),
            Err(e) => return Err((Value::Null, ApiError::new("bad_request", None, format!("malformed JSON: {e}")))),
        };
        let id = v.get("id").cloned().unwrap_or(Value::Null);
        match v.get("version").and_then(Value::as_u64) {
            Some(PROTOCOL_VERSION) => {}
            other => {
                let msg = format!("protocol version {other:?} not supported; this switch speaks {PROTOCOL_VERSION}");
                return Err((id, ApiError::new("unsupported_version", Some("version".into()), msg)));
            }
        }
        let Some(cmd) = v.get("cmd").and_then(Value::as_str) else {
            return Err((id, ApiError::new("bad_request", Some("cmd".into()), "missing \"cmd\"")));
        };
        let args = match v.get("args") {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(m)) => m.clone(),
            Some(_) => return Err((id, ApiError::bad_argument("args", "args must be an object"))),
        };
        Ok(Envelope { cmd: cmd.to_string(), id, args })
    }

    /// The arguments as command `C`'s (unknown arguments refused; errors
    /// name the argument at fault).
    pub fn command<C: Command>(&self) -> Result<C, ApiError> {
        args_as(&self.args)
    }
}

/// Deserializes `args` into a typed value; the error names the argument
/// at fault (serde's path for a wrong type, the backquoted field for a
/// missing or unknown one).
pub fn args_as<T: DeserializeOwned>(args: &Map<String, Value>) -> Result<T, ApiError> {
    serde_path_to_error::deserialize(Value::Object(args.clone())).map_err(|e| {
        let path = e.path().to_string();
        let m = e.inner().to_string();
        let arg = if path.is_empty() || path == "." {
            // "missing field `port`", "unknown field `colour`, expected ...".
            m.split('`').nth(1).map(str::to_string)
        } else {
            Some(path.split('.').next().unwrap_or(&path).to_string())
        };
        let message = match &arg {
            Some(a) if !m.contains(a.as_str()) => format!("{a}: {m}"),
            _ => m,
        };
        ApiError::new("bad_argument", arg, message)
    })
}

/// The reply of command `C` from a response's result.
pub fn reply_of<C: Command>(result: Value) -> Result<C::Reply, serde_json::Error> {
    serde_json::from_value(result)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::views::{RouteAdd, ShowFlows, ShowPorts};

    #[test]
    fn arguments_are_typed_and_errors_name_the_argument() {
        let m = |v: Value| v.as_object().unwrap().clone();
        let e = args_as::<RouteAdd>(&m(json!({"prefix": "10.0.0.0/8", "port": "p1", "colour": 1}))).unwrap_err();
        assert_eq!((e.code, e.argument.as_deref()), ("bad_argument", Some("colour")));
        let e = args_as::<RouteAdd>(&m(json!({"prefix": "10.0.0.0/8"}))).unwrap_err();
        assert_eq!(e.argument.as_deref(), Some("port"));
        let e = args_as::<ShowFlows>(&m(json!({"max": "7"}))).unwrap_err();
        assert_eq!(e.argument.as_deref(), Some("max"), "{}", e.message);
        assert_eq!(args_as::<ShowFlows>(&m(json!({}))).unwrap().max, None);
        assert!(args_as::<ShowPorts>(&m(json!({"x": 1}))).is_err());
    }

    #[test]
    fn envelopes_keep_the_id_of_a_bad_request() {
        let (id, e) = Envelope::parse(r#"{"version":2,"id":5,"cmd":"show_ports"}"#).unwrap_err();
        assert_eq!((id, e.code), (json!(5), "unsupported_version"));
        assert_eq!(Envelope::parse("[1]").unwrap_err().1.code, "bad_request");
        let ok = Envelope::parse(r#"{"version":1,"id":"a","cmd":"show_ports","args":null}"#).unwrap();
        assert_eq!((ok.cmd.as_str(), ok.args.len()), ("show_ports", 0));
        let line = request_line(3, &ShowFlows { max: Some(9) }).unwrap();
        let back = Envelope::parse(&line).unwrap();
        assert_eq!(back.command::<ShowFlows>().unwrap().max, Some(9));
    }
}
